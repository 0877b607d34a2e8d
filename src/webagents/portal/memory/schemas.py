"""What the memory store takes in (its answers are the wire's: portal_wire/memory.py), and
the checks of namespaces, keys and sizes (the agent's own rules, so that a note the store
keeps is one the agent's folder can hold)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE, identity_is_nameable
from ...notes.layout import KEY_RULE, is_key
from ...portal_wire.memory import SyncLineFields
from ..errors import BadInput, PortalError
from ..storable import check_storable

MAX_CONTENT_BYTES = 1_000_000
MAX_DESCRIPTION_CHARS = 1000
MAX_SOURCE_CHARS = 100
MAX_SYNC_LINES = 500
MAX_SYNC_BYTES = 8_000_000
NAMESPACE_RULE = (
    "a namespace is owner, shared, or caller:<identity> (as the agent names its callers: "
    "caller:alice, caller:jwt:<issuer>#<id>, caller:channel:<type>:<id>)"
)


BAD_CURSOR = (
    "since is the cursor of an earlier sync answer, sent back as it came (a string): send "
    "that, or leave since out to pull from the start"
)
_MAX_CURSOR = 2**63 - 1


def cursor_text(cursor: int) -> str:
    """A change number as the wire's cursor: an opaque string (SPEC P5; the platform's SDK
    keeps only a string). Today it is the decimal number, so the integers that older
    clients kept are cursors too."""
    return str(cursor)


def cursor_of(since: str | None) -> int:
    """The change number of a cursor a client sent back (absent or "": the start); 400
    `bad_cursor`, saying what to send, for anything this store never gave."""
    if since is None or since == "":
        return 0
    if not (since.isascii() and since.isdigit()) or int(since) > _MAX_CURSOR:
        raise BadInput(f"{BAD_CURSOR} (not {since[:80]!r})", code="bad_cursor")
    return int(since)


class TooLarge(PortalError):
    status = 413
    code = "too_large"


def entry_id(agent_id: uuid.UUID, namespace: str, key: str) -> uuid.UUID:
    """SPEC P5: the same id on every side that knows the agent, namespace and key."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{agent_id}\n{namespace}\n{key}")


def check_namespace(namespace: str) -> str:
    if namespace in (OWNER_NAMESPACE, SHARED_NAMESPACE):
        return namespace
    identity = namespace.removeprefix("caller:")
    if identity != namespace and identity_is_nameable(identity):
        return namespace
    raise BadInput(f"{namespace!r} is not a namespace: {NAMESPACE_RULE}", code="bad_namespace")


def check_key(key: str) -> str:
    if not is_key(key):
        raise BadInput(f"{key!r} is not a valid key: {KEY_RULE}", code="bad_key")
    return key


def check_note(content: str, description: str, source: str) -> None:
    check_storable("content", content)
    check_storable("description", description)
    check_storable("source", source)
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > MAX_CONTENT_BYTES:
        raise TooLarge(
            f"the note's content is {size:,} bytes, over the store's {MAX_CONTENT_BYTES:,}: "
            "split it into several notes"
        )
    if len(description) > MAX_DESCRIPTION_CHARS or "\n" in description:
        raise BadInput(
            f"a description is one line of at most {MAX_DESCRIPTION_CHARS} characters: "
            "shorten it (the note's content holds the rest)",
            code="bad_description",
        )
    if len(source) > MAX_SOURCE_CHARS:
        raise BadInput(
            f"source is at most {MAX_SOURCE_CHARS} characters (it names what wrote the note)",
            code="bad_source",
        )


class PutIn(BaseModel):
    """PUT's body. `content_sha256`: absent or null, no precondition; "" the entry must not
    exist; a hash, the entry's current content must have it (else 409, nothing changed)."""

    model_config = ConfigDict(extra="forbid")

    agentId: str | None = None
    namespace: str
    key: str
    content: str
    description: str = ""
    source: str = ""
    at: datetime | None = None
    content_sha256: str | None = None


class SyncLineIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["put", "delete"]
    id: uuid.UUID | None = None
    namespace: str | None = None
    key: str
    content: str | None = None
    description: str | None = None
    source: str | None = None
    at: datetime | None = None
    content_sha256: str | None = None


class SyncIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agentId: str | None = None
    namespace: str
    lines: list[SyncLineIn] = Field(max_length=MAX_SYNC_LINES)


class SyncLineOut(SyncLineFields):
    cursor: int

    @field_serializer("cursor", when_used="json")
    def _cursor_text(self, cursor: int) -> str:
        return cursor_text(cursor)


class SyncPage(BaseModel):
    """`GET action=sync`'s answer, read by clients as portal_wire's `SyncAnswer`."""

    lines: list[SyncLineOut]
    cursor: int
    more: bool

    @field_serializer("cursor", when_used="json")
    def _cursor_text(self, cursor: int) -> str:
        return cursor_text(cursor)


class VersionOut(BaseModel):
    """One kept change of an entry (P6), newest first in a history."""

    id: uuid.UUID
    entry_id: uuid.UUID
    namespace: str
    key: str
    op: Literal["put", "delete"]
    content: str
    description: str
    source: str
    content_sha256: str
    by: str
    at: datetime
    recorded_at: datetime
    cursor: int
