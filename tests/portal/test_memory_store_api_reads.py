"""SPEC P5's reads over HTTP take no write lock: a GET of the memory store runs in a
read-only transaction (on SQLite a deferred BEGIN reading the WAL's snapshot), with the agent's
key still verified in it, so it neither waits behind a writer nor holds writers up; writes
keep their serialised transaction. Real commits, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from webagents.portal.admin import open_database
from webagents.portal.app import create_app
from webagents.portal.db.engine import make_sessions
from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, publish

URL = "/api/storage/memory-scoped"


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    made = open_database(PortalSettings(database_url=fresh_database_url))
    yield made
    made.dispose()


@pytest.fixture
def api(engine: Engine, fresh_database_url: str) -> Iterator[TestClient]:
    app = create_app(
        PortalSettings(database_url=fresh_database_url), engine=engine, embedding_worker=False
    )
    with TestClient(app) as client:
        yield client


def _in_thread(call: Any) -> Any:
    """The call's answer, given in a bounded wait (it would wait out the 30 s busy timeout if
    it queued for the writer's lock)."""
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=15)
    assert not thread.is_alive(), "the read waited for the writer's lock"
    return answers[0]


def test_p5_a_get_answers_beside_a_writer_holding_its_transaction(
    engine: Engine, api: TestClient
) -> None:
    sessions = make_sessions(engine)
    with sessions() as session:
        agent: Published = publish(session, "alice", "alice-helper")  # it commits
        store = MemoryStore.for_agent(session, agent.scope)
        service.put(store, namespace="owner", key="pets", content="a puppy", by=service.BY_AGENT)
        session.commit()
    with sessions() as writer:  # another request's write, not yet committed
        store = MemoryStore.for_agent(writer, agent.scope)
        service.put(store, namespace="owner", key="pets", content="a dog", by=service.BY_AGENT)
        service.put(store, namespace="owner", key="cars", content="a sedan", by=service.BY_AGENT)
        writer.flush()
        params = {"action": "get", "namespace": "owner", "key": "pets"}
        got = _in_thread(lambda: api.get(URL, headers=agent.headers, params=params))
        assert got.status_code == 200, got.text
        assert got.json()["entry"]["content"] == "a puppy"  # the snapshot: not the open write
        listed = _in_thread(
            lambda: api.get(
                URL, headers=agent.headers, params={"action": "list", "namespace": "owner"}
            )
        )
        assert [e["key"] for e in listed.json()["entries"]] == ["pets"]
        bad = _in_thread(
            lambda: api.get(URL, headers={"Authorization": "Bearer rk_nope"}, params=params)
        )
        assert bad.status_code == 401  # verified in the read's transaction too
        writer.commit()
    got = api.get(URL, headers=agent.headers, params=params)
    assert got.json()["entry"]["content"] == "a dog"


def test_p5_a_put_still_waits_for_a_writer_and_then_writes(engine: Engine, api: TestClient) -> None:
    """Writes keep their serialised transaction: a PUT beside an open write is kept after it
    (on SQLite it queues for the lock; nothing is lost either way)."""
    sessions = make_sessions(engine)
    with sessions() as session:
        agent: Published = publish(session, "alice", "alice-helper")
    body = {"namespace": "owner", "key": "cars", "content": "a car"}
    answers: list[Any] = []
    with sessions() as writer:
        store = MemoryStore.for_agent(writer, agent.scope)
        service.put(store, namespace="owner", key="pets", content="a dog", by=service.BY_AGENT)
        writer.flush()
        put = threading.Thread(
            target=lambda: answers.append(api.put(URL, headers=agent.headers, json=body)),
            daemon=True,
        )
        put.start()
        writer.commit()
    put.join(timeout=30)
    assert not put.is_alive()
    assert answers[0].status_code == 200, answers[0].text
    listed = api.get(URL, headers=agent.headers, params={"action": "list", "namespace": "owner"})
    assert sorted(e["key"] for e in listed.json()["entries"]) == ["cars", "pets"]
