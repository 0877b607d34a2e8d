"""Memory notices (SPEC P12, issue 23: one memory for every process of an agent), the portal's
side: a committed change of an agent's memory is told to every Portal Connect connection of
that agent (`{"type": "memory_changed", "cursor": "<the feed's cursor>"}`), coalesced (one
notice waiting per connection, with the latest cursor; one telling per agent at a time), in
this process and over the bus in the others; a rolled back change and a put that changes
nothing tell nothing. The unit parts here; the app's on SQLite and PostgreSQL below them."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from webagents.portal.accounts import service as accounts
from webagents.portal.agents import service as agents
from webagents.portal.agents.schemas import AgentIn
from webagents.portal.app import create_app
from webagents.portal.connect.directory import Holder
from webagents.portal.connect.live import MAX_OUTBOX_FRAMES, LiveConnection, Registry
from webagents.portal.connect.notices import MemoryNotices
from webagents.portal.connect.relay import Relay
from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import upgrade
from webagents.portal.memory import changes, service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

from .conftest import PASSWORD
from .memory_helpers import publish

AGENT, OTHER = uuid.uuid4(), uuid.uuid4()


def _notice(cursor: int) -> str:
    return f'{{"type":"memory_changed","cursor":"{cursor}"}}'


async def _sent(connection: LiveConnection) -> list[str]:
    """Every frame waiting for the agent, as the writer sends them."""
    frames = []
    while not connection.outbox.empty():
        frames.append(await connection.next_frame())
    return frames


async def test_p12_a_burst_of_changes_is_one_notice_per_connection_with_the_latest_cursor() -> None:
    connection = LiveConnection(uuid.uuid4(), AGENT, "helper")
    connection.post('{"type":"pong"}')
    for cursor in range(1, 1001):
        connection.memory_changed(cursor)
    connection.memory_changed(7)  # an older cursor told late never goes back
    assert await _sent(connection) == ['{"type":"pong"}', _notice(1000)]
    connection.memory_changed(1001)  # the notice sent: the next one waits again
    assert await _sent(connection) == [_notice(1001)]


async def test_p12_a_full_outbox_drops_the_notice_and_the_next_one_still_goes() -> None:
    connection = LiveConnection(uuid.uuid4(), AGENT, "helper")
    for n in range(MAX_OUTBOX_FRAMES):
        connection.post(f'{{"type":"pong","n":{n}}}')
    connection.memory_changed(5)  # the agent is not reading: nothing more is queued
    assert len(await _sent(connection)) == MAX_OUTBOX_FRAMES
    connection.memory_changed(6)
    assert await _sent(connection) == [_notice(6)]
    connection.drop()
    connection.memory_changed(7)  # a closed connection is told nothing
    assert await _sent(connection) == []


async def test_p12_notices_tell_each_connection_of_the_agent_and_coalesce_what_goes_elsewhere() -> (
    None
):
    registry = Registry()
    first, second = (LiveConnection(uuid.uuid4(), AGENT, "helper") for _ in range(2))
    other = LiveConnection(uuid.uuid4(), OTHER, "other")
    for connection in (first, second, other):
        registry.add(connection)
    told: list[tuple[uuid.UUID, int]] = []
    gate = asyncio.Event()

    async def elsewhere(agent_id: uuid.UUID, cursor: int) -> None:
        told.append((agent_id, cursor))
        await gate.wait()  # the directory and the bus are slow: changes come meanwhile

    notices = MemoryNotices(registry, elsewhere)
    notices.changed(AGENT, 1)
    await asyncio.sleep(0)  # the telling starts, and waits on the other processes
    for cursor in range(2, 1001):
        notices.changed(AGENT, cursor)
    gate.set()
    await notices.idle()
    assert told == [(AGENT, 1), (AGENT, 1000)]
    assert [await _sent(c) for c in (first, second, other)] == [
        [_notice(1000)],
        [_notice(1000)],
        [],
    ]


async def test_p12_a_change_committed_in_a_worker_thread_reaches_the_loop() -> None:
    registry = Registry()
    connection = LiveConnection(uuid.uuid4(), AGENT, "helper")
    registry.add(connection)
    notices = MemoryNotices(registry)
    notices.from_thread(AGENT, 3)  # before the app started: nobody is there to tell
    assert connection.outbox.empty()
    notices.bind(asyncio.get_running_loop())
    worker = threading.Thread(target=notices.from_thread, args=(AGENT, 4))
    worker.start()
    worker.join()
    await asyncio.sleep(0)  # the loop runs what call_soon_threadsafe handed it, in order
    await notices.idle()
    assert await _sent(connection) == [_notice(4)]
    await notices.stop()  # the app stopped: what comes after is not handed to the loop
    notices.from_thread(AGENT, 5)
    assert connection.outbox.empty()


async def test_p12_a_stop_ends_a_telling_that_waits_on_the_database() -> None:
    registry = Registry()
    waited = asyncio.Event()

    async def elsewhere(agent_id: uuid.UUID, cursor: int) -> None:
        waited.set()
        await asyncio.Event().wait()  # the directory never answers

    notices = MemoryNotices(registry, elsewhere)
    notices.changed(AGENT, 1)
    await waited.wait()
    await notices.stop()
    await notices.idle()  # nothing left under way


class _Bus:
    def __init__(self) -> None:
        self.posted: list[tuple[uuid.UUID, dict[str, Any]]] = []

    def post(self, process_id: uuid.UUID, message: dict[str, Any]) -> None:
        self.posted.append((process_id, message))


async def test_p12_on_postgresql_each_process_holding_the_agent_is_told_once_over_the_bus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    relay = Relay(sessionmaker(), PortalSettings(database_url="postgresql+psycopg://db/portal"))
    one, two = uuid.uuid4(), uuid.uuid4()
    holders = [Holder(one, uuid.uuid4()), Holder(one, uuid.uuid4()), Holder(two, uuid.uuid4())]
    monkeypatch.setattr(relay.directory, "holders", lambda agent_id: holders)
    bus = _Bus()

    async def ensure_bus() -> _Bus:
        return bus

    monkeypatch.setattr(relay, "_ensure_bus", ensure_bus)
    relay.notices.changed(AGENT, 9)
    await relay.notices.idle()
    notice = {"kind": "memory_changed", "agent_id": str(AGENT), "cursor": 9}
    assert sorted(bus.posted, key=lambda sent: sent[0] == two) == [(one, notice), (two, notice)]

    # The receiving process tells its own connections of the agent; a message it cannot read
    # tells nobody.
    here = LiveConnection(uuid.uuid4(), AGENT, "helper")
    relay.registry.add(here)
    relay._on_bus({"kind": "memory_changed", "agent_id": "not an id", "cursor": 10})
    relay._on_bus({"kind": "memory_changed", "agent_id": str(AGENT), "cursor": "10"})
    assert await _sent(here) == []
    relay._on_bus(notice)
    assert await _sent(here) == [_notice(9)]


async def test_p12_on_sqlite_nothing_goes_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    relay = Relay(sessionmaker(), PortalSettings(database_url="sqlite:///portal.db"))

    def holders(agent_id: uuid.UUID) -> list[Holder]:
        raise AssertionError("one process: the directory is not asked")

    monkeypatch.setattr(relay.directory, "holders", holders)
    here = LiveConnection(uuid.uuid4(), AGENT, "helper")
    relay.registry.add(here)
    relay.notices.changed(AGENT, 2)
    await relay.notices.idle()
    assert await _sent(here) == [_notice(2)]


# The change hook, on both databases ----------------------------------------------------------


@pytest.fixture
def sessions(migrated_engine: Engine) -> Iterator[sessionmaker[Session]]:
    """Sessions whose commits are savepoints of a transaction rolled back at the end."""
    connection = migrated_engine.connect()
    outer = connection.begin()
    try:
        yield sessionmaker(
            bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
        )
    finally:
        outer.rollback()
        connection.close()


def _put(store: MemoryStore, key: str, content: str) -> None:
    service.put(store, namespace="owner", key=key, content=content, by=service.BY_AGENT)


def test_p12_a_committed_change_is_told_once_with_the_agents_latest_cursor(
    sessions: sessionmaker[Session],
) -> None:
    told: list[tuple[uuid.UUID, int]] = []
    stop = changes.listen(sessions, lambda agent_id, cursor: told.append((agent_id, cursor)))
    try:
        with sessions() as db:
            published = publish(db)
            agent_id = published.scope.agent_id
            store = MemoryStore.for_agent(db, published.scope)
            _put(store, "plan", "v1")
            _put(store, "todo", "t1")
            service.delete(store, "owner", "todo", by=service.BY_AGENT)
            assert told == []  # nothing before the commit
            db.commit()
        assert told == [(agent_id, 3)]

        with sessions() as db:  # rolled back: never happened, never told
            store = MemoryStore.for_agent(db, published.scope)
            _put(store, "plan", "v2")
            db.rollback()
            _put(store, "plan", "v1")  # the same as kept: no change
            service.delete(store, "owner", "gone", by=service.BY_AGENT)  # nothing
            db.commit()
        assert told == [(agent_id, 3)]

        with sessions() as db:  # the owner's restore is a change too
            store = MemoryStore.for_agent(db, published.scope)
            first = service.versions(store, "owner", "plan")[-1]
            _put(store, "plan", "v3")
            service.restore_version(store, first.id, by=service.by_owner("alice"))
            db.commit()
        assert told == [(agent_id, 3), (agent_id, 7)]
    finally:
        stop()
    with sessions() as db:  # stopped: told nothing more
        _put(MemoryStore.for_agent(db, published.scope), "plan", "v4")
        db.commit()
    assert told == [(agent_id, 3), (agent_id, 7)]


# The app: a write through the memory API reaches the agent's WebSocket -----------------------


@pytest.fixture
def portal(fresh_database_url: str) -> Iterator[tuple[TestClient, str, str]]:
    """The app on a database of its own (its commits are real), alice's agent and its key,
    and a key of bob's agent."""
    settings = PortalSettings(database_url=fresh_database_url)
    engine = make_engine(settings)
    upgrade(engine)
    with Session(engine) as db:
        alice = accounts.add_user(db, "alice", PASSWORD)
        bob = accounts.add_user(db, "bob", PASSWORD)
        helper = agents.create_agent(db, alice, AgentIn(name="helper")).rawApiKey
        other = agents.create_agent(db, bob, AgentIn(name="other")).rawApiKey
        db.commit()
    with TestClient(create_app(settings, engine=engine, embedder=None)) as client:
        yield client, helper, other
    engine.dispose()


def test_p12_a_write_through_the_memory_api_tells_the_agents_connections_only(
    portal: tuple[TestClient, str, str],
) -> None:
    client, helper, other = portal
    url = "/api/storage/memory-scoped"
    entry = {"namespace": "owner", "key": "plan", "content": "Friday", "description": ""}
    with (
        client.websocket_connect("/ws", headers={"Authorization": f"Bearer {helper}"}) as ws,
        client.websocket_connect("/ws", headers={"Authorization": f"Bearer {other}"}) as bobs,
    ):
        assert (ws.receive_json()["type"], bobs.receive_json()["type"]) == ("hello", "hello")
        put = client.put(url, json=entry, headers={"Authorization": f"Bearer {helper}"})
        assert put.status_code == 200, put.text
        assert ws.receive_json() == {"type": "memory_changed", "cursor": "1"}
        forgot = client.delete(
            url,
            params={"namespace": "owner", "key": "plan"},
            headers={"Authorization": f"Bearer {helper}"},
        )
        assert (forgot.status_code, forgot.json()) == (200, {"forgotten": True})
        assert ws.receive_json() == {"type": "memory_changed", "cursor": "2"}
        # Bob's agent's connection was told nothing of alice's agent: its first frame after
        # the hello is the answer to its own ping.
        bobs.send_json({"type": "ping"})
        assert bobs.receive_json() == {"type": "pong"}
