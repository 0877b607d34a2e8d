"""The memory store's answers (SPEC P5): an entry, a search's hits, a sync page and its lines."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator


def _older_cursor(value: object) -> object:
    """An older portal's cursor was its change number (an integer): kept as its decimal text,
    the cursor our portal gives for that change today."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


Cursor = Annotated[str, BeforeValidator(_older_cursor)]
"""Opaque: kept and sent back exactly as it came, never read as a number (the platform's SDK
drops a cursor that is not a string)."""


class EntryOut(BaseModel):
    """SPEC P5's entry, and the hash of its content (our clients' precondition)."""

    id: uuid.UUID
    namespace: str
    key: str
    content: str
    description: str
    source: str
    created_at: datetime
    updated_at: datetime
    content_sha256: str | None = None


class SearchHit(EntryOut):
    """An entry found by search, and how: `text` (full-text), `meaning` (semantic)."""

    matched: list[Literal["text", "meaning"]] = []


class EntryAnswer(BaseModel):
    """`GET action=get` (null: no such entry), and `PUT`'s stored entry."""

    entry: EntryOut | None


class EntriesAnswer(BaseModel):
    """`GET action=list`."""

    entries: list[EntryOut]


class SearchAnswer(BaseModel):
    """`GET action=search`: the hits, and whether semantic search took part (`on`; `off` by
    the portal's settings, `unavailable` just now); absent from a portal that does not say."""

    entries: list[SearchHit]
    semantic: Literal["on", "off", "unavailable"] | None = None


class Forgotten(BaseModel):
    """`DELETE`: whether an entry was there to forget."""

    forgotten: bool


class Applied(BaseModel):
    """`POST action=sync`: how many lines changed the store."""

    applied: int


class SyncLineFields(BaseModel):
    """A change of the feed as both sides see it; a delete's content and description are
    null. Its cursor is the side's own: the portal's change number (portal/memory/schemas.py,
    written as text), the agent's opaque text (`SyncLine`)."""

    op: Literal["put", "delete"]
    id: uuid.UUID
    namespace: str
    key: str
    content: str | None
    description: str | None
    source: str
    at: datetime
    content_sha256: str | None = None


class SyncLine(SyncLineFields):
    """A change as a client reads it: the platform's lines carry no cursor of their own."""

    cursor: Cursor | None = None


class SyncAnswer(BaseModel):
    """`GET action=sync` as a client reads it: the changes after the cursor sent, and the
    cursor to send next. A page without a cursor (None) comes only from a portal that lost
    it: the agent keeps the cursor it had."""

    lines: list[SyncLine]
    cursor: Cursor | None
    more: bool
