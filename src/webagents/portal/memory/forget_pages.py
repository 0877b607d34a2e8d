"""Forgetting on the owner's memory pages (P8, P6): a page that asks before an entry is
forgotten, and each namespace's forgotten entries, to restore.

Forgetting is two steps: the entry's page links to a page that asks (GET, changes nothing),
whose form (with its CSRF token and `confirm`) forgets. A forget form sent without `confirm`
is sent to that page, so no one click forgets. Plain forms and links: it works with the
pages' policy, which runs no script. A forgotten entry is listed under its namespace's
"Forgotten" page while the version its forgetting left is kept (until retention removes it);
restoring that version (the pages' restore form) brings the entry back.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from ..accounts.dependencies import SignedIn
from ..db.requests import Db
from ..errors import NotFound
from ..web import FormSecrets, flash
from . import service
from .page_parts import Opened, Posted, label_of, open_memory, render_page, shown, who_did
from .quotas import quotas_of
from .schemas import check_key, check_namespace

router = APIRouter(dependencies=[FormSecrets])

FormText = Annotated[str, Form()]
CONFIRMED = "yes"


def _ask_url(opened: Opened, namespace: str, key: str) -> str:
    return f"{opened.base}/forget?{urlencode({'namespace': namespace, 'key': key})}"


@router.get("/agents/{agent_id}/memory/forget")
def forget_page(
    request: Request, user: SignedIn, db: Db, agent_id: str, namespace: str = "", key: str = ""
) -> Response:
    """Asks before the entry is forgotten (only a kept entry can be: else 404)."""
    opened = open_memory(db, user, agent_id)
    entry = service.get(opened.store, check_namespace(namespace), check_key(key))
    if entry is None:
        raise NotFound(f"{shown(namespace)} keeps no entry {key!r} now: nothing to forget")
    return render_page(
        request,
        user,
        opened,
        "memory_forget.html",
        entry=entry,
        label=label_of(namespace),
        shown=shown(namespace),
    )


@router.post("/agents/{agent_id}/memory/forget")
def forget_entry(
    request: Request,
    user: SignedIn,
    opened: Posted,
    namespace: FormText = "",
    key: FormText = "",
    confirm: FormText = "",
) -> Response:
    if confirm != CONFIRMED:  # not from the page that asks: ask first
        target = _ask_url(opened, check_namespace(namespace), check_key(key))
        return RedirectResponse(target, status_code=303)
    service.delete(
        opened.store, namespace, key, by=service.by_owner(user.username), quotas=quotas_of(request)
    )
    target = f"{opened.base}/namespace?{urlencode({'namespace': namespace})}"
    return flash(request, RedirectResponse(target, status_code=303), "entry-forgotten")


@router.get("/agents/{agent_id}/memory/forgotten")
def forgotten_page(
    request: Request, user: SignedIn, db: Db, agent_id: str, namespace: str = ""
) -> Response:
    opened = open_memory(db, user, agent_id)
    check_namespace(namespace)
    return render_page(
        request,
        user,
        opened,
        "memory_forgotten.html",
        namespace=namespace,
        label=label_of(namespace),
        shown=shown(namespace),
        forgotten=[
            {
                "key": version.key,
                "at": version.at,
                "who": who_did(version.by),
                "content": version.content,
                "version": version.id,
            }
            for version in service.forgotten(opened.store, namespace)
        ],
    )
