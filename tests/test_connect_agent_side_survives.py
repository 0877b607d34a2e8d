"""Portal Connect, the agent's side (P12), survives what one request or one fault can do, against
the fake portal of tests/connect_portal.py: a relayed body the agent cannot re-encode, and a
frame whose handling fails, each get an error answer and the connection serves the next
request; a connection task that ends anyway is logged and opened again (the supervisor); a
stop that arrives as the portal's hello does stops the connection (Python 3.11's wait_for
swallowed it)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.connect_agent_side_helpers import FRIDAY, served_agent
from tests.connect_portal import FakePortal
from webagents.portal_link import connect as connect_module
from webagents.portal_link.connect import AgentConnection, Target
from webagents.server import AgentHost
from webagents.server import relay as relay_module


def _nested(depth: int) -> dict[str, Any]:
    deep: list[Any] = []
    for _ in range(depth - 1):
        deep = [deep]
    return {**FRIDAY, "extra": deep}


async def _connected(portal: FakePortal) -> None:
    await asyncio.wait_for(portal.connected.wait(), 30)


async def test_p12_a_body_too_deep_to_reencode_is_answered_400_and_the_next_request_served(
    tmp_path: Path,
) -> None:
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        deep = await portal.relay(_nested(300), portal.assertion(username="bob"))
        after = await portal.relay(FRIDAY, portal.assertion(username="bob"))
        connections = portal.attempts
    assert deep.error == {
        "type": "error",
        "id": deep.error["id"] if deep.error else None,
        "status": 400,
        "message": "the request body is nested deeper than the agent takes (255 levels of JSON "
        "arrays and objects): send a flatter body",
        "code": "body_too_deep",
    }
    assert (after.status, after.error, after.json()["object"]) == (200, None, "chat.completion")
    assert connections == 1  # the same connection answered both


async def test_p12_a_frame_whose_handling_fails_is_answered_and_the_connection_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = relay_module.RelayedRequest

    def failing(app: Any, agent: str, frame: dict[str, Any], send: Any) -> Any:
        if frame["body"].get("fail"):
            raise RuntimeError("a fault in taking one request")
        return real(app, agent, frame, send)

    monkeypatch.setattr(connect_module, "RelayedRequest", failing)
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        failed = await portal.relay({**FRIDAY, "fail": True}, portal.assertion(username="bob"))
        after = await portal.relay(FRIDAY, portal.assertion(username="bob"))
        connections = portal.attempts
    assert failed.error is not None
    assert {k: v for k, v in failed.error.items() if k != "id"} == {
        "type": "error",
        "status": 500,
        "message": "the agent could not take this request",
        "code": "agent_error",
    }
    assert (after.status, after.error) == (200, None)
    assert connections == 1
    logged = [r for r in caplog.records if r.name == "webagents.connect" and r.exc_info]
    assert [(r.getMessage(), str(r.exc_info[1]) if r.exc_info else None) for r in logged] == [
        ("Portal Connect: a frame could not be handled", "a fault in taking one request")
    ]


async def test_p12_a_connection_task_that_ends_is_logged_and_opened_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(connect_module, "SYNC_SECONDS", 0.01)
    real = AgentConnection._run
    runs: list[int] = []

    async def first_fails(self: AgentConnection) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("a fault outside any one connection")
        await real(self)

    monkeypatch.setattr(AgentConnection, "_run", first_fails)
    caplog.set_level(logging.INFO, "webagents.connect")
    async with served_agent(tmp_path) as agent:
        portal = agent.portal
        await _connected(portal)
        served = await portal.relay(FRIDAY, portal.assertion(username="bob"))
    assert (len(runs), served.status) == (2, 200)
    ended = [r for r in caplog.records if "connection ended" in r.getMessage()]
    assert [r.getMessage() for r in ended] == [
        "agent 'helper': the Portal Connect connection ended (a fault outside any one "
        "connection); opening it again"
    ]


class _HelloAtTheStop:
    """A connection whose hello arrives in the same turn of the loop as the stop: recv cancels
    the task that waits for it, then returns the hello."""

    def __init__(self) -> None:
        self.waiting: asyncio.Task[None] | None = None

    async def recv(self) -> str:
        assert self.waiting is not None
        self.waiting.cancel()
        return json.dumps({"type": "hello", "agent_id": None, "public_url": "http://portal"})


async def test_p12_a_stop_as_the_hello_arrives_stops_the_connection(tmp_path: Path) -> None:
    connection = AgentConnection(
        app=None,  # type: ignore[arg-type]  # no request reaches it
        host=AgentHost([]),
        target=Target("helper", "http://portal", None),
    )
    ws = _HelloAtTheStop()
    ws.waiting = asyncio.create_task(connection._hello(ws, 0))  # type: ignore[arg-type]
    await asyncio.gather(ws.waiting, return_exceptions=True)
    assert ws.waiting.cancelled()
