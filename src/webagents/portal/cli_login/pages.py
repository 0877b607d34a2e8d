"""The command line's sign-in pages: approve a `webagents login` (/cli/auth) or a device
(/device). Both need a signed-in browser and a CSRF token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from ..accounts.dependencies import SignedIn, SignedInForm, address_of
from ..db.requests import Db
from ..errors import PortalError
from ..settings import PortalSettings
from ..tokens import service as tokens
from ..web import CSRF_FIELD, FormSecrets, check_csrf, render
from . import service

router = APIRouter(dependencies=[FormSecrets])

FormText = Annotated[str, Form()]
Csrf = Annotated[str, Form(alias=CSRF_FIELD)]


@router.get("/cli/auth")
def cli_auth_page(request: Request, user: SignedIn, port: str = "", state: str = "") -> Response:
    service.check_callback(port, state)
    return render(request, "cli_auth.html", user=user, port=port, state=state)


@router.post("/cli/auth")
def cli_auth(
    request: Request,
    user: SignedInForm,
    db: Db,
    port: FormText = "",
    state: FormText = "",
    decision: FormText = "",
) -> Response:
    number, state = service.check_callback(port, state)
    if decision != "approve":
        target = service.callback_url(number, error="access_denied", state=state)
    else:
        settings: PortalSettings = request.app.state.settings
        issuer = tokens.issuer_of(settings)
        target = service.approve_cli(db, settings, user, issuer, number, state, address_of(request))
    return RedirectResponse(target, status_code=303)


@router.get("/device")
def device_page(request: Request, user: SignedIn, user_code: str = "") -> Response:
    return render(request, "device.html", user=user, user_code=user_code, done=None)


@router.post("/device")
def device(
    request: Request,
    user: SignedIn,
    db: Db,
    csrf: Csrf = "",
    user_code: FormText = "",
    decision: FormText = "",
) -> Response:
    try:
        check_csrf(request, csrf)
        service.decide_device(db, user, user_code, decision == "approve")
    except PortalError as exc:
        return render(
            request,
            "device.html",
            status=exc.status,
            error=exc.message,
            user=user,
            user_code=user_code,
            done=None,
        )
    return render(
        request, "device.html", user=user, user_code=user_code, done=decision == "approve"
    )
