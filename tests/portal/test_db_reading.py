"""Sessions that only read (db/engine.py's `read_only` and reading sessions, db/dialect.py's
`reading` and `refuse_writes`): on PostgreSQL without BEGIN and COMMIT, giving the pool back
a connection that writers' transactions take as before; on SQLite in a deferred transaction;
on both, a write in one is refused before it is sent, and nothing is written."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from webagents.portal.admin import add_user, open_database
from webagents.portal.db import pgvector
from webagents.portal.db.engine import make_reading_sessions, make_sessions, read_only
from webagents.portal.db.tables import User
from webagents.portal.memory import vector_index
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

from .bulk_notes import bulk_notes
from .conftest import PASSWORD
from .memory_helpers import publish


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    made = open_database(PortalSettings(database_url=fresh_database_url))
    yield made
    made.dispose()


def _in_transaction(session: Session) -> bool:
    """Whether the session's connection is inside a transaction, as its driver sees it."""
    dbapi_connection = session.connection().connection.dbapi_connection
    if hasattr(dbapi_connection, "info"):  # psycopg
        return bool(dbapi_connection.info.transaction_status != TransactionStatus.IDLE)
    return bool(dbapi_connection.in_transaction)  # sqlite3


def test_p_a_reading_session_sends_no_begin_on_postgresql_and_writers_still_begin(
    engine: Engine, database_kind: str
) -> None:
    reading = make_reading_sessions(engine)
    with reading() as db:
        assert db.scalar(text("SELECT 1")) == 1
        # PostgreSQL: autocommit, each statement on its own; SQLite: one deferred snapshot.
        assert _in_transaction(db) == (database_kind == "sqlite")
    with read_only(make_sessions(engine)()) as db:
        assert db.scalar(text("SELECT 2")) == 2
        assert _in_transaction(db) == (database_kind == "sqlite")
    with make_sessions(engine)() as db:  # the same pooled connection, given back as it was
        assert db.scalar(text("SELECT 3")) == 3
        assert _in_transaction(db)
        db.rollback()


def test_p_a_write_in_a_reading_session_is_refused_before_it_is_sent(engine: Engine) -> None:
    add_user(engine, "alice", PASSWORD)
    reading, writing = make_reading_sessions(engine), make_sessions(engine)
    for made in (reading, lambda: read_only(writing())):
        with made() as db, pytest.raises(PermissionError, match="only reads was asked to write"):
            db.execute(text("DELETE FROM users"))
        with made() as db, pytest.raises(PermissionError, match=r"\(UPDATE\)"):
            db.scalars(select(User)).one().username = "mallory"
            db.flush()
    with writing() as db:
        assert db.scalars(select(User.username)).all() == ["alice"]


@pytest.mark.pgvector(only=True)
def test_p_the_vector_index_settings_hold_for_the_search_in_a_reading_session(
    engine: Engine,
) -> None:
    """vector_index's settings (SET, not SET LOCAL: no transaction here) make the planner
    take the HNSW index, which it would not for so few rows, and are undone after it."""
    model, dimensions = "test-random-v1", 8
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((20, dimensions)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with make_sessions(engine)() as db:
        published = publish(db)
        store = MemoryStore.for_agent(db, published.scope)
        bulk_notes(db, store, [("shared", f"n{n}", f"note {n}") for n in range(20)], vectors, model)
        pgvector.ensure_index(db, model, dimensions)
        db.commit()
    with make_reading_sessions(engine)() as db:
        store = MemoryStore.for_agent(db, published.scope)
        defaults = [db.scalar(text(f"SHOW {name}")) for name in ("enable_sort", "hnsw.ef_search")]
        plan = vector_index.plan(store, model, dimensions, None, vectors[0], 5, indexed=True)
        assert pgvector.index_name(model, dimensions) in plan
        assert len(vector_index.by_index(store, model, dimensions, vectors[0], 5)) == 5
        after = [db.scalar(text(f"SHOW {name}")) for name in ("enable_sort", "hnsw.ef_search")]
        assert after == defaults == ["on", "40"]
