"""Agents over the API (SPEC P4): `GET/POST /api/agents`, `GET/PATCH/DELETE
/api/agents/{id}`, and an agent's keys (`GET/POST /api/agents/{id}/keys`, `DELETE
/api/agents/{id}/keys/{keyId}`), for a user's API key or access token; and, public, whether
the agent's owner allows others to call it (`GET /api/agents/{id}/access`, what the agent's
verifier asks)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict

from ...portal_wire.accounts import AgentAccess
from ..accounts.dependencies import ApiCaller
from ..db.requests import Db
from ..settings import PortalSettings
from ..tokens.service import issuer_of
from . import keys, service
from .access import allows_others
from .schemas import (
    AgentCreated,
    AgentIn,
    AgentList,
    AgentPatch,
    KeyIn,
    KeyList,
    KeyMade,
    OneAgent,
)

router = APIRouter(prefix="/api/agents")


class AgentTokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str


@router.post("/token")
def agent_token(
    request: Request, scope: ApiCaller, db: Db, body: AgentTokenIn
) -> dict[str, object]:
    """A token to call an agent as this user (its `auth` skill verifies it)."""
    settings: PortalSettings = request.app.state.settings
    issuer = issuer_of(settings)
    return service.agent_token(db, settings, scope, issuer, body.agent)


@router.get("")
def list_agents(scope: ApiCaller, db: Db) -> AgentList:
    return AgentList(agents=service.list_agents(db, scope))


@router.post("", status_code=201)
def create_agent(scope: ApiCaller, db: Db, body: AgentIn) -> AgentCreated:
    return service.create_agent(db, scope, body)


@router.get("/{agent_id}/access")
def agent_access(response: Response, db: Db, agent_id: str) -> AgentAccess:
    """Whether the agent's owner allows other portal users to call it, as it stands now: the
    agent's `auth` skill asks before it serves a user's token, so that turning others off
    holds at once, for tokens minted before too. Public, like the portal's published keys:
    it tells what the portal's 403 to anyone asking for a token would tell."""
    response.headers["Cache-Control"] = "no-store"
    return AgentAccess(allowOthers=allows_others(db, agent_id))


@router.get("/{agent_id}")
def get_agent(scope: ApiCaller, db: Db, agent_id: str) -> OneAgent:
    return OneAgent(agent=service.agent_out(service.get_agent(db, scope, agent_id)))


@router.patch("/{agent_id}")
def update_agent(scope: ApiCaller, db: Db, agent_id: str, body: AgentPatch) -> OneAgent:
    return OneAgent(agent=service.update_agent(db, scope, agent_id, body))


@router.delete("/{agent_id}")
def delete_agent(scope: ApiCaller, db: Db, agent_id: str) -> dict[str, bool]:
    service.delete_agent(db, scope, agent_id)
    return {"deleted": True}


# An agent's keys, one per machine: `webagents publish` on another machine adds one.


@router.get("/{agent_id}/keys")
def list_keys(scope: ApiCaller, db: Db, agent_id: str) -> KeyList:
    return KeyList(keys=[keys.key_out(key) for key in keys.list_keys(db, scope, agent_id)])


@router.post("/{agent_id}/keys", status_code=201)
def add_key(scope: ApiCaller, db: Db, agent_id: str, body: KeyIn) -> KeyMade:
    return keys.add_key(db, scope, agent_id, body.name)


@router.delete("/{agent_id}/keys/{key_id}")
def revoke_key(scope: ApiCaller, db: Db, agent_id: str, key_id: str) -> dict[str, bool]:
    keys.revoke_key(db, scope, agent_id, key_id)
    return {"revoked": True}
