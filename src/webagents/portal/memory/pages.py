"""The owner's memory pages (P8): an agent's memory by namespace, search, an entry to read
and edit, its versions to restore, export, and retention (forgetting, and the forgotten
entries, are in forget_pages.py).

Thin: check the form's CSRF token, call the same service the API calls (with the store made
for the agent's owner: another account's agent is a 404 page), render. An edit carries the
content_sha256 its page showed, so an edit made meanwhile (by the agent, or in another tab)
is a conflict the page explains, never an update lost. Callers' namespaces are labelled as
callers and their identities shown as `caller.shown_to_owner` prints them (no lookalikes).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE
from ...portal_wire.memory import EntryOut
from ..accounts.dependencies import SignedIn
from ..db.requests import Db
from ..errors import BadInput, Conflict, NotFound, PortalError
from ..scope import AccountScope
from ..web import CSRF_FIELD, FormSecrets, flash
from . import export, retention, service
from . import search as searching
from .page_parts import Opened, Posted, label_of, open_memory, render_page, shown, who_did
from .quotas import quotas_of
from .repository import MemoryStore
from .schemas import check_key, check_namespace

router = APIRouter(dependencies=[FormSecrets])

FormText = Annotated[str, Form()]
Csrf = Annotated[str, Form(alias=CSRF_FIELD)]
PORTAL_SOURCE = "portal"
"""`source` of an entry the owner saved on these pages."""
EXPORT_PAGE = 1000
EDITED_MEANWHILE = (
    "this entry was changed since you opened it (by the agent, or on another page), "
    "so your edit was not saved: its newest text is the first of its versions below. "
    "Your text is still in the form: save it again to replace that one."
)


def _overview(
    request: Request, user: AccountScope, db: Db, opened: Opened, **context: Any
) -> Response:
    rules = retention.rules_of(opened.store)
    forgotten = service.forgotten_counts(opened.store)
    changed = service.last_changes(opened.store)
    grown = service.growth(opened.store, datetime.now(UTC))
    # A namespace whose entries were all forgotten is listed too: its Forgotten page
    # restores them.
    counts = dict.fromkeys(forgotten, 0) | dict(service.namespaces(opened.store))
    namespaces = [
        {
            "namespace": name,
            "shown": shown(name),
            "label": label_of(name),
            "count": count,
            "forgotten": forgotten.get(name, 0),
            "changed": changed.get(name),
            "growth": sparkline(grown.get(name, [0] * service.GROWTH_POINTS)),
            "kept": _kept(retention.days_for(rules, name)),
        }
        for name, count in sorted(counts.items(), key=_order)
    ]
    choices = [OWNER_NAMESPACE, SHARED_NAMESPACE, retention.ALL_CALLERS] + [
        name for name, _ in service.namespaces(opened.store) if label_of(name) == "caller"
    ]
    return render_page(
        request,
        user,
        opened,
        "memory_agent.html",
        namespaces=namespaces,
        rules=[
            {"namespace": r.namespace, "shown": shown(r.namespace), "days": r.days} for r in rules
        ],
        retention_choices=[{"namespace": ns, "shown": shown(ns)} for ns in choices],
        **context,
    )


def sparkline(counts: list[int]) -> dict[str, str]:
    """The points of a small line chart of `counts` (a 100 x 20 box, the highest count at the
    top), and what it shows in words (its label for screen readers)."""
    top = max(max(counts), 1)
    step = 100 / max(len(counts) - 1, 1)
    points = " ".join(
        f"{n * step:.0f},{19 - 18 * count / top:.1f}" for n, count in enumerate(counts)
    )
    said = (
        f"{counts[0]} entries {service.GROWTH_DAYS} days ago, {counts[-1]} now, "
        f"at most {max(counts)}"
    )
    return {"points": points, "label": said}


def _order(item: tuple[str, int]) -> tuple[int, str]:
    name = item[0]
    return ({OWNER_NAMESPACE: 0, SHARED_NAMESPACE: 1}.get(name, 2), name)


def _kept(days: int | None) -> str:
    return "forever" if days is None else f"{days} days"


@router.get("/agents/{agent_id}/memory")
def memory_page(request: Request, user: SignedIn, db: Db, agent_id: str) -> Response:
    return _overview(request, user, db, open_memory(db, user, agent_id))


@router.get("/agents/{agent_id}/memory/namespace")
def namespace_page(
    request: Request, user: SignedIn, db: Db, agent_id: str, namespace: str = ""
) -> Response:
    opened = open_memory(db, user, agent_id)
    check_namespace(namespace)
    entries = service.list_entries(opened.store, [namespace], limit=service.MAX_LIST)
    return render_page(
        request,
        user,
        opened,
        "memory_namespace.html",
        namespace=namespace,
        entries=sorted(entries, key=lambda entry: entry.key),
        label=label_of(namespace),
        shown=shown(namespace),
    )


@router.get("/agents/{agent_id}/memory/search")
def search_page(request: Request, user: SignedIn, db: Db, agent_id: str, q: str = "") -> Response:
    """Every namespace, by the store's hybrid search (the owner may read them all)."""
    opened = open_memory(db, user, agent_id)
    hits: list[dict[str, Any]] = []
    semantic = request.app.state.embedder is not None
    if q.strip():
        try:
            answer = searching.search(
                opened.store,
                q,
                None,
                limit=searching.MAX_LIMIT,
                embedder=request.app.state.embedder,
            )
        except BadInput as exc:  # punctuation alone: no word to look for
            return render_page(
                request,
                user,
                opened,
                "memory_search.html",
                status=exc.status,
                error="type one or more words to search for",
                query=q,
                hits=[],
                semantic=semantic,
                unavailable=False,
            )
        semantic = answer.semantic == "on"
        hits = [
            {
                "namespace": hit.namespace,
                "key": hit.key,
                "shown": shown(hit.namespace),
                "label": label_of(hit.namespace),
                "description": hit.description,
                "matched": " and ".join(
                    {"text": "words", "meaning": "meaning"}[how] for how in hit.matched
                ),
            }
            for hit in answer.entries
        ]
        unavailable = answer.semantic == "unavailable"
    else:
        unavailable = False
    return render_page(
        request,
        user,
        opened,
        "memory_search.html",
        query=q,
        hits=hits,
        semantic=semantic,
        unavailable=unavailable,
    )


def _entry_page(
    request: Request,
    user: AccountScope,
    opened: Opened,
    namespace: str,
    key: str,
    *,
    status: int = 200,
    error: str | None = None,
    draft: tuple[str, str] | None = None,
) -> Response:
    entry = service.get(opened.store, namespace, key)
    versions = service.versions(opened.store, namespace, key)
    if entry is None and not versions:
        raise NotFound(f"{shown(namespace)} keeps no entry {key!r} and never did")
    description, content = draft or ((entry.description, entry.content) if entry else ("", ""))
    return render_page(
        request,
        user,
        opened,
        "memory_entry.html",
        status=status,
        error=error,
        namespace=namespace,
        key=key,
        label=label_of(namespace),
        shown=shown(namespace),
        entry=entry,
        description=description,
        content=content,
        content_sha256=entry.content_sha256 if entry else "",
        versions=[
            {
                "id": v.id,
                "at": v.at,
                "op": "forgotten" if v.op == "delete" else "written",
                "who": who_did(v.by),
                "content": v.content,
                "restorable": entry is None
                or v.content_sha256 != entry.content_sha256
                or v.description != entry.description,
            }
            for v in versions
        ],
    )


@router.get("/agents/{agent_id}/memory/entry")
def entry_page(
    request: Request, user: SignedIn, db: Db, agent_id: str, namespace: str = "", key: str = ""
) -> Response:
    opened = open_memory(db, user, agent_id)
    return _entry_page(request, user, opened, check_namespace(namespace), check_key(key))


@router.post("/agents/{agent_id}/memory/entry")
def save_entry(
    request: Request,
    user: SignedIn,
    opened: Posted,
    namespace: FormText = "",
    key: FormText = "",
    description: FormText = "",
    content: FormText = "",
    content_sha256: FormText = "",
) -> Response:
    content = content.replace("\r\n", "\n")  # a browser sends a textarea's lines so
    try:
        service.put(
            opened.store,
            namespace=namespace,
            key=key,
            content=content,
            description=description,
            source=PORTAL_SOURCE,
            content_sha256=content_sha256,
            by=service.by_owner(user.username),
            quotas=quotas_of(request),
        )
    except PortalError as exc:  # changed meanwhile, a description of two lines, too large...
        return _entry_page(
            request,
            user,
            opened,
            check_namespace(namespace),
            check_key(key),
            status=exc.status,
            error=EDITED_MEANWHILE if isinstance(exc, Conflict) else exc.message,
            draft=(description, content),
        )
    target = RedirectResponse(_entry_url(opened, namespace, key), status_code=303)
    return flash(request, target, "entry-saved")


def _entry_url(opened: Opened, namespace: str, key: str) -> str:
    return f"{opened.base}/entry?{urlencode({'namespace': namespace, 'key': key})}"


@router.post("/agents/{agent_id}/memory/restore")
def restore(request: Request, user: SignedIn, opened: Posted, version: FormText = "") -> Response:
    try:
        wanted = uuid.UUID(version)
    except ValueError:
        raise NotFound("there is no such version of this agent's notes") from None
    made = service.restore_version(
        opened.store, wanted, by=service.by_owner(user.username), quotas=quotas_of(request)
    )
    target = RedirectResponse(_entry_url(opened, made.namespace, made.key), status_code=303)
    return flash(request, target, "entry-restored")


@router.post("/agents/{agent_id}/memory/retention")
def set_retention(
    request: Request,
    user: SignedIn,
    db: Db,
    opened: Posted,
    namespace: FormText = "",
    days: FormText = "",
) -> Response:
    try:
        retention.set_rule(opened.store, namespace, days)
    except BadInput as exc:
        return _overview(request, user, db, opened, status=exc.status, error=exc.message)
    return flash(request, RedirectResponse(opened.base, status_code=303), "retention-saved")


def all_entries(store: MemoryStore) -> list[EntryOut]:
    """Every live entry, read along the change feed a page at a time (oldest change first)."""
    upto, _ = store.feed_state()
    found: list[EntryOut] = []
    since = 0
    while True:
        rows = store.changes(None, since, upto, EXPORT_PAGE)
        found.extend(service.entry_out(row) for row in rows if row.deleted_at is None)
        if len(rows) < EXPORT_PAGE:
            return found
        since = rows[-1].cursor


def _download(data: bytes, media_type: str, filename: str) -> Response:
    return Response(
        data,
        media_type=media_type,
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
        },
    )


@router.get("/agents/{agent_id}/memory/export.jsonl")
def export_jsonl(request: Request, user: SignedIn, db: Db, agent_id: str) -> Response:
    opened = open_memory(db, user, agent_id)
    entries = [entry.model_dump(mode="json") for entry in all_entries(opened.store)]
    data = b"".join(export.jsonl_lines(entries))
    return _download(data, "application/x-ndjson", f"{opened.agent.name}-memory.jsonl")


@router.get("/agents/{agent_id}/memory/export.zip")
def export_zip(request: Request, user: SignedIn, db: Db, agent_id: str) -> Response:
    opened = open_memory(db, user, agent_id)
    data = export.notes_zip(all_entries(opened.store), now=datetime.now(UTC))
    return _download(data, "application/zip", f"{opened.agent.name}-memory.zip")
