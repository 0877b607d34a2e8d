"""The account's sessions page (`/sessions`: browser sessions and command-line sign-ins,
each with an end button, and "sign out everywhere") and its password page (`/password`).

Thin, as the other pages: check the form's CSRF token, call sessions.py, render. Another
account's session id answers 404 like one that never was.
"""

from __future__ import annotations

from typing import Annotated

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
    render,
    set_csrf_cookie,
)
from . import sessions
from .dependencies import SignedIn, SignedInForm, address_of
from .password_policy import RULE as PASSWORD_RULE

router = APIRouter(dependencies=[FormSecrets])

FormText = Annotated[str, Form()]
Csrf = Annotated[str, Form(alias=CSRF_FIELD)]


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(request: Request, user: SignedIn, db: Db) -> Response:
    listed = sessions.ways_in(db, user, request.cookies.get(SESSION_COOKIE))
    return render(request, "sessions.html", user=user, ways=listed)


@router.post("/sessions/{kind}/{way_id}/end")
def end_session(request: Request, user: SignedInForm, db: Db, kind: str, way_id: str) -> Response:
    sessions.end_one(db, user, kind, way_id)
    return flash(request, RedirectResponse("/sessions", status_code=303), "session-ended")


@router.post("/sessions/end-all")
def end_everywhere(request: Request, user: SignedInForm, db: Db) -> Response:
    sessions.end_everywhere(db, user)
    response = flash(request, RedirectResponse("/signin", status_code=303), "signed-out-everywhere")
    clear_session_cookie(request, response)
    set_csrf_cookie(request, response)
    return response


@router.get("/password", response_class=HTMLResponse)
def password_page(request: Request, user: SignedIn) -> Response:
    return render(request, "password.html", user=user, rules=PASSWORD_RULE, changed=False)


@router.post("/password", response_class=HTMLResponse)
def change_password(
    request: Request,
    user: SignedIn,
    db: Db,
    csrf: Csrf = "",
    current: FormText = "",
    new: FormText = "",
) -> Response:
    settings: PortalSettings = request.app.state.settings
    try:
        check_csrf(request, csrf)
        sessions.change_password(
            db,
            settings,
            user,
            current,
            new,
            address_of(request),
            request.cookies.get(SESSION_COOKIE),
        )
    except PortalError as exc:
        return render(
            request,
            "password.html",
            status=exc.status,
            error=exc.message,
            user=user,
            rules=PASSWORD_RULE,
            changed=False,
        )
    return render(request, "password.html", user=user, rules=PASSWORD_RULE, changed=True)
