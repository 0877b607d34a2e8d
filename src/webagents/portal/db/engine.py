"""Engines and the request's session: one transaction per request, committed on success.

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

A request's session is opened only once the request holds a slot of the database gate
(gate.py), and the pool holds a connection for every slot, so no request waits for one; the
few beyond them are for what works outside requests (the embedding worker, retention,
Portal Connect's directory). A database that fails is reported by outage.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import Depends, Request
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from ..settings import PortalSettings
from . import dialect
from .gate import DatabaseGate
from .outage import Outage

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


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit off: a page may still render what it just saved after the commit.
    return sessionmaker(engine, expire_on_commit=False)


def make_reading_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions that only read, as `read_only` makes them, but marked through their engine
    (the same pool), so that making one takes no connection: it is taken at the first query,
    in the worker thread that asks it, not in the event loop."""
    return sessionmaker(engine.execution_options(**dialect.reading(engine)), expire_on_commit=False)


async def _writing_slot(request: Request) -> AsyncIterator[None]:
    gate: DatabaseGate = request.app.state.gate
    async with gate.enter(writes=True):
        yield


async def _reading_slot(request: Request) -> AsyncIterator[None]:
    gate: DatabaseGate = request.app.state.gate
    async with gate.enter(writes=False):
        yield


async def request_session(
    request: Request, _slot: Annotated[None, Depends(_writing_slot, scope="function")]
) -> AsyncIterator[Session]:
    """The request's one transaction: committed when the endpoint returns, rolled back when
    it raises (a refusal included). Services flush, never commit.

    Use as `Db` (below: `Depends(request_session, scope="function")`), so the commit happens
    before the answer is sent: a client never sees a success that was not kept."""
    async with _transaction(request, request.app.state.sessions) as session:
        yield session


async def read_request_session(
    request: Request, _slot: Annotated[None, Depends(_reading_slot, scope="function")]
) -> AsyncIterator[Session]:
    """The request's session for an endpoint that only reads: `read_only`, so on SQLite it
    reads a snapshot beside writers instead of queueing for the write lock behind them (and
    holding it from them), and on PostgreSQL it sends its statements without BEGIN and
    COMMIT. Writes keep `request_session`'s transaction (SQLite's BEGIN IMMEDIATE).

    Use as `ReadDb` (below: `Depends(read_request_session, scope="function")`), and verify
    the caller through it too (a second session would be a second connection)."""
    async with _transaction(request, request.app.state.reading_sessions) as session:
        yield session


# An endpoint's session: `db: Db` (a write's), `db: ReadDb` (an endpoint that only reads,
# its caller verified in the same read-only transaction).
Db = Annotated[Session, Depends(request_session, scope="function")]
ReadDb = Annotated[Session, Depends(read_request_session, scope="function")]


@asynccontextmanager
async def _transaction(request: Request, sessions: sessionmaker[Session]) -> AsyncIterator[Session]:
    """A session for the request, ended after it: committed, or rolled back when the request
    raised. Async, not a sync generator: FastAPI runs a sync one's start and its end each in
    a worker thread, two of the few thread hops a request costs the event loop (with its
    verification and its endpoint), and under many clients those hops were a fifth of the
    loop's time. Making a session asks the database nothing, so it is made here; its end, if
    the request used the database, is one hop."""
    session = sessions()
    try:
        yield session
    except BaseException:
        await _end(session, commit=False)
        raise
    if await _end(session, commit=True):
        outage: Outage = request.app.state.outage
        outage.ended()


async def _end(session: Session, *, commit: bool) -> bool:
    """Commit (or roll back) and close the session; whether the database was asked anything.
    Shielded: a request cancelled meanwhile still gives its connection back."""
    if not session.in_transaction():  # nothing asked, or already rolled back: no I/O left
        session.close()
        return False
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(_ended, session, commit)
    return True


def _ended(session: Session, commit: bool) -> None:
    with session:
        if commit:
            session.commit()
        else:
            session.rollback()
