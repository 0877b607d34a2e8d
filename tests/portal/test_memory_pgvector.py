"""P5 search's vectors ranked by PostgreSQL with pgvector (memory/vector_index.py): the same
answers as the per-process cache, nothing kept in the portal process, and recall checked
against exact ranking on generated vectors, for the exact search inside the filter and for
the HNSW index's iterative scan."""

from __future__ import annotations

import numpy as np
import pytest
from alembic import command
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from webagents.portal import admin
from webagents.portal.db import pgvector
from webagents.portal.db.engine import make_engine, make_sessions
from webagents.portal.db.migrate import alembic_config, upgrade
from webagents.portal.memory import search as searching
from webagents.portal.memory import service, vector_cache, vector_index
from webagents.portal.memory.embedding_queue import embed_due
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.scope import SystemScope
from webagents.portal.settings import PortalSettings

from .bulk_notes import bulk_notes
from .memory_helpers import SynonymEmbedder, publish, publish_for

BOB = ["caller:bob", "shared"]


def _put(store: MemoryStore, namespace: str, key: str, content: str) -> None:
    service.put(store, namespace=namespace, key=key, content=content, by=service.BY_AGENT)


def _found(
    store: MemoryStore, embedder: SynonymEmbedder, query: str, namespaces: list[str] | None
) -> list[tuple[str, str, list[str]]]:
    answer = searching.search(store, query, namespaces, embedder=embedder)
    assert answer.semantic == "on"
    return [(e.namespace, e.key, list(e.matched)) for e in answer.entries]


@pytest.mark.pgvector
def test_p5_search_ranks_vectors_in_the_database_only_where_pgvector_is(
    db: Session, database_kind: str
) -> None:
    """On SQLite and PostgreSQL without the extension nothing changes (the cache ranks);
    with it, the column is there and the store says the database ranks."""
    store = MemoryStore.for_agent(db, publish(db).scope)
    assert store.ranks_vectors == (database_kind == "pgvector")
    columns = db.execute(
        text(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = "
            "'memory_vectors' AND column_name = 'embedding'"
        )
        if database_kind != "sqlite"
        else text(
            "SELECT count(*) FROM pragma_table_info('memory_vectors') WHERE name = 'embedding'"
        )
    ).scalar()
    assert columns == (1 if database_kind == "pgvector" else 0)


@pytest.mark.pgvector(only=True)
def test_p5_pgvector_search_finds_what_the_cache_finds_and_keeps_nothing_in_the_process(
    db: Session,
) -> None:
    """The scenario of test_memory_vector_cache on pgvector: new, changed, forgotten and
    not yet embedded notes, another agent's notes never found; no vectors kept here."""
    agent = publish(db)
    store = MemoryStore.for_agent(db, agent.scope)
    other = MemoryStore.for_agent(db, publish_for(db, agent.owner, "other").scope)
    embedder = SynonymEmbedder()
    vector_cache.clear()
    _put(store, "caller:bob", "pets", "a puppy")
    _put(store, "caller:bob", "cars", "a car")
    _put(store, "shared", "trip", "a holiday")
    _put(store, "caller:eve", "eves", "a hound")
    _put(other, "caller:bob", "others", "a puppy")  # the same meaning, another agent
    embed_due(db, embedder)

    def searches() -> list[list[tuple[str, str, list[str]]]]:
        return [
            _found(store, embedder, "dog", BOB),
            _found(store, embedder, "vehicle", BOB),
            _found(store, embedder, "money", BOB),
            _found(store, embedder, "dog", None),
        ]

    assert searches() == [
        [("caller:bob", "pets", ["meaning"])],
        [("caller:bob", "cars", ["meaning"])],
        [],
        [("caller:bob", "pets", ["meaning"]), ("caller:eve", "eves", ["meaning"])],
    ]
    _put(store, "shared", "budget", "cash")  # new
    _put(store, "caller:bob", "pets", "a sedan")  # changed meaning
    service.delete(store, "caller:bob", "cars", by=service.BY_AGENT)  # forgotten
    _put(store, "caller:zed", "zeds", "a puppy")
    _put(store, "caller:zed", "late", "a hound")  # not embedded yet: not found by meaning
    # Before the worker's round: the changed note's old vector no longer counts.
    assert _found(store, embedder, "dog", BOB) == []
    embed_due(db, embedder, limit=3)  # all but the last note
    assert searches() == [
        [],
        [("caller:bob", "pets", ["meaning"])],
        [("shared", "budget", ["meaning"])],
        [("caller:eve", "eves", ["meaning"]), ("caller:zed", "zeds", ["meaning"])],
    ]
    assert vector_cache.cached() == {}


NOTES, NAMESPACES, QUERIES, DIMENSIONS = 3000, 20, 50, 128


def _recall(found: list[list[int]], exact: list[list[int]]) -> float:
    return sum(len(set(f) & set(e)) for f, e in zip(found, exact, strict=True)) / sum(
        len(e) for e in exact
    )


@pytest.mark.pgvector(only=True)
def test_p5_pgvector_recall_at_10_matches_exact_ranking_on_random_vectors(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 random unit vectors over 20 namespaces, 50 random queries: the exact search in
    the filter returns exact's ten, all from the asked namespaces; the HNSW index's
    iterative scan (forced: EXACT_UP_TO 0) returns ten of the agent's, at recall@10 >= 0.98
    of exact's, though another agent's copies of its vectors are in the same graph."""
    rng = np.random.default_rng(23)
    vectors = rng.standard_normal((NOTES, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((QUERIES, DIMENSIONS)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    namespace_of = [f"caller:c{i % NAMESPACES}" for i in range(NOTES)]
    published = publish(db)
    store = MemoryStore.for_agent(db, published.scope)
    model = "test-random-v1"
    notes = [(namespace, f"n{n}", f"note {n}") for n, namespace in enumerate(namespace_of)]
    ids = {ident: n for n, ident in enumerate(bulk_notes(db, store, notes, vectors, model))}
    # Another agent with copies of a third of the vectors: in the index's graph, and the
    # nearest to a query as often as the agent's own, never in the results.
    other = MemoryStore.for_agent(db, publish_for(db, published.owner, "other").scope)
    bulk_notes(db, other, notes[: NOTES // 3], vectors[: NOTES // 3], model)
    db.execute(text("ANALYZE memory_entries, memory_vectors"))  # as autovacuum would

    def exact(query: np.ndarray, wanted: set[str] | None) -> list[int]:  # type: ignore[type-arg]
        scores = vectors @ query
        order = [int(n) for n in np.argsort(-scores)]
        return [n for n in order if wanted is None or namespace_of[n] in wanted][:10]

    def ranked(query: np.ndarray, wanted: list[str] | None) -> list[int]:  # type: ignore[type-arg]
        found = vector_cache.best(store, model, DIMENSIONS, wanted, query, 10)
        return [ids[ident] for _, ident in found]

    asked = [
        [f"caller:c{q % NAMESPACES}", f"caller:c{(q + 7) % NAMESPACES}"] for q in range(QUERIES)
    ]
    for indexed in (False, True):
        monkeypatch.setattr(vector_index, "EXACT_UP_TO", 0 if indexed else NOTES)
        within = [ranked(q, a) for q, a in zip(queries, asked, strict=True)]
        everywhere = [ranked(q, None) for q in queries]
        truth_within = [exact(q, set(a)) for q, a in zip(queries, asked, strict=True)]
        truth_everywhere = [exact(q, None) for q in queries]
        # Namespaces asked: always the exact search, so exactly its ten, all from them.
        assert within == truth_within
        assert [len(found) for found in everywhere] == [10] * QUERIES
        if indexed:
            assert _recall(everywhere, truth_everywhere) >= 0.98
        else:
            assert everywhere == truth_everywhere
    query = queries[0]
    assert pgvector.index_name(model, DIMENSIONS) in vector_index.plan(
        store, model, DIMENSIONS, None, query, 10, indexed=True
    )
    assert "hnsw" not in vector_index.plan(
        store, model, DIMENSIONS, asked[0], query, 10, indexed=False
    )


@pytest.mark.pgvector(only=True)
def test_p5_migration_0014_copies_stored_vectors_into_pgvector_and_its_downgrade_drops_them(
    empty_database_url: str,
) -> None:
    """A portal that kept vectors before pgvector (at 0013) finds them ranked by the
    database after 0014: the column filled from the bytes, the model's index made; the
    downgrade leaves the bytes as they were and search back in the process."""
    engine = make_engine(PortalSettings(database_url=empty_database_url))
    embedder = SynonymEmbedder()
    try:
        with engine.connect() as connection:
            command.upgrade(alembic_config(connection), "0013")
            connection.commit()
        with make_sessions(engine)() as db:
            store = MemoryStore.for_agent(db, publish(db).scope)
            _put(store, "caller:bob", "pets", "a puppy")
            _put(store, "caller:bob", "cars", "a car")
            embed_due(db, embedder)
            agent = store.agent_id
            db.commit()
        upgrade(engine)
        with admin.transaction(engine) as db:
            copied = db.execute(
                text("SELECT count(*) FROM memory_vectors WHERE embedding IS NOT NULL")
            ).scalar()
            indexes = db.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_vectors'")
            ).scalars()
            assert (copied, pgvector.index_name(embedder.name, embedder.dimensions) in indexes) == (
                2,
                True,
            )
            store = MemoryStore.for_system(db, SystemScope("test"), agent)
            assert store is not None and store.ranks_vectors
            vector_cache.clear()
            assert _found(store, embedder, "dog", BOB) == [("caller:bob", "pets", ["meaning"])]
            assert vector_cache.cached() == {}
        with engine.connect() as connection:
            command.downgrade(alembic_config(connection), "0013")
            connection.commit()
        with admin.transaction(engine) as db:
            store = MemoryStore.for_system(db, SystemScope("test"), agent)
            assert store is not None and not store.ranks_vectors
            assert _found(store, embedder, "dog", BOB) == [("caller:bob", "pets", ["meaning"])]
    finally:
        engine.dispose()


def _an_older_index(
    engine: Engine, embedder: SynonymEmbedder, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str, str]:
    """A store whose model's HNSW index was built with other parameters (pgvector's defaults,
    as 0014 built it), beside another model's: (the current name, the older, the other's)."""
    upgrade(engine)
    with make_sessions(engine)() as db:
        store = MemoryStore.for_agent(db, publish(db).scope)
        _put(store, "caller:bob", "pets", "a puppy")
        embed_due(db, embedder)
        db.commit()
    current = pgvector.index_name(embedder.name, embedder.dimensions)
    monkeypatch.setattr(pgvector, "HNSW_M", 16)
    monkeypatch.setattr(pgvector, "HNSW_EF_CONSTRUCTION", 64)
    older = pgvector.index_name(embedder.name, embedder.dimensions)
    other = pgvector.index_name("another-model", embedder.dimensions)
    with engine.begin() as connection:
        connection.execute(text(f"DROP INDEX {current}"))
        for name in (older, other):
            connection.execute(
                text(
                    f"CREATE INDEX {name} ON memory_vectors USING hnsw "
                    f"((embedding::vector({embedder.dimensions})) vector_cosine_ops) "
                    "WITH (m = 16, ef_construction = 64)"
                )
            )
    monkeypatch.undo()
    pgvector._indexed.clear()  # a new process: it knows no index made
    assert current != older
    return current, older, other


def _indexes(engine: Engine) -> set[str]:
    """The indexes of memory_vectors after a start's `upgrade` (at head: pgvector's part)."""
    upgrade(engine)
    with engine.begin() as connection:
        return set(
            connection.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_vectors'")
            ).scalars()
        )


@pytest.mark.pgvector(only=True)
def test_p5_pgvector_index_built_with_other_parameters_is_rebuilt_at_start(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older index is replaced by one of the current parameters when the portal starts
    (pgvector.enable), built first and then the older dropped; another model's is left."""
    engine = make_engine(PortalSettings(database_url=fresh_database_url))
    try:
        current, older, other = _an_older_index(engine, SynonymEmbedder(), monkeypatch)
        indexes = _indexes(engine)
        assert (current in indexes, older in indexes, other in indexes) == (True, False, True)
    finally:
        engine.dispose()


@pytest.mark.pgvector(only=True)
def test_p5_pgvector_a_large_index_is_left_to_the_operator_with_the_statements_to_run(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past BUILD_AT_START_UP_TO vectors the start builds nothing (minutes, the table's
    writes waiting): the older index keeps serving, the log says what to run beside the
    portal, and the embedding worker's next batch does not build it either."""
    engine = make_engine(PortalSettings(database_url=fresh_database_url))
    embedder = SynonymEmbedder()
    try:
        current, older, other = _an_older_index(engine, embedder, monkeypatch)
        monkeypatch.setattr(pgvector, "BUILD_AT_START_UP_TO", 0)
        with caplog.at_level("WARNING", logger="webagents.portal"):
            indexes = _indexes(engine)
        assert (current in indexes, older in indexes, other in indexes) == (False, True, True)
        (said,) = [r.getMessage() for r in caplog.records if "not built at start" in r.getMessage()]
        assert f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {current} ON memory_vectors" in said
        assert f'DROP INDEX CONCURRENTLY "{older}"' in said
        assert "maintenance_work_mem" in said
        with make_sessions(engine)() as db:
            store = MemoryStore.for_agent(db, publish(db, "carol", "other").scope)
            _put(store, "owner", "cars", "a red car")
            embed_due(db, embedder)
            db.commit()
        assert current not in _indexes(engine)
    finally:
        engine.dispose()
