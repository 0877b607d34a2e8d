"""Embedding off the request path. The queue is the database itself: an entry is due when it
has no vector of the current model, or a vector made before its latest change (its cursor
differs). So any portal process can work the queue, and a restart loses nothing.

This is the store's one reader across agents, and it is no request's: it reads the text of
due entries and writes only vectors (and each agent's vectors version, which tells search
caches to reload). A worker thread in each serving process calls it; `embed_due` does one
round in one session (the tests call it directly).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import and_, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from ..db.tables import MemoryEntry, MemoryFeed, MemoryVector, utcnow
from ..embeddings import Embedder

log = logging.getLogger("webagents.portal.memory")

BATCH = 32
MAX_TEXT_CHARS = 8000  # models read far less; the rest would only cost


@dataclass(frozen=True)
class Due:
    agent_id: uuid.UUID
    entry_id: uuid.UUID
    cursor: int
    text: str


def due(db: Session, model: str, limit: int = BATCH) -> list[Due]:
    """Entries without a vector of `model` as of their latest change, oldest change first."""
    vector = MemoryVector
    rows = db.execute(
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
        .order_by(MemoryEntry.updated_at)
        .limit(limit)
    )
    return [
        Due(agent, ident, cursor, f"{key}\n{description}\n{content}"[:MAX_TEXT_CHARS])
        for agent, ident, cursor, key, description, content in rows
    ]


def store(db: Session, model: str, done: Sequence[tuple[Due, Sequence[float]]]) -> None:
    """Keep the vectors (float32 bytes), each as of the cursor its text was read at: if the
    entry changed meanwhile, it stays due and is embedded again."""
    if not done:
        return
    postgres = db.get_bind().dialect.name == "postgresql"
    now = utcnow()
    for item, vector in done:
        values = {
            "entry_id": item.entry_id,
            "agent_id": item.agent_id,
            "model": model,
            "entry_cursor": item.cursor,
            "vector": np.asarray(vector, dtype=np.float32).tobytes(),
            "embedded_at": now,
        }
        made = postgresql.insert(MemoryVector) if postgres else sqlite.insert(MemoryVector)
        upsert = made.values(values).on_conflict_do_update(
            index_elements=[MemoryVector.entry_id],
            set_={k: v for k, v in values.items() if k != "entry_id"},
        )
        # An entry forgotten (or removed) since it was read gets no vector.
        still = db.scalar(
            select(MemoryEntry.id).where(
                and_(MemoryEntry.id == item.entry_id, MemoryEntry.deleted_at.is_(None))
            )
        )
        if still is not None:
            db.execute(upsert)
    agents = sorted({item.agent_id for item, _ in done})
    db.execute(
        update(MemoryFeed)
        .where(MemoryFeed.agent_id.in_(agents))
        .values(vectors_version=MemoryFeed.vectors_version + 1)
    )
    db.flush()


def embed_due(db: Session, embedder: Embedder, limit: int = BATCH) -> int:
    """One round in one session: how many entries got a vector."""
    items = due(db, embedder.name, limit)
    if not items:
        return 0
    vectors = embedder.embed([item.text for item in items])
    store(db, embedder.name, list(zip(items, vectors, strict=True)))
    return len(items)


class EmbeddingWorker:
    """A thread that works the queue: it reads due entries in one short transaction, embeds
    them outside any transaction, and stores the vectors in another. A write in this process
    wakes it; otherwise it looks again every `idle` seconds (writes of other processes)."""

    def __init__(
        self, sessions: sessionmaker[Session], embedder: Embedder, *, idle: float = 2.0
    ) -> None:
        self._sessions = sessions
        self._embedder = embedder
        self._idle = idle
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-embedding", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def run_once(self) -> int:
        with self._sessions() as session:
            items = due(session, self._embedder.name)
            session.commit()
        if not items:
            return 0
        vectors = self._embedder.embed([item.text for item in items])
        with self._sessions() as session:
            store(session, self._embedder.name, list(zip(items, vectors, strict=True)))
            session.commit()
        return len(items)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                done = self.run_once()
                failures = 0
            except Exception:
                failures += 1
                if failures == 1:
                    log.warning("embedding notes failed; retrying", exc_info=True)
                done = 0
            if done:
                continue
            wait = self._idle * min(2**failures, 32)  # back off while the model fails
            self._wake.wait(wait)
            self._wake.clear()
