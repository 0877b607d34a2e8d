"""Tokens over HTTP: what an agent's verifier reads from the portal (the published keys at
`/.well-known/jwks.json`, and whether the agent's owner allows others to call it), and the
exchange of an API key for an access token (`POST /api/auth/cli/token`, SPEC P3's
`login --token`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from ...portal_wire.accounts import AgentAccess, CliToken
from ..accounts.auth import ApiKeyCaller, address_of
from ..agents.access import allows_others
from ..db.engine import Db
from ..settings import PortalSettings
from . import service

router = APIRouter()


def _settings(request: Request) -> PortalSettings:
    settings: PortalSettings = request.app.state.settings
    return settings


@router.get("/.well-known/jwks.json")
def jwks(request: Request, response: Response, db: Db) -> dict[str, Any]:
    response.headers["Cache-Control"] = f"public, max-age={service.JWKS_MAX_AGE}"
    return service.jwks(db, _settings(request))


@router.get("/api/agents/{agent_id}/access")
def agent_access(response: Response, db: Db, agent_id: str) -> AgentAccess:
    """Whether the agent's owner allows other portal users to call it, as it stands now: the
    agent's `auth` skill asks before it serves a user's token, so that turning others off
    holds at once, for tokens minted before too. Public, like the keys: it tells what the
    portal's 403 to anyone asking for a token would tell."""
    response.headers["Cache-Control"] = "no-store"
    return AgentAccess(allowOthers=allows_others(db, agent_id))


@router.post("/api/auth/cli/token")
def cli_token(request: Request, scope: ApiKeyCaller, db: Db) -> CliToken:
    settings = _settings(request)
    issued = service.issue(
        db,
        settings,
        issuer=service.issuer_of(settings),
        subject=scope.user_id,
        username=scope.username,
        api_key_id=scope.api_key_id,
        sign_in=("key", address_of(request)),
    )
    return CliToken(access_token=issued.token, username=scope.username, user_id=str(scope.user_id))
