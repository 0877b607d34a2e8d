"""The rules of the memory store: every change is a version (P6, a delete included), a
`content_sha256` precondition that is stale changes nothing (409), each change takes the
agent's next cursor, and a put that changes nothing is no change.

The API (for the agent) and the owner's pages call these same functions, with a store made
for the one or the other (repository.MemoryStore), and a `by` that says who wrote.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from ...portal_wire.memory import EntryOut
from ..db.tables import MemoryEntry, MemoryVersion
from ..errors import BadInput, Conflict, NotFound
from ..settings import DEFAULT_QUOTAS, MemoryQuotas
from ..storable import check_storable
from .changes import changed as tell_after_commit
from .quotas import check_write
from .repository import MemoryStore
from .schemas import (
    MAX_SYNC_BYTES,
    SyncLineIn,
    SyncLineOut,
    SyncPage,
    TooLarge,
    VersionOut,
    check_key,
    check_namespace,
    check_note,
    entry_id,
)

BY_AGENT = "agent"
BY_SYNC = "sync"
MAX_LIST = 1000
MAX_SYNC_PAGE = 1000
# The years an `at` may name: beyond them a time zone's offset overflows datetime.
MIN_YEAR, MAX_YEAR = 1900, 9000


def by_owner(username: str) -> str:
    """`by` of a change the owner made on the portal's pages."""
    return f"owner:{username}"


def sha256_of(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def entry_out(entry: MemoryEntry) -> EntryOut:
    return EntryOut(
        id=entry.id,
        namespace=entry.namespace,
        key=entry.key,
        content=entry.content,
        description=entry.description,
        source=entry.source,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        content_sha256=entry.content_sha256,
    )


def _moment(at: datetime | None) -> datetime:
    if at is None:
        return datetime.now(UTC)
    if at.tzinfo is None:
        raise BadInput(
            "at must carry its time zone (for example 2026-01-31T12:00:00Z), or be null for "
            "the portal's time",
            code="bad_time",
        )
    if not MIN_YEAR <= at.year <= MAX_YEAR:
        raise BadInput(
            f"at is in the year {at.year}: give a time between the years {MIN_YEAR} and "
            f"{MAX_YEAR} (for example 2026-01-31T12:00:00Z), or null for the portal's time",
            code="bad_time",
        )
    return at.astimezone(UTC)


def _check_precondition(current: MemoryEntry | None, expected: str | None) -> None:
    """None: no precondition; "": the entry must not exist; a hash: the current content's."""
    if expected is None:
        return
    now = current.content_sha256 if current is not None else ""
    if expected == now:
        return
    seen = f"its content_sha256 is now {now}" if now else "it does not exist now"
    raise Conflict(
        f"the entry changed since you read it ({seen}); nothing was changed: read it again, "
        "merge, and send the new content_sha256",
        code="stale_content",
    )


def get(store: MemoryStore, namespace: str, key: str) -> EntryOut | None:
    found = store.live_entry(check_namespace(namespace), check_key(key))
    return entry_out(found) if found is not None else None


def namespaces(store: MemoryStore) -> list[tuple[str, int]]:
    """Each namespace with notes, and how many (the owner's pages list them)."""
    return store.namespaces()


def list_entries(
    store: MemoryStore,
    namespaces: Sequence[str] | None,
    *,
    limit: int = 100,
    prefix: str | None = None,
    exclude_source: str | None = None,
) -> list[EntryOut]:
    wanted = [check_namespace(n) for n in namespaces] if namespaces is not None else None
    check_storable("prefix", prefix)
    check_storable("excludeSource", exclude_source)
    rows = store.list_entries(
        wanted, prefix=prefix, exclude_source=exclude_source, limit=max(1, min(limit, MAX_LIST))
    )
    return [entry_out(row) for row in rows]


def put(
    store: MemoryStore,
    *,
    namespace: str,
    key: str,
    content: str,
    description: str = "",
    source: str = "",
    at: datetime | None = None,
    content_sha256: str | None = None,
    by: str,
    quotas: MemoryQuotas = DEFAULT_QUOTAS,
) -> EntryOut:
    check_namespace(namespace)
    check_key(key)
    check_note(content, description, source)
    moment = _moment(at)
    cursor = store.next_cursor()  # first: the precondition is checked while writers wait
    entry = store.entry(namespace, key)
    current = entry if entry is not None and entry.deleted_at is None else None
    _check_precondition(current, content_sha256)
    digest = sha256_of(content)
    if (
        current is not None
        and current.content_sha256 == digest
        and current.description == description
        and current.source == source
    ):
        return entry_out(current)  # nothing new: no version, no change in the feed
    added = 0 if current is not None else 1
    size = _bytes(content)
    grown = size - (_bytes(current.content) if current is not None else 0)
    # Checked at every put, as each keeps a version; entries and bytes only where they grow.
    check_write(
        quotas, store.usage(), store.owners_usage(), entries=added, size=grown, version=size
    )
    if entry is None:
        entry = MemoryEntry(
            id=entry_id(store.agent_id, namespace, key), namespace=namespace, key=key
        )
        store.add_entry(entry)
    if current is None:
        entry.created_at = moment
    entry.content = content
    entry.content_sha256 = digest
    entry.description = description
    entry.source = source
    entry.updated_at = moment
    entry.deleted_at = None
    entry.cursor = cursor
    store.add_version(_version_of(entry, "put", by, moment, cursor))
    store.flush()
    store.count(added, grown, size)
    store.prune_versions(entry.id, quotas.versions_per_entry)
    tell_after_commit(store.info, store.agent_id, cursor)
    store.made_due()  # its new text needs a vector
    return entry_out(entry)


def delete(
    store: MemoryStore,
    namespace: str,
    key: str,
    *,
    content_sha256: str | None = None,
    at: datetime | None = None,
    by: str,
    quotas: MemoryQuotas | None = None,
) -> bool:
    """Forget the entry (its text stays in its versions): whether there was one. With
    `quotas`, the entry's versions beyond its bound go (the API's and the pages' forgets);
    without (retention's), they stay until the next change or retention removes them."""
    check_namespace(namespace)
    check_key(key)
    moment = _moment(at)
    cursor = store.next_cursor()
    current = store.live_entry(namespace, key)
    _check_precondition(current, content_sha256)
    if current is None:
        return False
    forgotten = _bytes(current.content)
    # The forgetting's version keeps the forgotten text (to restore it): counted, not refused.
    store.add_version(_version_of(current, "delete", by, moment, cursor))
    store.count(-1, -forgotten, forgotten)
    current.deleted_at = moment
    current.updated_at = moment
    current.cursor = cursor
    current.content = ""
    current.description = ""
    current.content_sha256 = sha256_of("")
    store.drop_vector(current.id)
    store.flush()
    if quotas is not None:
        store.prune_versions(current.id, quotas.versions_per_entry)
    tell_after_commit(store.info, store.agent_id, cursor)
    return True


def _bytes(content: str) -> int:
    return len(content.encode("utf-8", "surrogatepass"))


def _version_of(entry: MemoryEntry, op: str, by: str, at: datetime, cursor: int) -> MemoryVersion:
    return MemoryVersion(
        id=uuid.uuid4(),
        entry_id=entry.id,
        namespace=entry.namespace,
        key=entry.key,
        op=op,
        description=entry.description,
        content=entry.content,
        content_sha256=entry.content_sha256,
        source=entry.source,
        by=by,
        at=at,
        recorded_at=datetime.now(UTC),
        cursor=cursor,
    )


def changes(
    store: MemoryStore, namespaces: Sequence[str] | None, since: int, limit: int = 500
) -> SyncPage:
    """The changes after `since`, oldest first, a page at a time. The feed's cursor is read
    before the rows, so a page never reaches past a change not yet committed; with no more
    rows the answer's cursor is the feed's, past other namespaces' changes too."""
    wanted = [check_namespace(n) for n in namespaces] if namespaces else None
    if since < 0:
        raise BadInput("since is a cursor this store gave (0 for the start)", code="bad_cursor")
    size = max(1, min(limit, MAX_SYNC_PAGE))
    upto, _ = store.feed_state()
    rows = store.changes(wanted, since, upto, size + 1)
    more = len(rows) > size
    rows = rows[:size]
    cursor = rows[-1].cursor if more else max(upto, since)
    return SyncPage(lines=[_line_of(row) for row in rows], cursor=cursor, more=more)


def _line_of(entry: MemoryEntry) -> SyncLineOut:
    gone = entry.deleted_at is not None
    return SyncLineOut(
        op="delete" if gone else "put",
        id=entry.id,
        namespace=entry.namespace,
        key=entry.key,
        content=None if gone else entry.content,
        description=None if gone else entry.description,
        source=entry.source,
        at=entry.updated_at,
        content_sha256=None if gone else entry.content_sha256,
        cursor=entry.cursor,
    )


def apply_lines(
    store: MemoryStore,
    namespace: str,
    lines: Sequence[SyncLineIn],
    *,
    by: str = BY_SYNC,
    quotas: MemoryQuotas = DEFAULT_QUOTAS,
) -> int:
    """Apply pushed changes in order, all or none (a refused line refuses the request)."""
    check_namespace(namespace)
    size = sum(len((line.content or "").encode("utf-8", "surrogatepass")) for line in lines)
    if size > MAX_SYNC_BYTES:
        raise TooLarge(
            f"these lines hold {size:,} bytes of content, over {MAX_SYNC_BYTES:,} a request: "
            "send them in several requests"
        )
    for number, line in enumerate(lines, 1):
        if line.namespace is not None and line.namespace != namespace:
            raise BadInput(
                f"line {number} is for namespace {line.namespace!r}, not the request's "
                f"{namespace!r}: send each namespace's lines in a request of its own",
                code="namespace_mismatch",
            )
        if line.id is not None and line.id != entry_id(store.agent_id, namespace, line.key):
            raise BadInput(
                f"line {number}'s id is not the id of {namespace!r}/{line.key!r} "
                "(uuid5 of the URL namespace and '<agentId>\\n<namespace>\\n<key>')",
                code="bad_id",
            )
        if line.op == "delete":
            delete(
                store,
                namespace,
                line.key,
                content_sha256=line.content_sha256,
                at=line.at,
                by=by,
                quotas=quotas,
            )
            continue
        if line.content is None:
            raise BadInput(f"line {number} is a put without content", code="missing_content")
        put(
            store,
            namespace=namespace,
            key=line.key,
            content=line.content,
            description=line.description or "",
            source=line.source or "",
            at=line.at,
            content_sha256=line.content_sha256,
            by=by,
            quotas=quotas,
        )
    return len(lines)


def version_out(version: MemoryVersion) -> VersionOut:
    return VersionOut.model_validate(version, from_attributes=True)


def versions(store: MemoryStore, namespace: str, key: str) -> list[VersionOut]:
    """Every kept change of an entry, newest first (P6)."""
    ident = entry_id(store.agent_id, check_namespace(namespace), check_key(key))
    return [version_out(v) for v in store.versions(ident)]


def forgotten(store: MemoryStore, namespace: str, limit: int = MAX_LIST) -> list[VersionOut]:
    """The namespace's forgotten entries, each as the version its forgetting left (what was
    forgotten, when and by whom; restoring it brings the entry back), the last one first.
    They are listed until retention removes that version."""
    found = store.forgotten(check_namespace(namespace), max(1, min(limit, MAX_LIST)))
    return [version_out(version) for version in found]


def forgotten_counts(store: MemoryStore) -> dict[str, int]:
    return store.forgotten_counts()


def last_changes(store: MemoryStore) -> dict[str, datetime]:
    return store.last_changes()


GROWTH_DAYS = 30
GROWTH_POINTS = 11  # one every three days


def growth(store: MemoryStore, now: datetime) -> dict[str, list[int]]:
    """Each namespace's live entries over the last GROWTH_DAYS, oldest first, now last."""
    step = timedelta(days=GROWTH_DAYS) / (GROWTH_POINTS - 1)
    return store.live_counts_at([now - step * n for n in reversed(range(GROWTH_POINTS))])


def restore_version(
    store: MemoryStore,
    version_id: uuid.UUID,
    *,
    by: str,
    quotas: MemoryQuotas = DEFAULT_QUOTAS,
) -> EntryOut:
    """Make a kept version the entry's current text again (a delete's version brings back
    what was forgotten); the restore is itself a change, kept as a version."""
    version = store.version(version_id)
    if version is None:
        raise NotFound("there is no such version of this agent's notes")
    return put(
        store,
        namespace=version.namespace,
        key=version.key,
        content=version.content,
        description=version.description,
        source=version.source,
        by=by,
        quotas=quotas,
    )
