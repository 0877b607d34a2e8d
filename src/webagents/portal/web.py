"""What every page shares: the templates, the CSRF token of forms, and the cookies.

CSRF: a random `webagents_csrf` cookie (HttpOnly, SameSite=Strict) and, in every form, an
HMAC of it; a form whose token is missing or does not match the cookie is refused (403).
Another site can make a browser send the cookie but can read neither it nor the page, so it
cannot write the token. The cookie is replaced at sign-in and sign-out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from .errors import Forbidden

SESSION_COOKIE = "webagents_session"
CSRF_COOKIE = "webagents_csrf"
CSRF_FIELD = "csrf_token"

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _style_source() -> str:
    """The hash of base.html's one <style> block: the only inline thing a page may use."""
    base = Path(__file__).with_name("templates").joinpath("base.html").read_text("utf-8")
    found = re.search(r"<style>(.*?)</style>", base, re.S)
    if found is None:
        return "'none'"
    digest = hashlib.sha256(found.group(1).encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


# The pages are server-rendered HTML with forms and one inline stylesheet: no scripts, no
# frames (clickjacking the approve buttons of /cli/auth and /device), no other origins.
# No form-action: approving `webagents login` redirects to the command line's loopback port.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src {_style_source()}; img-src 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# The API answers a caller's own data, tokens and keys included: never kept by a cache.
API_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
}


def _form_token(cookie: str) -> str:
    return hmac.new(cookie.encode(), b"webagents-portal-form", hashlib.sha256).hexdigest()


def check_csrf(request: Request, submitted: str) -> None:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not submitted or not hmac.compare_digest(_form_token(cookie), submitted):
        raise Forbidden(
            "this form expired or was not sent from the portal's own page: "
            "reload the page and send it again",
            code="csrf_failed",
        )


def render(
    request: Request,
    template: str,
    *,
    status: int = 200,
    new_csrf: bool = False,
    **context: Any,
) -> HTMLResponse:
    """A page whose forms carry the CSRF token of this browser's cookie (made when missing,
    or when `new_csrf`)."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    fresh = new_csrf or not cookie
    if fresh:
        cookie = secrets.token_urlsafe(32)
    context.setdefault("user", None)
    context.setdefault("error", None)
    body = _templates.get_template(template).render(csrf_token=_form_token(cookie), **context)
    response = HTMLResponse(body, status_code=status)
    if fresh:
        set_csrf_cookie(request, response, cookie)
    return response


def set_csrf_cookie(request: Request, response: Response, value: str | None = None) -> None:
    response.set_cookie(
        CSRF_COOKIE,
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
