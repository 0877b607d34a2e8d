"""Notes with their vectors written in bulk, for the pgvector recall test and the benchmark."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from webagents.portal.db import pgvector
from webagents.portal.db.tables import MemoryEntry, MemoryVector
from webagents.portal.memory.repository import MemoryStore


def bulk_notes(
    db: Session,
    store: MemoryStore,
    notes: Sequence[tuple[str, str, str]],
    vectors: npt.NDArray[np.float32],
    model: str,
) -> list[uuid.UUID]:
    """Notes (namespace, key, content) with their vectors of `model`, written in bulk in one
    change of the feed, the vectors into both columns (as the queue's keep_vectors ends):
    thousands of puts and embeddings one by one take minutes (for the recall test and the
    benchmark). Their ids, in order."""
    now = datetime.now(UTC)
    cursor = store.next_cursor()
    entries = [
        MemoryEntry(
            id=uuid.uuid4(),
            agent_id=store.agent_id,
            namespace=namespace,
            key=key,
            description="",
            content=content,
            content_sha256="0" * 64,
            source="bulk",
            created_at=now,
            updated_at=now,
            cursor=cursor,
        )
        for namespace, key, content in notes
    ]
    db.add_all(entries)
    store.count(len(entries), sum(len(content.encode()) for _, _, content in notes))
    db.flush()
    db.add_all(
        MemoryVector(
            entry_id=entry.id,
            agent_id=store.agent_id,
            model=model,
            entry_cursor=cursor,
            vector=vector.tobytes(),
        )
        for entry, vector in zip(entries, vectors, strict=True)
    )
    db.flush()
    pgvector.keep(db, model, [(e.id, v.tolist()) for e, v in zip(entries, vectors, strict=True)])
    return [entry.id for entry in entries]
