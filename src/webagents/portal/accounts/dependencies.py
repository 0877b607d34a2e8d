"""Who a request is, as FastAPI's dependencies: a request's session cookie, Authorization
header or signed-in form handed to auth.py, which alone turns a credential into a scope.
Apart from auth.py so that the command line's administration (admin.py) loads no web stack.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Form, Request

from ..db.requests import Db, ReadDb
from ..scope import AccountScope, AgentScope
from ..settings import PortalSettings
from ..tokens import service as tokens
from ..web import CSRF_FIELD, SESSION_COOKIE, check_csrf
from .auth import (
    SignInRequired,
    agent_key_scope,
    agent_key_scope_read_only,
    api_key_scope,
    bearer_scope,
    browser_scope,
)


def address_of(request: Request) -> str:
    """The client's address, as the server believes it (X-Forwarded-For only from the
    proxies the operator named): what sign-in limits count, and the sessions page shows."""
    return request.client.host if request.client else "unknown"


def optional_browser_account(request: Request, db: Db) -> AccountScope | None:
    return browser_scope(db, request.cookies.get(SESSION_COOKIE))


def browser_account(request: Request, db: Db) -> AccountScope:
    scope = browser_scope(db, request.cookies.get(SESSION_COOKIE))
    if scope is None:
        raise SignInRequired("sign in to see this page")
    return scope


def api_account(request: Request, db: Db) -> AccountScope:
    settings: PortalSettings = request.app.state.settings
    issuer = tokens.issuer_of(settings)
    return bearer_scope(db, settings, request.headers.get("authorization"), issuer=issuer)


def api_key_account(request: Request, db: Db) -> AccountScope:
    return api_key_scope(db, request.headers.get("authorization"))


def api_agent(request: Request, db: Db) -> AgentScope:
    return agent_key_scope(db, request.headers.get("authorization"))


MaybeSignedIn = Annotated[AccountScope | None, Depends(optional_browser_account)]
SignedIn = Annotated[AccountScope, Depends(browser_account)]


def signed_in_form(
    request: Request, user: SignedIn, csrf: Annotated[str, Form(alias=CSRF_FIELD)] = ""
) -> AccountScope:
    """A form a signed-in browser sent: its CSRF token checked before the handler looks
    anything up."""
    check_csrf(request, csrf)
    return user


SignedInForm = Annotated[AccountScope, Depends(signed_in_form)]
ApiCaller = Annotated[AccountScope, Depends(api_account)]
ApiKeyCaller = Annotated[AccountScope, Depends(api_key_account)]
ApiAgent = Annotated[AgentScope, Depends(api_agent)]


def api_agent_reading(request: Request, db: ReadDb) -> AgentScope:
    """As api_agent, in a read-only transaction, and so without noting the key's use: that
    write would make a read wait for writers (SQLite), which the read-only transaction is
    there to avoid. Writes and Portal Connect note it (docs/several-machines.md)."""
    return agent_key_scope_read_only(db, request.headers.get("authorization"))


ApiAgentReading = Annotated[AgentScope, Depends(api_agent_reading)]
