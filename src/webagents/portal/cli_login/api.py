"""The command line's sign-in over the API: the device grant's two endpoints (RFC 8628,
answered in its own JSON shape), the exchange of an API key for an access token
(`POST /api/auth/cli/token`, SPEC P3's `login --token`), and logout."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import JSONResponse

from ...portal_wire.accounts import CliToken, Revoked
from ..accounts.dependencies import ApiCaller, ApiKeyCaller, address_of
from ..db.requests import Db
from ..settings import PortalSettings
from ..tokens import service as tokens
from . import service

router = APIRouter(prefix="/api/auth")


def _settings(request: Request) -> PortalSettings:
    settings: PortalSettings = request.app.state.settings
    return settings


def _issuer(request: Request) -> str:
    return tokens.issuer_of(_settings(request))


@router.post("/device/code")
def device_code(request: Request, db: Db) -> dict[str, Any]:
    return service.start_device(db, _issuer(request))


@router.post("/device/token", response_model=None)
def device_token(
    request: Request,
    db: Db,
    grant_type: Annotated[str, Form()] = "",
    device_code: Annotated[str, Form()] = "",
) -> dict[str, Any] | JSONResponse:
    try:
        return service.poll_device(
            db, _settings(request), _issuer(request), grant_type, device_code, address_of(request)
        )
    except service.DeviceGrantError as exc:
        # Answered, not raised: the poll's time is kept (slow_down needs it).
        return JSONResponse(
            {"error": exc.code, "error_description": exc.message},
            status_code=400,
            headers={"Cache-Control": "no-store"},
        )


@router.post("/cli/token")
def cli_token(request: Request, scope: ApiKeyCaller, db: Db) -> CliToken:
    issued = tokens.issue(
        db,
        _settings(request),
        issuer=_issuer(request),
        subject=scope.user_id,
        username=scope.username,
        api_key_id=scope.api_key_id,
        sign_in=("key", address_of(request)),
    )
    return CliToken(access_token=issued.token, username=scope.username, user_id=str(scope.user_id))


@router.post("/cli/logout")
def logout(request: Request, db: Db, scope: ApiCaller) -> Revoked:
    """Revoke the access token this request carries (an API key is revoked on its page)."""
    credential = request.headers["authorization"].partition(" ")[2].strip()
    if credential.startswith("rok_"):
        return Revoked(revoked=False)
    claims = tokens.verify(
        db,
        _settings(request),
        credential,
        issuer=_issuer(request),
        audience=tokens.PORTAL_AUDIENCE,
    )
    tokens.revoke(db, claims, scope.user_id)
    return Revoked(revoked=True)
