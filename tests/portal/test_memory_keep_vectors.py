"""P5 the embedding queue's store of a batch of vectors (AcrossAgents.keep_vectors, a few
statements a batch), on SQLite, PostgreSQL and PostgreSQL with pgvector: each vector is kept
as of the cursor its text was read at (a note changed meanwhile stays due), a note forgotten
meanwhile gets none, a vector stored again replaces the old one, and with pgvector the
`embedding` column holds the same vector as the bytes."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from webagents.portal.db.tables import MemoryEntry, MemoryFeed, MemoryVector
from webagents.portal.memory import service
from webagents.portal.memory.across_agents import AcrossAgents
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.scope import SystemScope

from .memory_helpers import SynonymEmbedder, publish

WORKER = SystemScope("test keep vectors")


def _put(store: MemoryStore, key: str, content: str) -> None:
    service.put(store, namespace="owner", key=key, content=content, by=service.BY_AGENT)


def _kept(db: Session) -> dict[str, tuple[int, bool, list[float]]]:
    """Each entry's key: (its vector's cursor, whether that is the entry's own, the vector)."""
    rows = db.execute(
        select(MemoryEntry.key, MemoryVector.entry_cursor, MemoryEntry.cursor, MemoryVector.vector)
        .join(MemoryVector, MemoryVector.entry_id == MemoryEntry.id)
        .where(MemoryVector.model == SynonymEmbedder.name)
    )
    return {
        key: (made, made == now, np.frombuffer(vector, np.float32).tolist())
        for key, made, now, vector in rows
    }


def _version(db: Session, store: MemoryStore) -> int:
    found = db.scalar(
        select(MemoryFeed.vectors_version).where(MemoryFeed.agent_id == store.agent_id)
    )
    assert found is not None
    return int(found)


@pytest.mark.pgvector
def test_p5_keep_vectors_keeps_a_batch_as_read_and_none_for_a_note_forgotten_meanwhile(
    db: Session, database_kind: str
) -> None:
    store = MemoryStore.for_agent(db, publish(db).scope)
    for key, content in (("pets", "a puppy"), ("cars", "a car"), ("trip", "a holiday")):
        _put(store, key, content)
    _put(store, "gone", "cash")
    queue = AcrossAgents(db, WORKER)
    embedder = SynonymEmbedder()
    read = queue.due(embedder.name)
    assert sorted(item.text for item in read) == [
        "cars\n\na car", "gone\n\ncash", "pets\n\na puppy", "trip\n\na holiday",
    ]  # fmt: skip
    cursors = {item.text.split("\n")[0]: item.cursor for item in read}
    vectors = embedder.embed([item.text for item in read])
    # While the model ran: one note changed, one forgotten.
    _put(store, "pets", "a sedan")
    service.delete(store, "owner", "gone", by=service.BY_AGENT)
    before = _version(db, store)

    queue.keep_vectors(embedder.name, list(zip(read, vectors, strict=True)))

    kept = _kept(db)
    assert sorted(kept) == ["cars", "pets", "trip"]  # none for the forgotten note
    assert {key: (made, own) for key, (made, own, _) in kept.items()} == {
        "cars": (cursors["cars"], True),
        "trip": (cursors["trip"], True),
        "pets": (cursors["pets"], False),  # of the text read, not of its change
    }
    assert kept["cars"][2] == pytest.approx(embedder.embed(["cars\n\na car"])[0])
    assert _version(db, store) == before + 1  # search caches reload
    again = queue.due(embedder.name)
    assert [item.text for item in again] == ["pets\n\na sedan"]  # changed: due again

    # Stored again, the vector of the note's change replaces the old one.
    queue.keep_vectors(embedder.name, list(zip(again, embedder.embed(["a sedan"]), strict=True)))
    assert _kept(db)["pets"] == (again[0].cursor, True, embedder.embed(["a sedan"])[0])
    assert queue.due(embedder.name) == []
    if database_kind == "pgvector":  # the database ranks the same vectors
        column = {
            key: [float(x) for x in value.strip("[]").split(",")]
            for key, value in db.execute(
                text(
                    "SELECT e.key, v.embedding::text FROM memory_vectors v "
                    "JOIN memory_entries e ON e.id = v.entry_id"
                )
            )
        }
        assert sorted(column) == ["cars", "pets", "trip"]
        for key, (_, _, vector) in _kept(db).items():
            assert column[key] == pytest.approx(vector)


@pytest.mark.pgvector
def test_p5_keep_vectors_of_an_empty_batch_or_one_naming_a_note_twice(db: Session) -> None:
    """Nothing to keep changes nothing (not even the version); a note twice in one batch
    keeps its last vector (one statement cannot write a row twice on PostgreSQL)."""
    store = MemoryStore.for_agent(db, publish(db).scope)
    _put(store, "pets", "a puppy")
    queue = AcrossAgents(db, WORKER)
    embedder = SynonymEmbedder()
    before = _version(db, store)
    queue.keep_vectors(embedder.name, [])
    assert _version(db, store) == before
    [item] = queue.due(embedder.name)
    first, last = embedder.embed(["a car", "a puppy"])
    queue.keep_vectors(embedder.name, [(item, first), (item, last)])
    assert _kept(db) == {"pets": (item.cursor, True, last)}
