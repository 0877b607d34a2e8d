"""What every page shares: the templates, the CSRF token of forms, and the cookies.

CSRF: every form carries HMAC(server secret, the browser's session), where the session is
the signed-in browser's session cookie, or before sign-in a random pre-session id in its own
`webagents_csrf` cookie (HttpOnly, SameSite=Strict; `__Host-` over https). A form whose
token is missing or was made for another session is refused (403). The secret is derived
from the portal's signing keys (in the database), so every process shares it and no one
can make a token without the portal; a token is bound to one session, so a pair fetched
anonymously (or by another account) is worth nothing with the victim's session cookie. The
pre-session cookie is replaced at sign-in and sign-out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import jinja2
from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, Response

from .db.requests import Db
from .errors import Forbidden
from .static import static_url
from .tokens import keys as signing
from .tokens import service as tokens
from .tokens.repository import SigningKeys

SESSION_COOKIE = "webagents_session"
CSRF_COOKIE = "webagents_csrf"
HOST_CSRF_COOKIE = "__Host-webagents_csrf"
CSRF_FIELD = "csrf_token"
FLASH_COOKIE = "webagents_flash"

# What a form did, said once on the page its redirect opens. The cookie carries one of these
# names, never words: a cookie planted by someone else can show no text of theirs.
Said = Literal[
    "signed-out",
    "signed-out-everywhere",
    "session-ended",
    "key-revoked",
    "machine-key-revoked",
    "access-saved",
    "entry-saved",
    "entry-restored",
    "entry-forgotten",
    "retention-saved",
]
FLASHES: dict[str, str] = {
    "signed-out": "You are signed out.",
    "signed-out-everywhere": "You are signed out everywhere: every browser and command line.",
    "session-ended": "That session is ended: it is signed out.",
    "key-revoked": "The key is revoked: it no longer works.",
    "machine-key-revoked": "The machine's key is revoked: that machine no longer acts as the "
    "agent until webagents publish there gives it a new one.",
    "access-saved": "Saved: who may call this agent.",
    "entry-saved": "Saved.",
    "entry-restored": "Restored: the agent sees this version again.",
    "entry-forgotten": "Forgotten: the entry is under this namespace's forgotten entries, "
    "to restore.",
    "retention-saved": "Retention saved.",
}

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


_templates.globals["static_url"] = static_url

# The pages are server-rendered HTML with forms and stylesheets from this origin (the
# vendored Pico CSS and the portal's own): no inline style or script, no frames
# (clickjacking the approve buttons of /cli/auth and /device), no other origins. Images
# from data: URLs: Pico draws its icons (a checkbox's tick, a select's chevron, the marker
# of a folded <details>) as SVG data URLs, which an image cannot run.
# No form-action: approving `webagents login` redirects to the command line's loopback port.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# A page that runs one of the portal's own scripts (the chat box, a copy button) and
# fetches from this origin: nothing inline still, and nothing from elsewhere.
SCRIPT_PAGE_CSP = (
    PAGE_HEADERS["Content-Security-Policy"] + "; script-src 'self'; connect-src 'self'"
)


def allow_own_scripts(response: Response) -> Response:
    """For a page with a script of the portal's (the chat box, a copy button)."""
    response.headers["Content-Security-Policy"] = SCRIPT_PAGE_CSP
    return response


# The API answers a caller's own data, tokens and keys included: never kept by a cache.
API_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
}


def load_form_secrets(request: Request, db: Db) -> None:
    """The pages' dependency: the secrets form tokens are made and checked with, for
    `render` and `check_csrf`. Each is derived from a signing key (SHA-256 of a label and the
    private key), so every portal process has them without a secret of its own; tokens are
    made with the key that signs now and accepted with any published key, so a rotation
    fails no open form."""
    keys = SigningKeys(db).all()
    if not keys:
        tokens.ensure_signing_key(db)
        keys = SigningKeys(db).all()
    now = datetime.now(UTC)
    current = signing.signer(keys, now)
    published = signing.published(keys, now, request.app.state.settings.token_lifetime)
    request.state.form_secrets = [
        _secret_of(key.private_pem) for key in ([current] if current else []) + published
    ]


FormSecrets = Depends(load_form_secrets)


def _secret_of(private_pem: str) -> bytes:
    return hashlib.sha256(b"webagents-portal form tokens\0" + private_pem.encode()).digest()


def _csrf_cookie(request: Request) -> str:
    # __Host-: only this origin over https can set it (not a sibling subdomain).
    return HOST_CSRF_COOKIE if request.url.scheme == "https" else CSRF_COOKIE


def _binding(request: Request, pre_session: str) -> str:
    """What a form token is for: the signed-in browser's session (by the SHA-256 of its
    cookie, as the database knows it), else the pre-session id of the CSRF cookie."""
    session = request.cookies.get(SESSION_COOKIE, "")
    if session:
        return "session:" + hashlib.sha256(session.encode()).hexdigest()
    return "pre-session:" + pre_session


def _form_token(secret: bytes, binding: str) -> str:
    return hmac.new(secret, binding.encode(), hashlib.sha256).hexdigest()


def _secrets(request: Request) -> list[bytes]:
    found: list[bytes] = getattr(request.state, "form_secrets", [])
    return found


def check_csrf(request: Request, submitted: str) -> None:
    pre_session = request.cookies.get(_csrf_cookie(request), "")
    binding = _binding(request, pre_session)
    valid = bool(submitted) and (pre_session or binding.startswith("session:"))
    if not valid or not any(
        hmac.compare_digest(_form_token(secret, binding), submitted) for secret in _secrets(request)
    ):
        raise Forbidden(
            "this form expired or was not sent from the portal's own page: "
            "reload the page and send it again",
            code="csrf_failed",
        )


def render(request: Request, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
    """A page whose forms carry the CSRF token of this browser's session, or before sign-in
    of its pre-session cookie (made when missing). A page outside the pages' routers (an
    error page) has no secrets and so no usable form."""
    pre_session = request.cookies.get(_csrf_cookie(request), "")
    fresh = not pre_session
    if fresh:
        pre_session = secrets.token_urlsafe(32)
    known = _secrets(request)
    token = _form_token(known[0], _binding(request, pre_session)) if known else ""
    context.setdefault("user", None)
    context.setdefault("error", None)
    said = request.cookies.get(FLASH_COOKIE)
    context.setdefault("flash", FLASHES.get(said or ""))
    # Every page's "Sign up" link follows the administrator's choice: none when closed.
    settings = getattr(request.app.state, "settings", None)
    context.setdefault("sign_up", getattr(settings, "sign_up", "closed"))
    body = _templates.get_template(template).render(csrf_token=token, **context)
    response = HTMLResponse(body, status_code=status)
    if fresh:
        set_csrf_cookie(request, response, pre_session)
    if said is not None:  # shown once
        response.delete_cookie(FLASH_COOKIE, httponly=True, samesite="strict", path="/")
    return response


def flash(request: Request, response: Response, said: Said) -> Response:
    """A form's redirect that says on the next page what the form did (a name of FLASHES)."""
    response.set_cookie(
        FLASH_COOKIE,
        said,
        max_age=60,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


def set_csrf_cookie(request: Request, response: Response, value: str | None = None) -> None:
    response.set_cookie(
        _csrf_cookie(request),
        value or secrets.token_urlsafe(32),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def set_session_cookie(request: Request, response: Response, token: str, max_age: int) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=max_age,
        httponly=True,
        samesite="lax",  # lax: a link from elsewhere opens the portal signed in
        secure=request.url.scheme == "https",
        path="/",
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/",
    )


def local_path(target: str | None, default: str = "/") -> str:
    """A redirect target that stays on the portal (no `//host` or `https://host`)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return target
