"""Waking the embedding workers of other processes on PostgreSQL (issue 23: a note written in
a `portal serve` is searchable by meaning within 500 ms, its embedding done by a `portal
worker`).

A write that makes notes due (service.put) sends NOTIFY on one queue-wide channel in its own
transaction (`tell`): PostgreSQL delivers it at the commit, so a worker woken reads the
write, and never for a write rolled back; a transaction sends it once, however many notes it
writes. Each process that works the queue on PostgreSQL listens on that channel over a
connection of its own (`Wakes`, a thread: a `portal worker` has no event loop) and wakes its
EmbeddingWorker for each notification. The worker's poll stays, longer, as the fallback: a
notification sent while the listener was reconnecting is lost, so the listener wakes the
worker once each time it listens again, and the poll covers a listener that has not noticed
yet that its connection died.

On SQLite nothing is sent: one process works the queue, its own writes wake it directly
(api.py), and the writes of the others (the `portal serve` processes beside a `portal worker`,
or beside the serve that holds the jobs) are seen by `Watch`: a thread that reads the
database's `PRAGMA data_version` every WATCH_S (a number SQLite changes when another
connection commits; reading it looks at the WAL's shared index: no disk read, no lock) and
wakes the worker when it moved. Any commit moves it, not only those that make notes due: a
wake costs the worker one look at the agents' feed rows, at most one a settle time."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.orm import Session

from ..db import dialect

log = logging.getLogger("webagents.portal.memory")

CHANNEL = "webagents_embedding_queue"
# The listener's connection is named so in pg_stat_activity, for an administrator (and the
# tests, which end it there) to find it.
APPLICATION_NAME = "webagents embedding wakes"
# How long the listener waits for notifications between looks at whether it is stopped: a
# stop takes this long at most.
LISTEN_SLICE_S = 0.5
# A connection that died without a word (a network gone, no reset) delivers nothing and
# raises nothing: a statement this often without notifications finds out.
PING_AFTER_S = 10.0
# Reconnecting: the first retry this soon, each next one twice as late, up to the last.
RETRY_FIRST_S = 0.25
RETRY_LAST_S = 8.0
# How long `start` waits for the first LISTEN, so that writes answered after a worker says
# it is running wake it (a failure is logged and retried in the background instead).
FIRST_LISTEN_S = 10.0

# SQLite: how often `Watch` reads the database's data_version: a note another process writes
# waits this long at most before the worker looks (the worker's own poll was 0.2 s).
WATCH_S = 0.02

_TOLD = "webagents.embedding_queue_told"


def tell(session: Session) -> None:
    """The session's transaction made notes due: wake the queue's workers once it commits
    (PostgreSQL; SQLite: nothing). Sent once a transaction (a savepoint's own, inside one,
    as a savepoint rolled back takes its NOTIFY with it), saving a round trip a put."""
    transaction = session.get_nested_transaction() or session.get_transaction()
    if transaction is not None and session.info.get(_TOLD) is transaction:
        return
    if dialect.notify(session, CHANNEL):
        session.info[_TOLD] = transaction


class Wakes:
    """A thread listening on CHANNEL over a connection of its own (psycopg, autocommit, never
    a pooled one), calling `wake` for each notification and once each time it starts
    listening. When the connection fails (PostgreSQL restarting, the backend ended) it says
    so once in the log, reconnects with a growing pause, and says once when it listens
    again; meanwhile the worker's poll finds the writes."""

    def __init__(self, database_url: str, wake: Callable[[], None]) -> None:
        self._conninfo = dialect.libpq_of(database_url)
        self._wake = wake
        self._stop = threading.Event()
        self._first = threading.Event()  # the first LISTEN done, or failed
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="embedding-wakes", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._first.wait(FIRST_LISTEN_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        pause = RETRY_FIRST_S
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._conninfo, autocommit=True, application_name=APPLICATION_NAME
                ) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                    self._listening()
                    pause = RETRY_FIRST_S
                    self._listen(conn)
            except psycopg.Error as exc:
                self._failed(exc)
                self._stop.wait(pause)
                pause = min(pause * 2, RETRY_LAST_S)

    def _listening(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("embedding queue: listening for writes again")
        self._first.set()
        # Writes committed while this was not listening woke no one: look for them now.
        self._wake()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            for _notice in conn.notifies(timeout=LISTEN_SLICE_S):
                self._wake()
                quiet_since = time.monotonic()
            if time.monotonic() - quiet_since > PING_AFTER_S:
                conn.execute("SELECT 1")
                quiet_since = time.monotonic()

    def _failed(self, exc: psycopg.Error) -> None:
        self._first.set()
        if self._failing:
            return
        self._failing = True
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        log.warning(
            "embedding queue: listening for writes failed (%s); reconnecting, and until then "
            "the worker finds new notes at its next look",
            reason,
        )


class Watch:
    """SQLite: a thread calling `wake` each time another connection (of any process) committed
    to the database at `path`, seen by its data_version read every WATCH_S over a read-only
    connection of its own (see the module's docstring). A failure to read (the file moved, a
    disk error) is said once in the log and retried; meanwhile the worker's poll finds the
    writes."""

    def __init__(self, path: Path, wake: Callable[[], None], *, every: float = WATCH_S) -> None:
        self._path = path
        self._wake = wake
        self._every = every
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="embedding-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        seen: int | None = None
        connection: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(self._every):
                try:
                    if connection is None:
                        connection = self._connect()
                        seen = None  # each connection counts on its own
                    (version,) = connection.execute("PRAGMA data_version").fetchone()
                except sqlite3.Error as exc:
                    if connection is not None:
                        connection.close()
                        connection = None
                    self._failed(exc)
                    continue
                if self._failing:
                    self._failing = False
                    log.warning("embedding queue: watching the database for writes again")
                    self._wake()  # writes committed while this could not see them
                if seen is not None and version != seen:
                    self._wake()
                seen = version
        finally:
            if connection is not None:
                connection.close()

    def _connect(self) -> sqlite3.Connection:
        # mode=ro: this connection never writes, nor creates a missing file.
        uri = f"{self._path.resolve().as_uri()}?mode=ro"
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)

    def _failed(self, exc: sqlite3.Error) -> None:
        if self._failing:
            return
        self._failing = True
        log.warning(
            "embedding queue: watching %s for writes failed (%s); retrying, and until then "
            "the worker finds new notes at its next look",
            self._path,
            exc,
        )
