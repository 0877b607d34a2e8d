"""The memory store over HTTP, exactly SPEC P5: `/api/storage/memory-scoped`, authenticated
as the agent (its key), `action` in the query, namespaces as repeated `namespace` params.

Beyond P5, for our own clients: `content_sha256` on PUT (body), DELETE and sync lines (a
stale one is 409 and changes nothing; "" means the entry must not exist yet); entries carry
their `content_sha256`; sync lines their `cursor` (a string, as the page's); `GET
action=sync` without a namespace pages every namespace's changes; search answers say
`semantic: on|off|unavailable` and each entry how it `matched` (text, meaning).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy import event
from sqlalchemy.orm import Session

from ..accounts.dependencies import ApiAgent, ApiAgentReading
from ..db.requests import Db, ReadDb
from ..errors import BadInput, Forbidden
from ..scope import AgentScope
from . import search as searching
from . import service
from .quotas import QuotaExceeded, quotas_of
from .repository import MemoryStore
from .schemas import PutIn, SyncIn, cursor_of

router = APIRouter(prefix="/api/storage")

Namespaces = Annotated[list[str] | None, Query(alias="namespace")]
_READS = ("get", "list", "search", "sync")


def _check_agent(scope: AgentScope, given: str | None) -> None:
    """`agentId`, where a client names it, must be the key's own agent."""
    if given is None:
        return
    try:
        same = uuid.UUID(given) == scope.agent_id
    except ValueError:
        same = False
    if not same:
        raise Forbidden(
            f"this key is agent {scope.agent_name!r}'s ({scope.agent_id}) and reaches its "
            f"memory only, not agent {given!r}'s: send that agent's own key, or leave "
            "agentId out",
            code="agent_mismatch",
        )


def _one(namespaces: list[str] | None) -> str:
    if not namespaces or len(namespaces) != 1:
        raise BadInput("send exactly one namespace for this action", code="bad_namespace")
    return namespaces[0]


def _some(namespaces: list[str] | None) -> list[str]:
    if not namespaces:
        raise BadInput(
            "send one or more namespace parameters (namespace=owner&namespace=shared)",
            code="bad_namespace",
        )
    return namespaces


def _json(body: dict[str, Any]) -> JSONResponse:
    """The answer as is: it is JSON-ready (model_dump(mode="json")), so FastAPI's second walk
    over it (validating the return type, then jsonable_encoder) would only cost time."""
    return JSONResponse(body)


def _woken(request: Request, db: Session) -> None:
    """A write in this process: the embedding worker need not wait for its next look. Woken
    once the request's transaction commits: before, its read would not see the write yet."""
    worker = getattr(request.app.state, "embedding_worker", None)
    if worker is not None:
        event.listen(db, "after_commit", lambda _session: worker.wake(), once=True)


@router.get("/memory-scoped")
def read(
    request: Request,
    scope: ApiAgentReading,
    db: ReadDb,
    action: str,
    namespace: Namespaces = None,
    key: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    prefix: str | None = None,
    excludeSource: str | None = None,
    q: str | None = None,
    since: str | None = None,
    agentId: str | None = None,
) -> JSONResponse:
    _check_agent(scope, agentId)
    store = MemoryStore.for_agent(db, scope)
    if action == "get":
        if key is None:
            raise BadInput("action=get needs a key", code="bad_key")
        entry = service.get(store, _one(namespace), key)
        return _json({"entry": entry.model_dump(mode="json") if entry is not None else None})
    if action == "list":
        entries = service.list_entries(
            store, _some(namespace), limit=limit, prefix=prefix, exclude_source=excludeSource
        )
        return _json({"entries": [e.model_dump(mode="json") for e in entries]})
    if action == "search":
        answer = searching.search(
            store,
            q or "",
            _some(namespace),
            limit=min(limit, searching.MAX_LIMIT),
            embedder=request.app.state.embedder,
        )
        return _json(
            {
                "entries": [e.model_dump(mode="json") for e in answer.entries],
                "semantic": answer.semantic,
            }
        )
    if action == "sync":
        page = service.changes(store, namespace, cursor_of(since), limit)
        return _json(page.model_dump(mode="json"))
    raise BadInput(f"action is one of {', '.join(_READS)} for GET (sync also for POST)")


@router.put("/memory-scoped")
def write(
    request: Request, scope: ApiAgent, db: Db, body: PutIn, agentId: str | None = None
) -> JSONResponse:
    _check_agent(scope, agentId)
    _check_agent(scope, body.agentId)
    try:
        entry = service.put(
            MemoryStore.for_agent(db, scope),
            namespace=body.namespace,
            key=body.key,
            content=body.content,
            description=body.description,
            source=body.source,
            at=body.at,
            content_sha256=body.content_sha256,
            by=service.BY_AGENT,
            quotas=quotas_of(request),
        )
    except QuotaExceeded as exc:
        return exc.answer(db)
    _woken(request, db)
    return _json({"entry": entry.model_dump(mode="json")})


@router.delete("/memory-scoped")
def forget(
    request: Request,
    scope: ApiAgent,
    db: Db,
    namespace: Namespaces = None,
    key: str | None = None,
    content_sha256: str | None = None,
    agentId: str | None = None,
) -> dict[str, bool]:
    _check_agent(scope, agentId)
    if key is None:
        raise BadInput("DELETE needs a key", code="bad_key")
    forgotten = service.delete(
        MemoryStore.for_agent(db, scope),
        _one(namespace),
        key,
        content_sha256=content_sha256,
        by=service.BY_AGENT,
        quotas=quotas_of(request),
    )
    return {"forgotten": forgotten}


@router.post("/memory-scoped")
def push(
    request: Request,
    scope: ApiAgent,
    db: Db,
    action: str,
    body: SyncIn,
    agentId: str | None = None,
) -> JSONResponse:
    _check_agent(scope, agentId)
    _check_agent(scope, body.agentId)
    if action != "sync":
        raise BadInput("POST takes action=sync (with {namespace, lines})")
    try:
        applied = service.apply_lines(
            MemoryStore.for_agent(db, scope), body.namespace, body.lines, quotas=quotas_of(request)
        )
    except QuotaExceeded as exc:
        return exc.answer(db)
    _woken(request, db)
    return _json({"applied": applied})
