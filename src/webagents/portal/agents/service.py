"""The rules of agents: names unique on the portal (a name given up stays its owner's for a
while: names.py), a first key made at creation and shown once (one more per machine:
keys.py), another account's agent answers 404."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.tables import Agent
from ..errors import BadInput, Conflict, NotFound
from ..scope import AccountScope
from ..settings import PortalSettings
from ..storable import check_storable
from ..tokens import agent_keys
from ..tokens import service as tokens
from . import names
from .access import tier_of
from .repository import Agents, PublicAgents
from .schemas import AgentCreated, AgentIn, AgentOut, AgentPatch, check_agent_name
from .skills_field import check_skills


def agent_out(agent: Agent) -> AgentOut:
    return AgentOut(
        id=agent.id,
        username=agent.name,
        name=agent.name,
        description=agent.description,
        instructions=agent.instructions,
        model=agent.model,
        skills=agent.skills,
        allowOthers=agent.allow_others,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
    )


def _taken(name: str) -> Conflict:
    return Conflict(
        f"the agent name {name!r} is taken on this portal (by another account's agent, or "
        "kept for the account that gave it up lately): choose another name: in its AGENT.md",
        code="agent_name_taken",
    )


# What a PATCH must send instead of null (only `model` may be null: the agent's default).
_NOT_NULL = {
    "name": "a name",
    "description": 'a string ("" for none)',
    "instructions": 'a string ("" for none)',
    "skills": "a list or a mapping ([] or {} for none)",
    "allowOthers": "true or false",
}
# PATCH fields whose column is named otherwise.
_COLUMNS = {"allowOthers": "allow_others"}


def list_agents(db: Session, scope: AccountScope) -> list[AgentOut]:
    return [agent_out(agent) for agent in Agents(db, scope).all()]


def get_agent(db: Session, scope: AccountScope, agent_id: str) -> Agent:
    try:
        wanted = uuid.UUID(agent_id)
    except ValueError:
        wanted = None
    agent = Agents(db, scope).get(wanted) if wanted is not None else None
    if agent is None:
        raise NotFound(
            "you have no such agent on this portal: publish it (webagents publish), or see "
            "your agents with GET /api/agents"
        )
    return agent


def _check_storable(given: AgentIn | AgentPatch) -> None:
    """The agent's text fields hold text a database can keep (a NUL was PostgreSQL's 500);
    skills are checked with their shape (skills_field)."""
    for field in ("description", "instructions", "model"):
        check_storable(field, getattr(given, field))


def create_agent(db: Session, scope: AccountScope, given: AgentIn) -> AgentCreated:
    name = check_agent_name(given.name)
    _check_storable(given)
    if not names.free_for(db, scope, name):
        raise _taken(name)
    now = datetime.now(UTC)
    agent = Agent(
        name=name,
        description=given.description,
        instructions=given.instructions,
        model=given.model,
        skills=check_skills(given.skills),
        created_at=now,
        updated_at=now,
    )
    try:
        with db.begin_nested():
            Agents(db, scope).add(agent)
    except IntegrityError:
        raise _taken(name) from None
    names.taken_by_owner(db, scope, name)
    made = agent_keys.AgentKeys(db, scope, agent).make(given.keyName)
    return AgentCreated(agent=agent_out(agent), rawApiKey=made.raw)


def update_agent(db: Session, scope: AccountScope, agent_id: str, patch: AgentPatch) -> AgentOut:
    agent = get_agent(db, scope, agent_id)
    _check_storable(patch)
    changes = patch.model_dump(exclude_unset=True)
    for field, value in changes.items():
        if value is None and field in _NOT_NULL:
            raise BadInput(
                f"{field} cannot be null: send {_NOT_NULL[field]}, or leave {field} out to "
                "keep it as it is",
                code="null_field",
            )
    if "skills" in changes:
        changes["skills"] = check_skills(changes["skills"])
    if "name" in changes and changes["name"] != agent.name:
        name = check_agent_name(str(changes["name"]))
        if not names.free_for(db, scope, name):
            raise _taken(name)
        names.retire(db, scope, agent.name)
        names.taken_by_owner(db, scope, name)
    for field, value in changes.items():
        setattr(agent, _COLUMNS.get(field, field), value)
    agent.updated_at = datetime.now(UTC)
    db.flush()
    return agent_out(agent)


def delete_agent(db: Session, scope: AccountScope, agent_id: str) -> None:
    agent = get_agent(db, scope, agent_id)
    names.retire(db, scope, agent.name)
    Agents(db, scope).remove(agent)


def agent_token(
    db: Session, settings: PortalSettings, scope: AccountScope, issuer: str, name: str
) -> dict[str, object]:
    """A token to call the agent `name` as this user: `aud` is the agent, `tier` says
    whether the user owns it. The agent's `auth` skill verifies it against the JWKS."""
    agent = PublicAgents(db).named(name)
    if agent is None:
        raise NotFound(f"there is no agent {name!r} on this portal")
    tier = tier_of(agent, scope)  # a 403 where the owner has not allowed others
    issued = tokens.issue(
        db,
        settings,
        issuer=issuer,
        subject=scope.user_id,
        username=scope.username,
        audience=f"agent:{agent.id}",
        extra={"tier": tier},
    )
    return {
        "access_token": issued.token,
        "agent_id": str(agent.id),
        "agent_name": agent.name,
        "tier": tier,
        "expires_in": int(settings.agent_token_lifetime.total_seconds()),
    }
