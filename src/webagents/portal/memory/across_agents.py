"""All SQL of the memory store's background jobs, the one reader and writer across agents:
made only from a SystemScope (the embedding worker's, the retention sweeper's), so that
unscoped access to memory is `grep -rn SystemScope`.

The embedding queue is the database itself (embedding_queue.py): an entry is due when it
has no vector of the current model, or one made before its latest change (its cursor
differs). What one agent's retention removes goes through that agent's own store
(MemoryStore.for_system); here are only the reads that find the agents to work on.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select, text, update
from sqlalchemy.orm import Session

from ..db import dialect, pgvector, vector_bytes
from ..db.tables import MemoryEntry, MemoryFeed, MemoryRetention, MemoryVector, utcnow
from ..scope import SystemScope, require_system_scope

BATCH = 32
KEEP_ROWS = 500  # rows of one statement of keep_vectors (SQLite binds 6 values a row)
MAX_TEXT_CHARS = 8000  # models read far less; the rest would only cost


@dataclass(frozen=True)
class Due:
    agent_id: uuid.UUID
    entry_id: uuid.UUID
    cursor: int
    text: str


@dataclass(frozen=True)
class Claim:
    """A worker's batch (`items`, by cursor), and the cursor of the first due entry another
    worker held (None: none), before which the worker knows every due entry is its own."""

    items: list[Due]
    held_from: int | None


# The space of the embedding workers' claims among PostgreSQL's advisory locks: "wa" "em".
_EMBEDDING_LOCKS = 0x7761656D


class AcrossAgents:
    """Every agent's memory, for a background job."""

    def __init__(self, session: Session, scope: SystemScope) -> None:
        self._session = session
        self._scope = require_system_scope(scope)

    def feeds(self) -> dict[uuid.UUID, int]:
        """Each agent's last cursor: a row per agent with notes, read at every idle look."""
        rows = self._session.execute(select(MemoryFeed.agent_id, MemoryFeed.last_cursor))
        return {agent: int(cursor) for agent, cursor in rows}

    def agents_with_rules(self) -> list[uuid.UUID]:
        """The agents with a retention rule: those the sweeper looks at."""
        return list(self._session.scalars(select(MemoryRetention.agent_id).distinct()))

    def due(
        self,
        model: str,
        limit: int = BATCH,
        *,
        agent_id: uuid.UUID | None = None,
        since: int = 0,
        among: Sequence[uuid.UUID] | None = None,
    ) -> list[Due]:
        """Entries without a vector of `model` as of their latest change: of every agent,
        oldest change first; or of one agent, those changed after cursor `since`, by cursor;
        `among`: of these entries only."""
        vector = MemoryVector
        query = (
            select(
                MemoryEntry.agent_id,
                MemoryEntry.id,
                MemoryEntry.cursor,
                MemoryEntry.key,
                MemoryEntry.description,
                MemoryEntry.content,
            )
            .outerjoin(vector, vector.entry_id == MemoryEntry.id)
            .where(
                MemoryEntry.deleted_at.is_(None),
                or_(
                    vector.entry_id.is_(None),
                    vector.model != model,
                    vector.entry_cursor != MemoryEntry.cursor,
                ),
            )
            .limit(limit)
        )
        if agent_id is None:
            query = query.order_by(MemoryEntry.updated_at)
        else:
            query = query.where(
                MemoryEntry.agent_id == agent_id, MemoryEntry.cursor > since
            ).order_by(MemoryEntry.cursor)
        if among is not None:
            query = query.where(MemoryEntry.id.in_(among))
        rows = self._session.execute(query)
        return [
            Due(agent, ident, cursor, f"{key}\n{description}\n{content}"[:MAX_TEXT_CHARS])
            for agent, ident, cursor, key, description, content in rows
        ]

    def claim(self, model: str, agent_id: uuid.UUID, since: int, limit: int = BATCH) -> Claim:
        """One agent's due entries after cursor `since` that no other worker holds, each held
        by this transaction (an advisory lock: PostgreSQL, where several workers may share
        the queue; dialect.try_hold_lock). Only a lock is held, no row: a writer changing a
        held entry never waits for the model."""
        mine: list[Due] = []
        held_from: int | None = None
        after = since
        while len(mine) < limit:
            page = self.due(model, limit, agent_id=agent_id, since=after)
            for item in page:
                if len(mine) == limit:
                    break
                if dialect.try_hold_lock(self._session, _EMBEDDING_LOCKS, item.entry_id.hex):
                    mine.append(item)
                elif held_from is None:
                    held_from = item.cursor
            if len(page) < limit:
                break
            after = page[-1].cursor
        # Another worker may have stored some of them between the look and the lock.
        still = (
            self.due(
                model,
                len(mine),
                agent_id=agent_id,
                since=since,
                among=[item.entry_id for item in mine],
            )
            if mine
            else []
        )
        return Claim(still, held_from)

    def keep_vectors(self, model: str, done: Sequence[tuple[Due, Sequence[float]]]) -> None:
        """Keep the vectors (float32 bytes; on PostgreSQL with pgvector, the `embedding`
        column too), each as of the cursor its text was read at: if the entry changed
        meanwhile, it stays due and is embedded again; one forgotten (or removed) since it was
        read gets none. A few statements per batch, not one per note: on PostgreSQL one
        INSERT of every row from arrays, the check for live entries in its join; on SQLite
        one SELECT of the live ones and one INSERT of many rows, per KEEP_ROWS."""
        rows = list({item.entry_id: (item, vector) for item, vector in done}.values())
        if not rows:
            return
        now = utcnow()
        on_postgresql = dialect.is_postgresql(self._session)
        embedding = on_postgresql and pgvector.in_use(self._session)
        if embedding:
            pgvector.ensure_index(self._session, model, len(rows[0][1]))
        for start in range(0, len(rows), KEEP_ROWS):
            chunk = rows[start : start + KEEP_ROWS]
            if on_postgresql:
                self._keep_on_postgresql(model, chunk, now, embedding=embedding)
            else:
                self._keep_on_sqlite(model, chunk, now)
        agents = sorted({item.agent_id for item, _ in rows})
        self._session.execute(
            update(MemoryFeed)
            .where(MemoryFeed.agent_id.in_(agents))
            .values(vectors_version=MemoryFeed.vectors_version + 1)
        )
        self._session.flush()

    def _keep_on_sqlite(
        self, model: str, rows: Sequence[tuple[Due, Sequence[float]]], now: datetime
    ) -> None:
        live = set(
            self._session.scalars(
                select(MemoryEntry.id).where(
                    MemoryEntry.id.in_([item.entry_id for item, _ in rows]),
                    MemoryEntry.deleted_at.is_(None),
                )
            )
        )
        values = [
            {
                "entry_id": item.entry_id,
                "agent_id": item.agent_id,
                "model": model,
                "entry_cursor": item.cursor,
                "vector": vector_bytes.encode(vector),
                "embedded_at": now,
            }
            for item, vector in rows
            if item.entry_id in live
        ]
        if values:
            dialect.upsert_many(self._session, MemoryVector, MemoryVector.entry_id, values)

    def _keep_on_postgresql(
        self,
        model: str,
        rows: Sequence[tuple[Due, Sequence[float]]],
        now: datetime,
        *,
        embedding: bool,
    ) -> None:
        params: dict[str, object] = {
            "model": model,
            "now": now,
            "ids": [item.entry_id for item, _ in rows],
            "agents": [item.agent_id for item, _ in rows],
            "cursors": [item.cursor for item, _ in rows],
            "vectors": [vector_bytes.encode(vector) for _, vector in rows],
        }
        # Each row's own values from arrays (unnest), the same model and moment for all.
        arrays = ["uuid[]", "uuid[]", "bigint[]", "bytea[]"]
        taken = ["entry_id", "agent_id", "entry_cursor", "vector"]
        made = ["v.entry_id", "v.agent_id", "v.entry_cursor", "v.vector", ":model", ":now"]
        if embedding:
            params["embedding"] = [pgvector.literal(vector) for _, vector in rows]
            arrays.append("text[]")
            taken.append(pgvector.COLUMN)
            made.append(f"CAST(v.{pgvector.COLUMN} AS vector)")
        names = [*taken[:4], "model", "embedded_at", *taken[4:]]
        binds = [":ids", ":agents", ":cursors", ":vectors", ":embedding"]
        given = ", ".join(f"CAST({b} AS {a})" for b, a in zip(binds, arrays, strict=False))
        updated = ", ".join(f"{name} = excluded.{name}" for name in names[1:])
        self._session.execute(
            text(
                f"INSERT INTO memory_vectors ({', '.join(names)}) SELECT {', '.join(made)} "
                f"FROM unnest({given}) AS v({', '.join(taken)}) "
                # An entry forgotten (or removed) since it was read gets no vector.
                "JOIN memory_entries AS e ON e.id = v.entry_id AND e.deleted_at IS NULL "
                f"ON CONFLICT (entry_id) DO UPDATE SET {updated}"
            ),
            params,
        )
