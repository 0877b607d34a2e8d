"""One memory for every process of an agent (SPEC P12, issue 23), the agent's side, against
the stand-in of the portal's memory store (`memory_portal_double`): Portal Connect's
`memory_changed` makes the sync pull at once (one round at a time; a notice during a round
brings one more after it; a notice of a cursor already pulled, none), and a read of a key
the cache lacks asks the portal before saying there is no such note (only the caller's
namespaces, never over a change here not yet pushed, never waiting on a portal that does
not answer). Two real serve processes: tests/portal/test_memory_one_for_every_process.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from pydantic import ValidationError

from tests.memory_helpers import ALICE, OWNER, memory_agent, use
from tests.memory_portal_double import KEY, MemoryDouble
from webagents.access import AccessVerifier
from webagents.errors import ToolError
from webagents.portal_link.connect import AgentConnection, Target
from webagents.portal_link.memory_sync.sync import PortalSync
from webagents.server import AgentHost, ServedAgent
from webagents.skills.memory import MemorySkill

AT = "2026-01-31T12:00:00+00:00"
WAIT = 30.0  # bounded waits (never a timed assertion)


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> MemoryDouble:
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", KEY)
    return MemoryDouble()


@pytest.fixture
def cache(tmp_path: Path, double: MemoryDouble, monkeypatch: pytest.MonkeyPatch) -> MemorySkill:
    """`memory: {local: false, portal: true}`, its rounds run by the test."""
    monkeypatch.setenv("WEBAGENTS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(PortalSync, "start", lambda self: None)
    _, skill = memory_agent(tmp_path / "a", local=False, portal=True)
    assert skill.sync is not None
    skill.sync.connect = double.client
    return skill


@pytest.fixture
def running(
    tmp_path: Path, double: MemoryDouble, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MemorySkill]:
    """The same with its background thread, whose own timer never comes (an hour)."""
    monkeypatch.setenv("WEBAGENTS_HOME", str(tmp_path / "home"))
    start = PortalSync.start
    monkeypatch.setattr(PortalSync, "start", lambda self: None)
    _, skill = memory_agent(tmp_path / "a", local=False, portal=True, sync_seconds=3600)
    sync = skill.sync
    assert sync is not None
    sync.connect = double.client
    start(sync)
    assert sync.first_round(WAIT)
    try:
        yield skill
    finally:
        sync.close()


def _pulls(double: MemoryDouble) -> int:
    return double.requests.count("GET sync")


async def test_p12_a_note_another_process_wrote_is_read_from_the_portal_before_no_such_note(
    cache: MemorySkill, double: MemoryDouble
) -> None:
    double.edit("owner", "plan", "Written through the other process.", AT)
    read = await use(cache, OWNER, "memory_read", key="plan")
    assert read == {
        "key": "plan",
        "namespace": "owner",
        "description": "Written through the other process.",
        "updated": AT,
        "content": "Written through the other process.",
    }
    assert double.requests == ["GET get"]


async def test_p12_a_note_nowhere_is_still_no_such_note_after_asking_each_readable_namespace(
    cache: MemorySkill, double: MemoryDouble
) -> None:
    double.edit("owner", "plan", "The owner's, not alice's.", AT)
    with pytest.raises(ToolError) as caught:
        await use(cache, ALICE, "memory_read", key="plan")
    assert str(caught.value) == "there is no note 'plan'; memory_list shows the keys"
    # Alice's namespace, then shared: never the owner's, which she may not read.
    assert double.requests == ["GET get", "GET get"]


async def test_p12_a_read_through_never_waits_on_a_portal_that_does_not_answer(
    cache: MemorySkill, double: MemoryDouble
) -> None:
    double.edit("owner", "plan", "Unreachable.", AT)
    double.up = False
    with pytest.raises(ToolError) as caught:
        await use(cache, OWNER, "memory_read", key="plan")
    assert str(caught.value) == "there is no note 'plan'; memory_list shows the keys"
    assert cache.sync is not None
    assert cache.sync.sync_round() is False  # the sync knows it now: not even asked again
    asked = list(double.requests)
    with pytest.raises(ToolError):
        await use(cache, OWNER, "memory_read", key="plan")
    assert double.requests == asked


async def test_p12_a_forget_here_not_yet_pushed_is_not_undone_by_a_read_through(
    cache: MemorySkill, double: MemoryDouble
) -> None:
    await use(cache, OWNER, "memory_write", key="plan", content="To forget.")
    assert cache.sync is not None and cache.sync.sync_round() is True
    double.up = False
    await use(cache, OWNER, "memory_forget", key="plan")  # waits in the outbox
    double.up = True
    asked = list(double.requests)
    with pytest.raises(ToolError) as caught:
        await use(cache, OWNER, "memory_read", key="plan")
    assert str(caught.value) == "there is no note 'plan'; memory_list shows the keys"
    assert double.requests == asked


def test_p12_a_memory_notice_pulls_at_once_and_a_cursor_already_pulled_pulls_nothing(
    running: MemorySkill, double: MemoryDouble
) -> None:
    sync = running.sync
    assert sync is not None
    double.edit("owner", "plan", "From the other process.", AT)
    ended = sync._ended
    sync.changed_in_portal("1")
    _until(lambda: sync._ended == ended + 1, "the round ended")
    assert running.store.read("owner", "plan") is not None
    pulls = _pulls(double)
    sync.changed_in_portal("1")  # the cursor its last pull reached: nothing to pull
    assert not sync._wake.is_set()
    assert _pulls(double) == pulls


def test_p12_notices_during_a_pull_make_one_more_pull_after_it(
    running: MemorySkill, double: MemoryDouble
) -> None:
    sync = running.sync
    assert sync is not None
    entered, release = threading.Event(), threading.Event()
    handle = double.handle

    def slow(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("action") == "sync" and request.method == "GET":
            entered.set()
            assert release.wait(WAIT)
        return handle(request)

    double.handle = slow  # type: ignore[method-assign]
    ended = sync._ended
    pulls = _pulls(double)
    sync.changed_in_portal("5")
    assert entered.wait(WAIT)
    for cursor in ("6", "7", "8"):
        sync.changed_in_portal(cursor)
    release.set()
    _until(lambda: sync._ended == ended + 2, "two rounds")
    with sync._rounds:
        assert (sync._began, sync._wake.is_set()) == (ended + 2, False)
    assert _pulls(double) == pulls + 2


async def test_p12_the_connection_hands_a_memory_notice_to_the_served_agents_sync(
    tmp_path: Path, double: MemoryDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBAGENTS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(PortalSync, "start", lambda self: None)
    told: list[str | None] = []
    monkeypatch.setattr(PortalSync, "changed_in_portal", lambda self, cursor: told.append(cursor))
    agent, _ = memory_agent(tmp_path / "a", local=False, portal=True)
    connection = AgentConnection(
        app=None,  # type: ignore[arg-type]  # no request is relayed here
        host=AgentHost([ServedAgent(agent, AccessVerifier(None))]),
        target=Target("keeper", "http://portal.test", None),
    )

    async def send(frame: object) -> None:
        raise AssertionError(f"nothing is answered to a notice: {frame}")

    await connection._take(orjson.dumps({"type": "memory_changed", "cursor": "42"}), send)
    assert told == ["42"]
    with pytest.raises(ValidationError):  # not the wire's: the loop logs it and goes on
        await connection._take(orjson.dumps({"type": "memory_changed", "cursor": 42}), send)
    assert told == ["42"]
