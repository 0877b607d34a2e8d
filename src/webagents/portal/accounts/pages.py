"""Accounts' pages: sign up, sign in, sign out and the account's API keys (its sessions and
password: sessions_pages.py; its home, the list of its agents: agents/pages.py).

Thin: check the form's CSRF token, call the service, render. A refusal is shown above the
form it came from, with its status; the request's transaction still commits, so that a
failed sign-in is counted.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..db.requests import Db
from ..errors import PortalError
from ..settings import PortalSettings
from ..web import (
    CSRF_FIELD,
    SESSION_COOKIE,
    FormSecrets,
    check_csrf,
    clear_session_cookie,
    flash,
    local_path,
    render,
    set_csrf_cookie,
    set_session_cookie,
)
from . import service, sessions_pages
from .dependencies import MaybeSignedIn, SignedIn, address_of
from .password_policy import RULE as PASSWORD_RULE
from .schemas import USERNAME_RULE
from .sign_up import CLOSED
from .sign_up import sign_up as sign_up_with

router = APIRouter(dependencies=[FormSecrets])

FormText = Annotated[str, Form()]
Csrf = Annotated[str, Form(alias=CSRF_FIELD)]


def _settings(request: Request) -> PortalSettings:
    settings: PortalSettings = request.app.state.settings
    return settings


def _signed_in(request: Request, signed: service.SignedIn, target: str) -> Response:
    response = RedirectResponse(local_path(target), status_code=303)
    lifetime = int(_settings(request).session_lifetime.total_seconds())
    set_session_cookie(request, response, signed.token, lifetime)
    set_csrf_cookie(request, response)  # a token seen before signing in is worth nothing after
    return response


@router.get("/signin")
def sign_in_page(request: Request, user: MaybeSignedIn, next: str = "/") -> Response:
    if user is not None:
        return RedirectResponse(local_path(next), status_code=303)
    return render(request, "signin.html", next=local_path(next), username="")


@router.post("/signin")
def sign_in(
    request: Request,
    db: Db,
    csrf: Csrf = "",
    username: FormText = "",
    password: FormText = "",
    next: FormText = "/",
) -> Response:
    try:
        check_csrf(request, csrf)
        signed = service.sign_in(db, _settings(request), username, password, address_of(request))
    except PortalError as exc:
        return render(
            request,
            "signin.html",
            status=exc.status,
            error=exc.message,
            next=local_path(next),
            username=username,
        )
    return _signed_in(request, signed, next)


@router.get("/signup")
def sign_up_page(request: Request, user: MaybeSignedIn, invite: str = "") -> Response:
    if user is not None:
        return RedirectResponse("/", status_code=303)
    return _sign_up_form(request, username="", invite=invite)


@router.post("/signup")
def sign_up(
    request: Request,
    db: Db,
    csrf: Csrf = "",
    username: FormText = "",
    password: FormText = "",
    invite: FormText = "",
) -> Response:
    try:
        check_csrf(request, csrf)
        signed = sign_up_with(
            db, _settings(request), username, password, address_of(request), invite
        )
    except PortalError as exc:
        return _sign_up_form(
            request, username=username, invite=invite, status=exc.status, error=exc.message
        )
    return _signed_in(request, signed, "/")


def _sign_up_form(request: Request, **shown: Any) -> Response:
    mode = _settings(request).sign_up
    rules = f"Username: {USERNAME_RULE}. Password: {PASSWORD_RULE}."
    return render(request, "signup.html", mode=mode, closed=CLOSED, rules=rules, **shown)


@router.post("/signout")
def sign_out(request: Request, db: Db, csrf: Csrf = "") -> Response:
    check_csrf(request, csrf)
    service.sign_out(db, request.cookies.get(SESSION_COOKIE))
    response = flash(request, RedirectResponse("/signin", status_code=303), "signed-out")
    clear_session_cookie(request, response)
    set_csrf_cookie(request, response)
    return response


@router.get("/keys", response_class=HTMLResponse)
def keys_page(request: Request, user: SignedIn, db: Db) -> Response:
    return render(request, "keys.html", user=user, keys=service.list_keys(db, user), new_key=None)


@router.post("/keys", response_class=HTMLResponse)
def create_key(
    request: Request, user: SignedIn, db: Db, csrf: Csrf = "", name: FormText = ""
) -> Response:
    try:
        check_csrf(request, csrf)
        made = service.create_key(db, user, name)
    except PortalError as exc:
        keys = service.list_keys(db, user)
        return render(
            request,
            "keys.html",
            status=exc.status,
            error=exc.message,
            user=user,
            keys=keys,
            new_key=None,
        )
    # Shown in this answer once, never in a URL or a later page.
    response = render(
        request, "keys.html", user=user, keys=service.list_keys(db, user), new_key=made
    )
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    return response


@router.post("/keys/{key_id}/revoke")
def revoke_key(request: Request, user: SignedIn, db: Db, key_id: str, csrf: Csrf = "") -> Response:
    check_csrf(request, csrf)
    service.revoke_key(db, user, key_id)
    return flash(request, RedirectResponse("/keys", status_code=303), "key-revoked")


router.include_router(sessions_pages.router)
