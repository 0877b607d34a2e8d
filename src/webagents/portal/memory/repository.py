"""All SQL of one agent's memory store, scoped to that agent (the background jobs' reads
across agents are in across_agents.py).

A `MemoryStore` is made in one of three ways only: for the agent, from the AgentScope its key
was verified as; for its owner, from an AccountScope and the agent's id (404 unless that
account owns the agent); or for a background job (the retention sweeper), from a
SystemScope. Every query starts from the store's agent, so none can run for no agent or for
every agent; the SQL that full-text search and the vector cache write themselves (search.py,
vector_cache.py) runs through `run`, with the store's agent bound.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Result,
    Select,
    TextClause,
    and_,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from ..db import dialect, pgvector
from ..db.tables import (
    Agent,
    MemoryEntry,
    MemoryFeed,
    MemoryRetention,
    MemoryVector,
    MemoryVersion,
)
from ..errors import NotFound
from ..scope import (
    AccountScope,
    AgentScope,
    SystemScope,
    require_agent_scope,
    require_scope,
    require_system_scope,
)
from . import wakes
from .quotas import Usage

_MADE_HERE = object()


class MemoryStore:
    """One agent's entries, versions and change feed."""

    # One entry by its name, built once: a get is this query and the key check, and building
    # the expression on each call was half of its Python work (bench/memory_get.py).
    _BY_NAME = select(MemoryEntry).where(
        MemoryEntry.agent_id == bindparam("agent"),
        MemoryEntry.namespace == bindparam("namespace"),
        MemoryEntry.key == bindparam("key"),
    )

    def __init__(self, session: Session, agent_id: uuid.UUID, _made: object = None) -> None:
        if _made is not _MADE_HERE:
            raise TypeError(
                "a MemoryStore is made by MemoryStore.for_agent, .for_owner or .for_system"
            )
        self._session = session
        self.agent_id = agent_id

    def flush(self) -> None:
        """Send this transaction's changes so far (the service reads them back)."""
        self._session.flush()

    @property
    def info(self) -> dict[Any, Any]:
        """The transaction's notes for after its commit (changes.py: who is told of it)."""
        return self._session.info

    def made_due(self) -> None:
        """This transaction wrote a note that needs its vector: the embedding queue's workers
        in other processes are woken when it commits (wakes.py; PostgreSQL only)."""
        wakes.tell(self._session)

    @property
    def on_postgresql(self) -> bool:
        """For full-text search, whose SQL is one database's or the other's (search.py)."""
        return dialect.is_postgresql(self._session)

    @property
    def ranks_vectors(self) -> bool:
        """Whether the database ranks this store's vectors (PostgreSQL with pgvector:
        vector_index.py), else search keeps them in this process (vector_cache.py)."""
        return pgvector.in_use(self._session)

    def run(self, statement: TextClause, params: Mapping[str, object]) -> Result[Any]:
        """Run SQL written elsewhere (full-text search, the vector cache's reads) with this
        store's agent bound as `:agent`, which the statement must filter on."""
        return self._session.execute(statement, {**params, "agent": self.agent_id})

    @classmethod
    def for_agent(cls, session: Session, scope: AgentScope) -> MemoryStore:
        return cls(session, require_agent_scope(scope).agent_id, _MADE_HERE)

    @classmethod
    def for_owner(cls, session: Session, scope: AccountScope, agent_id: uuid.UUID) -> MemoryStore:
        owner = require_scope(scope)
        found = session.scalar(
            select(Agent.id).where(Agent.id == agent_id, Agent.user_id == owner.user_id)
        )
        if found is None:
            raise NotFound("you have no such agent on this portal: see your agents' list")
        return cls(session, found, _MADE_HERE)

    @classmethod
    def for_system(
        cls, session: Session, scope: SystemScope, agent_id: uuid.UUID
    ) -> MemoryStore | None:
        """The agent's store for a background job (the retention sweeper); None when the
        agent is gone."""
        require_system_scope(scope)
        found = session.scalar(select(Agent.id).where(Agent.id == agent_id))
        return cls(session, found, _MADE_HERE) if found is not None else None

    # The change feed: each change takes the next cursor under the feed row's lock.

    def next_cursor(self) -> int:
        """The next change number of this agent. The UPDATE locks the agent's feed row until
        the transaction ends, so writers of one agent take turns and commit in cursor order
        (SQLite's BEGIN IMMEDIATE already serializes every writer)."""
        bump = (
            update(MemoryFeed)
            .where(MemoryFeed.agent_id == self.agent_id)
            .values(last_cursor=MemoryFeed.last_cursor + 1)
            .returning(MemoryFeed.last_cursor)
            # No feed row is kept in the session: nothing there to bring up to date (the
            # ORM's default would search the session for it at every change).
            .execution_options(synchronize_session=False)
        )
        cursor = self._session.scalar(bump)
        if cursor is None:
            self._make_feed()
            cursor = self._session.scalar(bump)
        assert cursor is not None
        return int(cursor)

    def _make_feed(self) -> None:
        values = {
            "agent_id": self.agent_id,
            "last_cursor": 0,
            "vectors_version": 0,
            "entries": 0,
            "bytes": 0,
            "version_bytes": 0,
        }
        dialect.insert_new(self._session, MemoryFeed, values)

    def feed_state(self) -> tuple[int, int]:
        """(last cursor, vectors version): what a cache of this agent's vectors depends on."""
        found = self._session.execute(
            select(MemoryFeed.last_cursor, MemoryFeed.vectors_version).where(
                MemoryFeed.agent_id == self.agent_id
            )
        ).one_or_none()
        return (int(found[0]), int(found[1])) if found is not None else (0, 0)

    # Usage, for the quotas (quotas.py): kept on the feed row, changed under its lock.

    def usage(self) -> Usage:
        """This agent's live entries and their bytes, and the bytes of its versions."""
        found = self._session.execute(
            select(MemoryFeed.entries, MemoryFeed.bytes, MemoryFeed.version_bytes).where(
                MemoryFeed.agent_id == self.agent_id
            )
        ).one_or_none()
        return Usage(*(int(n) for n in found)) if found is not None else Usage(0, 0, 0)

    def owners_usage(self) -> Usage:
        """The usage of every agent of this agent's owner: a sum, the one figure about
        other agents this store answers (the owner's quota)."""
        owner = select(Agent.user_id).where(Agent.id == self.agent_id).scalar_subquery()
        found = self._session.execute(
            select(
                func.coalesce(func.sum(MemoryFeed.entries), 0),
                func.coalesce(func.sum(MemoryFeed.bytes), 0),
                func.coalesce(func.sum(MemoryFeed.version_bytes), 0),
            )
            .join(Agent, Agent.id == MemoryFeed.agent_id)
            .where(Agent.user_id == owner)
        ).one()
        return Usage(*(int(n) for n in found))

    def count(self, entries: int, size: int, version_bytes: int = 0) -> None:
        """Add a change's entries (+1, -1 or 0), bytes and version bytes to the agent's
        usage."""
        if entries == 0 and size == 0 and version_bytes == 0:
            return
        self._session.execute(
            update(MemoryFeed)
            .where(MemoryFeed.agent_id == self.agent_id)
            .values(
                entries=MemoryFeed.entries + entries,
                bytes=MemoryFeed.bytes + size,
                version_bytes=MemoryFeed.version_bytes + version_bytes,
            )
            .execution_options(synchronize_session=False)
        )

    # Entries.

    def _entries(self) -> Select[MemoryEntry]:
        return select(MemoryEntry).where(MemoryEntry.agent_id == self.agent_id)

    def _live(self) -> Select[MemoryEntry]:
        return self._entries().where(MemoryEntry.deleted_at.is_(None))

    def entry(self, namespace: str, key: str) -> MemoryEntry | None:
        """The entry, a forgotten one (tombstone) included."""
        params = {"agent": self.agent_id, "namespace": namespace, "key": key}
        return self._session.scalars(self._BY_NAME, params).one_or_none()

    def live_entry(self, namespace: str, key: str) -> MemoryEntry | None:
        found = self.entry(namespace, key)
        return found if found is not None and found.deleted_at is None else None

    def live_by_ids(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, MemoryEntry]:
        if not ids:
            return {}
        mine = dialect.narrows_little(self._session, MemoryEntry.agent_id == self.agent_id)
        rows = self._session.scalars(
            select(MemoryEntry).where(
                MemoryEntry.id.in_(ids), mine, MemoryEntry.deleted_at.is_(None)
            )
        )
        return {row.id: row for row in rows}

    def add_entry(self, entry: MemoryEntry) -> None:
        entry.agent_id = self.agent_id
        self._session.add(entry)

    def list_entries(
        self,
        namespaces: Sequence[str] | None,
        *,
        prefix: str | None,
        exclude_source: str | None,
        limit: int,
    ) -> list[MemoryEntry]:
        query = self._live()
        if namespaces is not None:
            query = query.where(MemoryEntry.namespace.in_(namespaces))
        if prefix:
            query = query.where(MemoryEntry.key.startswith(prefix, autoescape=True))
        if exclude_source is not None:
            query = query.where(MemoryEntry.source != exclude_source)
        query = query.order_by(MemoryEntry.updated_at.desc(), MemoryEntry.key).limit(limit)
        return list(self._session.scalars(query))

    def namespaces(self) -> list[tuple[str, int]]:
        """Each namespace with live entries, and how many (for the owner's pages)."""
        rows = self._session.execute(
            select(MemoryEntry.namespace, func.count())
            .where(MemoryEntry.agent_id == self.agent_id, MemoryEntry.deleted_at.is_(None))
            .group_by(MemoryEntry.namespace)
            .order_by(MemoryEntry.namespace)
        )
        return [(str(name), int(count)) for name, count in rows]

    def last_changes(self) -> dict[str, datetime]:
        """Each namespace's last change: a write, or a forgetting (for the owner's pages)."""
        changed = func.max(func.coalesce(MemoryEntry.deleted_at, MemoryEntry.updated_at))
        rows = self._session.execute(
            select(MemoryEntry.namespace, changed)
            .where(MemoryEntry.agent_id == self.agent_id)
            .group_by(MemoryEntry.namespace)
        )
        return {str(name): at for name, at in rows}

    def live_counts_at(self, moments: Sequence[datetime]) -> dict[str, list[int]]:
        """Each namespace's live entries at each of `moments`, for the owner's chart of growth:
        written by then and not forgotten by then (an entry forgotten and written again counts
        from its first writing, as the entry keeps only when it was made and last forgotten)."""
        made, gone = MemoryEntry.created_at, MemoryEntry.deleted_at
        counts = [
            func.sum(case((and_(made <= at, or_(gone.is_(None), gone > at)), 1), else_=0))
            for at in moments
        ]
        rows = self._session.execute(
            select(MemoryEntry.namespace, *counts)
            .where(MemoryEntry.agent_id == self.agent_id)
            .group_by(MemoryEntry.namespace)
        )
        return {str(row[0]): [int(n or 0) for n in row[1:]] for row in rows}

    def _forgetting(self) -> ColumnElement[bool]:
        """Joins this agent's forgotten entries to the version their forgetting left (the
        change that set their cursor): what restores them. Once retention removes that
        version, nothing is left to restore and the entry is no longer listed."""
        return and_(
            MemoryEntry.agent_id == self.agent_id,
            MemoryEntry.deleted_at.is_not(None),
            MemoryVersion.agent_id == MemoryEntry.agent_id,
            MemoryVersion.entry_id == MemoryEntry.id,
            MemoryVersion.cursor == MemoryEntry.cursor,
            MemoryVersion.op == "delete",
        )

    def forgotten(self, namespace: str, limit: int) -> list[MemoryVersion]:
        """The versions that forgot a namespace's entries, the last forgotten first."""
        query = (
            select(MemoryVersion)
            .join(MemoryEntry, self._forgetting())
            .where(MemoryEntry.namespace == namespace)
            .order_by(MemoryEntry.cursor.desc())
            .limit(limit)
        )
        return list(self._session.scalars(query))

    def forgotten_counts(self) -> dict[str, int]:
        """How many restorable forgotten entries each namespace has (none: not named)."""
        rows = self._session.execute(
            select(MemoryEntry.namespace, func.count())
            .join(MemoryVersion, self._forgetting())
            .group_by(MemoryEntry.namespace)
        )
        return {str(name): int(count) for name, count in rows}

    def changes(
        self, namespaces: Sequence[str] | None, since: int, upto: int, limit: int
    ) -> list[MemoryEntry]:
        """Entries (tombstones included) whose latest change is in (since, upto], by cursor."""
        query = self._entries().where(MemoryEntry.cursor > since, MemoryEntry.cursor <= upto)
        if namespaces is not None:
            query = query.where(MemoryEntry.namespace.in_(namespaces))
        return list(self._session.scalars(query.order_by(MemoryEntry.cursor).limit(limit)))

    # Versions.

    def add_version(self, version: MemoryVersion) -> None:
        """Keep a version (its bytes the caller counts, with the change's: one UPDATE)."""
        version.agent_id = self.agent_id
        self._session.add(version)

    def prune_versions(self, entry_id: uuid.UUID, keep: int) -> None:
        """Drop the entry's versions beyond the newest `keep` (at least 1: the newest holds
        its current text), oldest first."""
        mine = (MemoryVersion.agent_id == self.agent_id, MemoryVersion.entry_id == entry_id)
        oldest_kept = (
            select(MemoryVersion.cursor)
            .where(*mine)
            .order_by(MemoryVersion.cursor.desc())
            .offset(max(1, keep) - 1)
            .limit(1)
            .scalar_subquery()
        )
        self.drop_versions(*mine, MemoryVersion.cursor < oldest_kept)

    def drop_versions(self, *where: ColumnElement[bool]) -> int:
        """Drop this agent's versions that match `where`, their bytes taken off its usage:
        how many."""
        octets = dialect.octet_length(self._session, MemoryVersion.content)
        dropped = self._session.execute(
            delete(MemoryVersion)
            .where(MemoryVersion.agent_id == self.agent_id, *where)
            .returning(octets)
            .execution_options(synchronize_session=False)
        ).all()
        self.count(0, 0, -sum(int(size) for (size,) in dropped))
        return len(dropped)

    def versions(self, entry_id: uuid.UUID) -> list[MemoryVersion]:
        return list(
            self._session.scalars(
                select(MemoryVersion)
                .where(MemoryVersion.agent_id == self.agent_id, MemoryVersion.entry_id == entry_id)
                .order_by(MemoryVersion.cursor.desc())
            )
        )

    def version(self, version_id: uuid.UUID) -> MemoryVersion | None:
        return self._session.scalars(
            select(MemoryVersion).where(
                MemoryVersion.agent_id == self.agent_id, MemoryVersion.id == version_id
            )
        ).one_or_none()

    # Vectors.

    def drop_vector(self, entry_id: uuid.UUID) -> None:
        self._session.execute(
            delete(MemoryVector).where(
                MemoryVector.agent_id == self.agent_id, MemoryVector.entry_id == entry_id
            )
        )

    # Retention (retention.py says what the rules mean, and sweeps by them).

    def retention_rules(self) -> list[tuple[str, int]]:
        """(namespace, days) of each rule of this agent, by namespace."""
        rows = self._session.scalars(
            select(MemoryRetention)
            .where(MemoryRetention.agent_id == self.agent_id)
            .order_by(MemoryRetention.namespace)
        )
        return [(row.namespace, row.days) for row in rows]

    def set_retention(self, namespace: str, days: int | None, now: datetime) -> None:
        """Set the namespace's rule, or with no days remove it."""
        row = self._session.scalars(
            select(MemoryRetention)
            .where(
                MemoryRetention.agent_id == self.agent_id, MemoryRetention.namespace == namespace
            )
            .with_for_update()
        ).one_or_none()
        if days is None:
            if row is not None:
                self._session.delete(row)
        elif row is None:
            self._session.add(
                MemoryRetention(agent_id=self.agent_id, namespace=namespace, days=days)
            )
        else:
            row.days = days
            row.updated_at = now
        self._session.flush()

    def hold_feed(self) -> None:
        """Take the lock every writer of this agent takes first (next_cursor): until the
        transaction ends, nothing of the agent changes under the caller."""
        self._session.execute(
            select(MemoryFeed.agent_id)
            .where(MemoryFeed.agent_id == self.agent_id)
            .with_for_update()
        )

    def live_matching(self, condition: ColumnElement[bool]) -> list[tuple[str, str, str]]:
        """(namespace, key, content hash) of the live entries that meet `condition`, by cursor."""
        rows = self._session.execute(
            select(MemoryEntry.namespace, MemoryEntry.key, MemoryEntry.content_sha256)
            .where(
                MemoryEntry.agent_id == self.agent_id, MemoryEntry.deleted_at.is_(None), condition
            )
            .order_by(MemoryEntry.cursor)
        )
        return [(str(namespace), str(key), str(digest)) for namespace, key, digest in rows]
