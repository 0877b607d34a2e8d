"""A request's session, as FastAPI dependencies: one transaction per request, committed on
success (engine.py makes the engines and their sessions).

A request's session is opened only once the request holds a slot of the database gate
(gate.py), for which the engine's pool holds a connection, so no request waits for one. A
database that fails is reported by outage.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from .gate import DatabaseGate
from .outage import Outage


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
