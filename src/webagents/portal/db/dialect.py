"""Where SQLite and PostgreSQL differ, for the repositories: the one module that asks which
database it is talking to (full-text search, whose SQL is all one dialect's or the other's,
keeps its own in memory/search.py).

Each function takes the repository's session (or, for the migrations, a connection) and
either runs the statement in the database's own form or returns the form to run;
`prepare_sqlite` gives a SQLite engine its connection settings and begin mode,
`prepare_postgresql` a PostgreSQL engine its test of idle connections, `reading` the options
of a session that only reads, `refuse_writes` keeps such a session from writing, and
`notify` sends a PostgreSQL notification at the transaction's commit (and `libpq_of` gives the
URL for a connection of psycopg's own that listens).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    LargeBinary,
    cast,
    event,
    exc,
    func,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import InstrumentedAttribute, Session

SQLITE_BUSY_TIMEOUT_MS = 30_000
# The execution option of a session that writes outside the requests (the embedding worker's
# vectors): on SQLite its BEGIN IMMEDIATE tries for the lock this often (`_begin_trying`).
TRY_FOR_LOCK = "webagents_try_for_lock"
LOCK_TRY_S = 0.001
# The execution option of a session that only reads (engine.read_only): SQLite begins it
# deferred, PostgreSQL runs it without a transaction (`reading`).
READ_ONLY = "webagents_read_only"
# What a session that only reads may send (`refuse_writes`): SQLite's BEGIN is its
# deferred one, SET the vector search's settings (memory/vector_index.py).
_READS = ("SELECT", "WITH", "EXPLAIN", "SHOW", "SET", "BEGIN")
# A pooled PostgreSQL connection given back longer ago than this is tested before use
# (`prepare_postgresql`); one given back since is used as it is. HikariCP's default
# (aliveBypassWindowMs): under load a connection is back in use within milliseconds.
PING_AFTER_IDLE_SECONDS = 0.5
_GIVEN_BACK = "webagents_given_back"


def prepare_sqlite(engine: Engine) -> None:
    """SQLite's settings on each new connection, and its begin mode: BEGIN IMMEDIATE, or
    BEGIN for a session that only reads (engine.py says why)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        # FULL, not NORMAL: with WAL, NORMAL syncs only at checkpoints, so a power loss may
        # undo the last commits (never corrupt). An answered write must outlive that: the
        # agent's outbox drops a note once the portal answered, and a change feed that lost
        # its last cursors would give them again to other changes, which agents that had
        # pulled them would then never pull. (Measured: a put's commit here is about 2 ms
        # with NORMAL and 7 ms with FULL, the one fsync per commit; docs/portal.md.)
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        options = connection.get_execution_options()
        if options.get(READ_ONLY, False):
            connection.exec_driver_sql("BEGIN")
        elif options.get(TRY_FOR_LOCK, False):
            _begin_trying(connection.connection.driver_connection)
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


def _begin_trying(raw: Any) -> None:
    """BEGIN IMMEDIATE tried every LOCK_TRY_S while another connection holds the write lock,
    for up to SQLITE_BUSY_TIMEOUT_MS (then "database is locked", as the busy handler would),
    instead of SQLite's busy handler: that sleeps 1, 2, 5 ... then 100 ms between its tries,
    and behind a stream of requests, each writing a few ms with a gap of about one between
    them, it misses the gaps: the embedding worker's vectors waited 64-343 ms so, and a
    `portal worker`'s up to 780 ms (bench/README.md). A try that fails costs microseconds."""
    raw.execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
            time.sleep(LOCK_TRY_S)
    finally:
        raw.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


def prepare_postgresql(engine: Engine) -> None:
    """A PostgreSQL pool's connection tested (one empty statement) before use when it was
    idle more than PING_AFTER_IDLE_SECONDS: a dead one (the server restarted, the
    connection ended by an administrator or an idle timeout) is replaced, and the pool's
    others with it, as pool_pre_ping does on every checkout, which was a round trip of every
    request. One that dies in use, or within that time of its last use, fails its request
    (a 503: outage.py), and the pool replaces all of its connections then."""

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_GIVEN_BACK] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        given_back = record.info.get(_GIVEN_BACK)  # None: a new connection
        if given_back is None or time.monotonic() - given_back < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            raise exc.InvalidatePoolError() from error  # the pool connects anew


def reading(engine: Engine) -> dict[str, object]:
    """The execution options of a session that only reads. On PostgreSQL its connection is
    in autocommit, so it sends its statements only, no BEGIN nor COMMIT (each a round trip);
    each statement reads what is committed when it starts, as each did in the READ COMMITTED
    transaction. SQLite keeps its deferred transaction: one snapshot for all its reads."""
    if engine.dialect.name == "postgresql":
        return {READ_ONLY: True, "isolation_level": "AUTOCOMMIT"}
    return {READ_ONLY: True}


def refuse_writes(engine: Engine) -> None:
    """A statement other than a read in a session that only reads raises before it is sent:
    on PostgreSQL it would be kept at once (autocommit: even were the request to fail), on
    SQLite it would take the write lock that the deferred transaction is there to avoid."""

    @event.listens_for(engine, "before_cursor_execute")
    def _refuse(connection: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if connection.get_execution_options().get(READ_ONLY) and not (
            statement.lstrip().upper().startswith(_READS)
        ):
            raise PermissionError(
                f"a session that only reads was asked to write ({statement.split()[0]}): "
                "use the writing session (requests.Db)"
            )


def is_postgresql(bind: Session | Connection) -> bool:
    """Whether this is PostgreSQL (else SQLite: the portal runs on these two only)."""
    dialect = bind.dialect if isinstance(bind, Connection) else bind.get_bind().dialect
    return dialect.name == "postgresql"


def libpq_of(database_url: str) -> str:
    """The portal's PostgreSQL URL as psycopg's own connection string (for a connection kept
    out of the pool: a listener's)."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def notify(session: Session, channel: str) -> bool:
    """PostgreSQL: NOTIFY `channel` (an empty payload) in the session's transaction, which
    the server delivers to its listeners only if the transaction commits, and once however
    many times the transaction sent it. SQLite: nothing (no other process listens); False."""
    if not is_postgresql(session):
        return False
    session.execute(select(func.pg_notify(channel, "")))
    return True


def octet_length(
    session: Session, text_column: ColumnElement[str] | InstrumentedAttribute[str]
) -> ColumnElement[int]:
    """The bytes of a text column's UTF-8 form (SQLite's length() counts characters of text,
    bytes of a blob)."""
    if is_postgresql(session):
        return func.octet_length(text_column)
    return func.length(cast(text_column, LargeBinary))


def _insert(session: Session, table: type[Any]) -> Any:
    return postgresql.insert(table) if is_postgresql(session) else sqlite.insert(table)


def insert_new(session: Session, table: type[Any], values: Mapping[str, object]) -> None:
    """Insert the row unless one with its key is there already (two racing makers: one
    makes it, the other finds it made)."""
    session.execute(_insert(session, table).values(dict(values)).on_conflict_do_nothing())


def upsert(
    session: Session,
    table: type[Any],
    key: InstrumentedAttribute[Any],
    values: Mapping[str, object],
) -> None:
    """Insert the row, or where one with the same `key` is there, set its other values."""
    statement = _insert(session, table).values(dict(values))
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[key], set_={k: v for k, v in values.items() if k != key.key}
        )
    )


def upsert_many(
    session: Session,
    table: type[Any],
    key: InstrumentedAttribute[Any],
    rows: Sequence[Mapping[str, object]],
) -> None:
    """`upsert` of many rows (of the same columns, distinct keys) in one statement."""
    statement = _insert(session, table).values([dict(row) for row in rows])
    columns = [name for name in rows[0] if name != key.key]
    session.execute(
        statement.on_conflict_do_update(
            index_elements=[key], set_={name: statement.excluded[name] for name in columns}
        )
    )


def _lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big", signed=True)


def hold_lock(session: Session, space: int, name: str) -> None:
    """A transaction-scoped PostgreSQL advisory lock on `name` in `space` (two-key form,
    apart from the migration's one-key lock); SQLite needs nothing, as its writing
    transactions (BEGIN IMMEDIATE) already take turns."""
    if not is_postgresql(session):
        return
    session.execute(
        text("SELECT pg_advisory_xact_lock(:space, :key)"),
        {"space": space, "key": _lock_key(name)},
    )


def try_hold_lock(session: Session, space: int, name: str) -> bool:
    """`hold_lock` without waiting: whether this transaction holds the lock now (False: another
    does). Two names may share a key (32 bits of a hash): a false "held" is a wait, never a
    second holder. SQLite: always True (one worker; see the caller)."""
    if not is_postgresql(session):
        return True
    held = session.scalar(
        text("SELECT pg_try_advisory_xact_lock(:space, :key)"),
        {"space": space, "key": _lock_key(name)},
    )
    return bool(held)


def narrows_little(session: Session, term: ColumnElement[bool]) -> ColumnElement[bool]:
    """`term`, marked for SQLite's planner as one that narrows the rows little, so that it
    prefers a primary-key lookup to an index on `term`'s column. Without statistics, SQLite
    would take the agent's own index (every note of the agent, read to the end) over one
    lookup an id (at 100k notes, 23 ms to 0.2 ms). The term still filters every row;
    PostgreSQL's planner has its statistics and needs no hint."""
    return term if is_postgresql(session) else func.likely(term)
