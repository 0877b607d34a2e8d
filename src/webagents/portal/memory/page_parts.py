"""What the owner's memory pages share (pages.py, forget_pages.py): the agent and its
store opened for its owner only, a form's `Posted` dependency, a page rendered with the
agent, and how namespaces and authors read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import Response

from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE, shown_to_owner
from ..accounts.dependencies import SignedInForm
from ..agents.service import get_agent
from ..db.requests import Db
from ..db.tables import Agent
from ..embeddings.local import weights_absent
from ..scope import AccountScope
from ..web import render
from . import retention
from .repository import MemoryStore


@dataclass(frozen=True)
class Opened:
    agent: Agent
    store: MemoryStore
    base: str


def open_memory(db: Db, user: AccountScope, agent_id: str) -> Opened:
    """The agent and its store, for its owner only (anyone else: 404)."""
    agent = get_agent(db, user, agent_id)
    store = MemoryStore.for_owner(db, user, agent.id)
    return Opened(agent, store, f"/agents/{agent.id}/memory")


def _posted(user: SignedInForm, db: Db, agent_id: str) -> Opened:
    """A form sent to one of an agent's memory pages: its CSRF token checked (before anything
    is looked up), then the agent and its store opened for its owner only (anyone else: 404)."""
    return open_memory(db, user, agent_id)


Posted = Annotated[Opened, Depends(_posted)]


def label_of(namespace: str) -> str:
    if namespace == OWNER_NAMESPACE:
        return "owner"
    if namespace == SHARED_NAMESPACE:
        return "shared"
    return "caller"


def shown(namespace: str) -> str:
    """A namespace as the owner reads it; `caller:*` is every caller."""
    if namespace == retention.ALL_CALLERS:
        return "all callers (caller:*)"
    return shown_to_owner(namespace)


def render_page(
    request: Request, user: AccountScope, opened: Opened, template: str, **context: Any
) -> Response:
    context.setdefault("query", "")
    context.setdefault("notice", None)
    state = request.app.state
    context.setdefault("meaning_off", weights_absent(state.settings.embeddings, state.embedder))
    return render(request, template, user=user, agent=opened.agent, base=opened.base, **context)


def who_did(by: str) -> str:
    if by.startswith("owner:"):
        return "you, on the portal"
    return {"agent": "the agent", "sync": "the agent (sync)", "retention": "retention"}.get(by, by)
