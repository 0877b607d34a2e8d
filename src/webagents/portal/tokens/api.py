"""Tokens over HTTP: the published keys at `/.well-known/jwks.json`, what an agent's
verifier checks a token against. Public: it verifies nobody. (The exchange of an API key for
an access token is the command line's sign-in, cli_login/api.py; whether an agent's owner
allows others to call it, agents/api.py.)"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from ..db.requests import Db
from ..settings import PortalSettings
from . import service

router = APIRouter()


@router.get("/.well-known/jwks.json")
def jwks(request: Request, response: Response, db: Db) -> dict[str, Any]:
    response.headers["Cache-Control"] = f"public, max-age={service.JWKS_MAX_AGE}"
    settings: PortalSettings = request.app.state.settings
    return service.jwks(db, settings)
