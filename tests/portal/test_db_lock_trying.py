"""SQLite: a background job's writing session tries for the write lock every millisecond
(db/dialect._begin_trying, engine.trying_for_lock) instead of waiting in SQLite's busy
handler, whose growing sleeps missed the gaps between requests' writes (issue 23's burst)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from webagents.portal.db import dialect
from webagents.portal.db.engine import make_engine, make_sessions, trying_for_lock
from webagents.portal.settings import PortalSettings


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = make_engine(PortalSettings(database_url=f"sqlite+pysqlite:///{tmp_path / 'p.db'}"))
    with made.begin() as connection:
        connection.execute(text("CREATE TABLE notes (text TEXT)"))
    yield made
    made.dispose()


def _holder(engine: Engine) -> sqlite3.Connection:
    """Another connection holding the write lock (as a request's transaction does)."""
    holder = sqlite3.connect(
        str(engine.url.database), isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO notes VALUES ('the request')")
    return holder


def test_p5_a_background_writer_takes_the_lock_once_the_holder_commits(engine: Engine) -> None:
    holder = _holder(engine)
    released = threading.Event()

    def commit_later() -> None:
        time.sleep(0.2)
        holder.execute("COMMIT")
        released.set()

    threading.Thread(target=commit_later).start()
    sessions = make_sessions(engine)
    with trying_for_lock(sessions()) as session:
        assert released.is_set()  # it began only after the holder's commit
        session.execute(text("INSERT INTO notes VALUES ('the vectors')"))
        # Its own connection's busy timeout put back for the statements after the begin.
        timeout = session.execute(text("PRAGMA busy_timeout")).scalar_one()
        assert timeout == dialect.SQLITE_BUSY_TIMEOUT_MS
        session.commit()
    holder.close()
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT text FROM notes ORDER BY rowid")).scalars()
        assert list(rows) == ["the request", "the vectors"]


def test_p5_a_background_writer_gives_up_as_the_busy_handler_would(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held past the busy timeout: "database is locked", and the lock's holder unharmed."""
    monkeypatch.setattr(dialect, "SQLITE_BUSY_TIMEOUT_MS", 100)
    holder = _holder(engine)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            with trying_for_lock(make_sessions(engine)()):
                pass
        holder.execute("COMMIT")
    finally:
        holder.close()
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT text FROM notes")).scalars()
        assert list(rows) == ["the request"]
