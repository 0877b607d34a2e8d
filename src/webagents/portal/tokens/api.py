"""Tokens over HTTP: the published keys (`/.well-known/jwks.json`) and the exchange of an
API key for an access token (`POST /api/auth/cli/token`, SPEC P3's `login --token`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from ..accounts.auth import ApiKeyCaller, Db
from ..settings import PortalSettings
from . import service

router = APIRouter()


class CliToken(BaseModel):
    access_token: str
    username: str
    user_id: str


def _settings(request: Request) -> PortalSettings:
    settings: PortalSettings = request.app.state.settings
    return settings


@router.get("/.well-known/jwks.json")
def jwks(request: Request, response: Response, db: Db) -> dict[str, Any]:
    response.headers["Cache-Control"] = f"public, max-age={service.JWKS_MAX_AGE}"
    return service.jwks(db, _settings(request))


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
    )
    return CliToken(access_token=issued.token, username=scope.username, user_id=str(scope.user_id))
