"""Engines and their sessions.

SQLite gets the same transaction semantics as PostgreSQL here: Python's sqlite3 begins
transactions on its own (and not before DDL or SAVEPOINT), so the engine turns that off and
emits BEGIN itself, as SQLAlchemy documents. It emits BEGIN IMMEDIATE: a deferred transaction
that reads, then writes after another process wrote, fails at once with "database is locked"
(busy_timeout cannot help it), while an immediate one waits its turn. A session that only
reads may say so (`read_only(session)`): it begins a deferred transaction, which in WAL mode
reads a snapshot without taking the write lock, so it never waits for writers or holds them.
Foreign keys are switched on, and the WAL journal lets readers outside transactions work
beside the writer. On PostgreSQL a session that only reads runs in autocommit, without BEGIN
and COMMIT, and tested idle connections stand in for a ping of every checkout (dialect.py:
`reading`, `prepare_postgresql`); a session that only reads never writes (`refuse_writes`).

The pool holds a connection for every slot of the database gate (gate.py), so no request
waits for one (requests.py: a request's session); the few beyond them are for what works
outside requests (the embedding worker, retention, Portal Connect's directory).
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from ..settings import PortalSettings
from . import dialect

# Connections beyond the gate's slots, for the database work done outside requests.
POOL_RESERVE = 8
# How long that work waits for a connection before it fails (a request never waits: see
# above); a failure here is a 503 too, never a wait of half a minute.
POOL_TIMEOUT_SECONDS = 5.0


def make_engine(settings: PortalSettings) -> Engine:
    pool = {
        "pool_size": settings.db_gate.slots,
        "max_overflow": POOL_RESERVE,
        "pool_timeout": POOL_TIMEOUT_SECONDS,
    }
    if settings.is_sqlite:
        engine = create_engine(
            settings.database_url, connect_args={"check_same_thread": False}, **pool
        )
        dialect.prepare_sqlite(engine)
    else:
        # Last in, first out: under a light load the connection given back last is taken
        # again, recently used and so not tested (dialect.prepare_postgresql), the others idle.
        engine = create_engine(settings.database_url, pool_use_lifo=True, **pool)
        dialect.prepare_postgresql(engine)
    dialect.refuse_writes(engine)
    return engine


def read_only(session: Session) -> Session:
    """Mark a session that has not begun as one that only reads (see above): a write in it
    raises."""
    session.connection(execution_options=dialect.reading(session.get_bind().engine))
    return session


def trying_for_lock(session: Session) -> Session:
    """Mark a session that has not begun as a background job's writer: on SQLite its BEGIN
    IMMEDIATE tries for the write lock every millisecond instead of waiting in SQLite's busy
    handler (dialect._begin_trying says why); on PostgreSQL nothing changes."""
    session.connection(execution_options={dialect.TRY_FOR_LOCK: True})
    return session


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit off: a page may still render what it just saved after the commit.
    return sessionmaker(engine, expire_on_commit=False)


def make_reading_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions that only read, as `read_only` makes them, but marked through their engine
    (the same pool), so that making one takes no connection: it is taken at the first query,
    in the worker thread that asks it, not in the event loop."""
    return sessionmaker(engine.execution_options(**dialect.reading(engine)), expire_on_commit=False)
