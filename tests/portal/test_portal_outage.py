"""The database failing under a running portal (issue 21, "PostgreSQL down or the disk
full"): 503 with Retry-After as JSON on the API (never a 500 nor a closed connection), said
once in the log, and served again when the database is back (db/outage.py, app.py)."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from webagents.portal.admin import add_user, new_api_key, open_database
from webagents.portal.app import create_app
from webagents.portal.db import dialect
from webagents.portal.settings import PortalSettings

from .conftest import PASSWORD
from .databases import PostgresServer, _Cluster
from .processes import Served, portal

MEMORY = "/api/storage/memory-scoped"
UNAVAILABLE = {
    "error": {
        "message": "the portal's database is unavailable right now, so nothing was done; try "
        "again in 5 s",
        "type": "server_error",
        "param": None,
        "code": "database_unavailable",
    }
}
DOWN = "the database is unavailable ("
BACK = "the database answers again"


def _answer(answer: httpx.Response) -> tuple[int, str | None, Any]:
    return answer.status_code, answer.headers.get("retry-after"), answer.json()


@pytest.fixture
def cluster() -> Iterator[_Cluster]:
    """A PostgreSQL server of this test's own, so that stopping it stops no other test's."""
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not on PATH")
    made = _Cluster()
    try:
        yield made
    finally:
        made.stop()


@pytest.mark.e2e
def test_p_postgresql_stopped_under_a_running_portal_is_503_then_served_again(
    tmp_path: Path, cluster: _Cluster
) -> None:
    database = PostgresServer(cluster.start()).new_database()
    served = Served(tmp_path, "--database", database)
    try:
        assert (
            portal(tmp_path, "adduser", "alice", "--database", database, stdin=PASSWORD).returncode
            == 0
        )
        user_key = portal(tmp_path, "apikey", "alice", "--database", database).stdout.splitlines()[
            -1
        ]
        with httpx.Client(base_url=served.url, timeout=60) as http:
            made = http.post(
                "/api/agents",
                headers={"Authorization": f"Bearer {user_key}"},
                json={"name": "helper"},
            )
            agent = {"Authorization": f"Bearer {made.json()['rawApiKey']}"}
            note = {"namespace": "shared", "key": "k", "content": "before"}
            assert http.put(MEMORY, headers=agent, json=note).status_code == 200

            cluster.halt()
            read = {"action": "get", "namespace": "shared", "key": "k"}
            refused = [
                _answer(http.get(MEMORY, headers=agent, params=read)),
                _answer(http.put(MEMORY, headers=agent, json={**note, "content": "during"})),
                _answer(http.get("/api/users/me", headers={"Authorization": f"Bearer {user_key}"})),
            ]
            assert refused == [(503, "5", UNAVAILABLE)] * 3

            cluster.resume()
            back = None
            for _ in range(400):  # the pool replaces its dead connections (a bounded poll)
                back = http.get(MEMORY, headers=agent, params=read)
                if back.status_code == 200:
                    break
            assert back is not None
            assert (back.status_code, back.json()["entry"]["content"]) == (200, "before")
            assert (
                http.put(MEMORY, headers=agent, json={**note, "content": "after"}).status_code
                == 200
            )
            after = http.get(MEMORY, headers=agent, params=read).json()["entry"]["content"]
            assert after == "after"
    finally:
        served.stop()
    told = [line for line in served.output.splitlines() if DOWN in line or BACK in line]
    assert [line.split(": ", 1)[0] for line in told] == [
        "ERROR webagents.portal",
        "WARNING webagents.portal",
    ]
    assert told[1] == f"WARNING webagents.portal: {BACK}"
    assert " 500 " not in served.output
    assert "Traceback" not in served.output


def _failure(database_kind: str, message: str) -> Exception:
    """The driver's own error for `message`, as the database would raise it."""
    if database_kind == "sqlite":
        return sqlite3.OperationalError(message)
    return psycopg.errors.DiskFull(message)


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    made = open_database(PortalSettings(database_url=fresh_database_url))
    yield made
    made.dispose()


@pytest.mark.parametrize("message", ["database or disk is full", "database is locked"])
def test_p_a_full_disk_or_a_locked_database_is_503_told_once_and_served_after(
    engine: Engine,
    fresh_database_url: str,
    database_kind: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The error injected where the driver runs each statement: the API answers 503 with
    Retry-After, a page says so on a 503 page, the log says it once for every request; once
    the database works again, requests are served and the log says that once."""
    add_user(engine, "alice", PASSWORD)
    key = {"Authorization": f"Bearer {new_api_key(engine, 'alice', 'test').key}"}
    app = create_app(PortalSettings(database_url=fresh_database_url), engine=engine, embedder=None)
    dialect = engine.dialect
    working = dialect.do_execute

    def failing(*args: Any) -> None:
        raise _failure(database_kind, message)

    with TestClient(app) as client, caplog.at_level(logging.WARNING, "webagents.portal"):
        assert client.get("/api/users/me", headers=key).status_code == 200
        monkeypatch.setattr(dialect, "do_execute", failing)
        refused = [_answer(client.get("/api/users/me", headers=key)) for _ in range(3)]
        page = client.get("/signin")
        monkeypatch.setattr(dialect, "do_execute", working)
        served = client.get("/api/users/me", headers=key)

    assert refused == [(503, "5", UNAVAILABLE)] * 3
    assert (page.status_code, page.headers.get("retry-after")) == (503, "5")
    assert "the portal&#39;s database is unavailable right now" in page.text
    assert (served.status_code, served.json()["user"]["username"]) == (200, "alice")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "ERROR",
            f"the database is unavailable ({message}): requests are answered 503 until it "
            "answers again",
        ),
        ("WARNING", BACK),
    ]


def test_p_connections_ended_by_postgresql_while_idle_are_replaced_before_a_request_uses_them(
    engine: Engine,
    fresh_database_url: str,
    database_kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every connection the pool gave the app ended by the server (pg_terminate_backend, as
    an administrator or an idle timeout does) while idle: once idle longer than the pool
    trusts a connection untested, a read, a write and a page are served on new connections,
    none refused, nothing in the log (db/dialect.py's prepare_postgresql)."""
    if database_kind == "sqlite":
        pytest.skip("SQLite has no server to end a connection")
    add_user(engine, "alice", PASSWORD)
    user = {"Authorization": f"Bearer {new_api_key(engine, 'alice', 'test').key}"}
    app = create_app(PortalSettings(database_url=fresh_database_url), engine=engine, embedder=None)
    used: set[int] = set()
    event.listen(engine, "checkout", lambda dbapi, *_: used.add(dbapi.info.backend_pid))
    read = {"action": "get", "namespace": "shared", "key": "k"}
    note = {"namespace": "shared", "key": "k", "content": "before"}
    with TestClient(app) as client, caplog.at_level(logging.WARNING, "webagents.portal"):
        made = client.post("/api/agents", headers=user, json={"name": "helper"})
        agent = {"Authorization": f"Bearer {made.json()['rawApiKey']}"}
        assert client.put(MEMORY, headers=agent, json=note).status_code == 200
        assert client.get(MEMORY, headers=agent, params=read).status_code == 200
        ended = set(used)
        server = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(server, autocommit=True) as other:  # not one of the pool's
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [list(ended)]
            )
        time.sleep(dialect.PING_AFTER_IDLE_SECONDS + 0.2)
        used.clear()
        answers = [
            client.get(MEMORY, headers=agent, params=read),
            client.put(MEMORY, headers=agent, json={**note, "content": "after"}),
            client.get("/api/users/me", headers=user),
            client.get(MEMORY, headers=agent, params=read),
        ]
    assert [answer.status_code for answer in answers] == [200] * 4
    assert answers[0].json()["entry"]["content"] == "before"
    assert answers[3].json()["entry"]["content"] == "after"
    assert used and not used & ended
    assert caplog.records == []
