"""Where SQLite and PostgreSQL differ, for the repositories: the one module that asks which
database it is talking to (full-text search, whose SQL is all one dialect's or the other's,
keeps its own in memory/search.py).

Each function takes the repository's session (or, for the migrations, a connection) and
either runs the statement in the database's own form or returns the form to run;
`prepare_sqlite` gives a SQLite engine its connection settings and begin mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, LargeBinary, cast, event, func, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute, Session

SQLITE_BUSY_TIMEOUT_MS = 30_000
# The execution option of a session that only reads (engine.read_only): SQLite begins it
# deferred.
READ_ONLY = "webagents_read_only"


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
        reads_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if reads_only else "BEGIN IMMEDIATE")


def is_postgresql(bind: Session | Connection) -> bool:
    """Whether this is PostgreSQL (else SQLite: the portal runs on these two only)."""
    dialect = bind.dialect if isinstance(bind, Connection) else bind.get_bind().dialect
    return dialect.name == "postgresql"


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
