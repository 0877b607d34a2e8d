"""A `portal worker` woken by the serving processes' writes (issue 23: a note searchable within
500 ms through `portal worker`): on PostgreSQL a write that makes notes due sends one NOTIFY at
its commit (memory/wakes.py), which the worker listens for, and listens for again after its
connection is ended; on SQLite nothing is sent, and the worker watches the database's
data_version instead (wakes.Watch). The e2e tests give the worker a poll of an hour, so that a
note embedded can only have woken it."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from webagents.portal.admin import open_database
from webagents.portal.db.dialect import libpq_of
from webagents.portal.db.engine import make_sessions
from webagents.portal.memory import service, wakes
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.schemas import SyncLineIn
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, publish
from .processes import Child, Served
from .worker_helpers import MODEL, URL, Endpoint, make_agent, start_worker, until

AN_HOUR = "3600"


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    made = open_database(PortalSettings(database_url=fresh_database_url))
    yield made
    made.dispose()


def _published(sessions: sessionmaker[Session]) -> Published:
    with sessions() as session:
        return publish(session)  # it commits


def _put(session: Session, agent: Published, key: str, content: str) -> None:
    store = MemoryStore.for_agent(session, agent.scope)
    service.put(store, namespace="owner", key=key, content=content, by=service.BY_AGENT)


def _heard(listener: psycopg.Connection[Any]) -> int:
    """The notifications on the queue's channel delivered to `listener` so far."""
    return sum(1 for _ in listener.notifies(timeout=0.5))


def test_p5_a_write_notifies_the_embedding_queue_once_a_transaction_at_its_commit(
    engine: Engine, fresh_database_url: str
) -> None:
    """PostgreSQL: a transaction of three puts is one notification, delivered at its commit;
    a rolled-back put and a put that changes nothing are none."""
    if not fresh_database_url.startswith("postgresql"):
        pytest.skip("the wake is PostgreSQL's NOTIFY (SQLite: see the next test)")
    sessions = make_sessions(engine)
    agent = _published(sessions)
    with psycopg.connect(libpq_of(fresh_database_url), autocommit=True) as listener:
        listener.execute(f"LISTEN {wakes.CHANNEL}")
        with sessions() as session:
            lines = [SyncLineIn(op="put", key=f"k{n}", content=f"note {n}") for n in range(3)]
            service.apply_lines(MemoryStore.for_agent(session, agent.scope), "owner", lines)
            assert _heard(listener) == 0  # not before the commit
            session.commit()
        assert _heard(listener) == 1
        with sessions() as session:
            _put(session, agent, "k9", "rolled back")
            session.rollback()
        assert _heard(listener) == 0
        with sessions() as session:
            _put(session, agent, "k0", "note 0")  # as it is: no change, nothing due
            session.commit()
        assert _heard(listener) == 0
        with sessions() as session:
            _put(session, agent, "k0", "note 0, changed")
            session.commit()
        assert _heard(listener) == 1


def test_p5_on_sqlite_a_write_sends_no_notification(
    engine: Engine, fresh_database_url: str
) -> None:
    if not fresh_database_url.startswith("sqlite"):
        pytest.skip("SQLite's case (PostgreSQL: the test above)")
    sessions = make_sessions(engine)
    agent = _published(sessions)
    sent: list[str] = []

    def keep(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", keep)
    try:
        with sessions() as session:
            _put(session, agent, "k1", "a note")
            session.commit()
    finally:
        event.remove(engine, "before_cursor_execute", keep)
    assert any(s.lstrip().upper().startswith("INSERT") for s in sent), sent  # it wrote
    assert not [s for s in sent if "notify" in s.lower()], sent


def _watching(path: Path) -> tuple[wakes.Watch, list[float]]:
    """A Watch of the database at `path`, started, and the moments it woke."""
    woken: list[float] = []
    watch = wakes.Watch(path, lambda: woken.append(time.monotonic()), every=0.005)
    watch.start()
    return watch, woken


def test_p5_on_sqlite_a_commit_of_another_connection_wakes_the_watch(tmp_path: Path) -> None:
    """wakes.Watch: another connection's commit wakes it (a few times in a row, each seen); a
    read, and no change at all, do not."""
    path = tmp_path / "portal.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("CREATE TABLE notes (text TEXT)")
    watch, woken = _watching(path)
    try:
        time.sleep(0.1)  # its first reads: nothing changed since
        assert woken == []
        writer.execute("SELECT count(*) FROM notes").fetchone()
        time.sleep(0.1)
        assert woken == []
        for n in range(3):
            writer.execute("INSERT INTO notes VALUES (?)", (f"note {n}",))
            assert until(lambda n=n: len(woken) >= n + 1)
    finally:
        watch.stop()
        writer.close()
    assert len(woken) == 3


def test_p5_on_sqlite_the_watch_says_once_it_cannot_read_and_wakes_when_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No database file yet (mode=ro creates none): one line in the log, retried; once the file
    is there, one line more and a wake (for writes it could not see), then commits as usual."""
    path = tmp_path / "portal.db"
    watch, woken = _watching(path)
    try:
        assert until(lambda: "watching" in caplog.text)
        time.sleep(0.1)  # retried meanwhile, said once
        assert not path.exists()  # read-only: the watch made no file
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("CREATE TABLE notes (text TEXT)")
        assert until(lambda: len(woken) == 1)
        writer.execute("INSERT INTO notes VALUES ('a note')")
        assert until(lambda: len(woken) == 2)
        writer.close()
    finally:
        watch.stop()
    failed = [r for r in caplog.records if "watching" in r.message and "failed" in r.message]
    assert len(failed) == 1, caplog.text
    assert "watching the database for writes again" in caplog.text
    assert str(path) in failed[0].getMessage()


class Portal:
    """`portal serve --background-jobs none` with the test's embedding
    endpoint, an agent on it, and a `portal worker` beside it that polls once an hour."""

    def __init__(self, tmp_path: Path, database: str, endpoint: Endpoint) -> None:
        self.database = database
        self.served = Served(
            tmp_path,
            "--embeddings",
            MODEL,
            "--background-jobs",
            "none",
            "--database",
            database,
            env={"OPENAI_BASE_URL": endpoint.url},
        )
        self.worker: Child | None = None
        try:
            agent, agent_id = make_agent(tmp_path, self.served, database)
            self.http = httpx.Client(
                base_url=self.served.url, headers=agent, params={"agentId": agent_id}
            )
            self.worker = start_worker(tmp_path, endpoint, database, "--poll-seconds", AN_HOUR)
        except BaseException:
            self.stop()
            raise

    def write(self, key: str, content: str) -> None:
        note = {"namespace": "owner", "key": key, "content": content}
        assert self.http.put(URL, json=note).status_code == 200

    def found_by_meaning(self, query: str) -> list[str]:
        params = {"action": "search", "q": query, "namespace": "owner"}
        found = self.http.get(URL, params=params).json()
        return [e["key"] for e in found["entries"] if e["matched"] == ["meaning"]]

    def stop(self) -> int | None:
        stopped = self.worker.stop() if self.worker is not None else None
        if hasattr(self, "http"):
            self.http.close()
        self.served.stop()
        return stopped


@pytest.fixture
def portal_with_worker(tmp_path: Path, fresh_database_url: str) -> Iterator[Portal]:
    with Endpoint() as endpoint:
        portal = Portal(tmp_path, fresh_database_url, endpoint)
        try:
            # The worker's first look, at its start, is over once a first note is embedded
            # (by that look or the wake): from then only a wake brings another.
            portal.write("nfirst", "a puppy named rex")
            assert until(lambda: portal.found_by_meaning("dog") == ["nfirst"])
            yield portal
        finally:
            assert portal.stop() == 0


@pytest.fixture
def portal_on_postgresql(fresh_database_url: str, request: pytest.FixtureRequest) -> Portal:
    if not fresh_database_url.startswith("postgresql"):
        pytest.skip("the listener's connection is PostgreSQL's")
    portal: Portal = request.getfixturevalue("portal_with_worker")
    return portal


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_a_note_written_in_portal_serve_is_embedded_by_a_portal_worker_it_woke(
    portal_with_worker: Portal,
) -> None:
    """Both databases: PostgreSQL's notification, SQLite's data_version watched."""
    portal = portal_with_worker
    portal.write("nsecond", "my sedan is blue")
    assert until(lambda: portal.found_by_meaning("car") == ["nsecond"])


def _end_listener(database: str) -> int:
    """pg_terminate_backend of the worker's listening connection (by its application_name):
    its backend's pid."""
    with psycopg.connect(libpq_of(database), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (wakes.APPLICATION_NAME,),
        ).fetchall()
    assert [ended for _, ended in rows] == [True], rows
    return int(rows[0][0])


def _listener_pid(database: str) -> int | None:
    with psycopg.connect(libpq_of(database), autocommit=True) as admin:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND datname = current_database()",
            (wakes.APPLICATION_NAME,),
        ).fetchone()
    return int(row[0]) if row is not None else None


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_a_portal_workers_listener_reconnects_after_its_connection_is_ended(
    portal_on_postgresql: Portal,
) -> None:
    """The listener's backend ended (as a PostgreSQL restart ends it): the worker says so once,
    listens again on a new connection and says so once, and a note written then wakes it."""
    portal = portal_on_postgresql
    assert portal.worker is not None
    ended = _end_listener(portal.database)
    portal.worker.wait_for("embedding queue: listening for writes again")
    assert until(lambda: _listener_pid(portal.database) not in (None, ended))
    # Listening again, the worker looks once (for writes while it was not listening): the
    # first note after may be its look's, the second only a notification's.
    portal.write("nsecond", "my sedan is blue")
    assert until(lambda: portal.found_by_meaning("car") == ["nsecond"])
    portal.write("nthird", "we planned a journey")
    assert until(lambda: portal.found_by_meaning("vacation") == ["nthird"])
    log = portal.worker.output
    assert log.count("embedding queue: listening for writes failed") == 1, log
    assert log.count("embedding queue: listening for writes again") == 1, log
