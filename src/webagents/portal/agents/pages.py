"""The account's home (the list of its agents) and each agent's page: what it is, where its
chats and memory are, its public endpoint, the `webagents serve` processes connected to the
portal now (Portal Connect), and its keys, one per machine, each with when it was last used
and a form to revoke it (P4).

Signed-in browsers only (others go to the sign-in page); another account's agent is the 404
page; every form carries the CSRF token, checked before anything is looked up.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..accounts.dependencies import SignedIn
from ..db.requests import Db
from ..db.tables import CONNECTION_STALE
from ..tokens.agent_keys import USE_PRECISION
from ..web import CSRF_FIELD, FormSecrets, allow_own_scripts, check_csrf, flash, render
from . import keys
from .repository import Agents
from .service import get_agent, list_agents

router = APIRouter(dependencies=[FormSecrets])

Csrf = Annotated[str, Form(alias=CSRF_FIELD)]


@router.get("/", response_class=HTMLResponse)
def home(request: Request, user: SignedIn, db: Db) -> Response:
    return render(request, "home.html", user=user, agents=list_agents(db, user))


@router.get("/agents/{agent_id}", response_class=HTMLResponse)
def agent_page(request: Request, user: SignedIn, db: Db, agent_id: str) -> Response:
    agent = get_agent(db, user, agent_id)
    # The full URL a caller pastes: the portal's public address, else the one browsed.
    portal_url = request.app.state.settings.public_url or str(request.base_url)
    page = render(
        request,
        "agent.html",
        user=user,
        agent=agent,
        endpoint=f"{portal_url.rstrip('/')}/agents/{quote(agent.name)}/chat/completions",
        keys=keys.list_keys(db, user, agent_id),
        connected=Agents(db, user).connections_since(agent, datetime.now(UTC) - CONNECTION_STALE),
        precision_minutes=int(USE_PRECISION.total_seconds() // 60),
    )
    return allow_own_scripts(page)  # the copy button (static/copy.js)


@router.post("/agents/{agent_id}/keys/{key_id}/revoke")
def revoke_key(
    request: Request, user: SignedIn, db: Db, agent_id: str, key_id: str, csrf: Csrf = ""
) -> Response:
    check_csrf(request, csrf)
    keys.revoke_key(db, user, agent_id, key_id)
    target = RedirectResponse(f"/agents/{agent_id}", status_code=303)
    return flash(request, target, "machine-key-revoked")
