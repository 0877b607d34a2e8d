"""A relayed reply's waits are bounded and a dropped connection fails every open reply
(P12: an error, never a hang); frames reach only the request they answer."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from webagents.portal.connect import live
from webagents.portal.connect.live import LiveConnection, RelayError, Reply


def _connection() -> LiveConnection:
    return LiveConnection(uuid.uuid4(), uuid.uuid4(), "helper")


async def test_p12_no_first_frame_is_a_504_and_a_cancel() -> None:
    cancelled: list[str] = []
    reply = Reply("r1", lambda: cancelled.append("r1"))
    with pytest.raises(RelayError) as failed:
        await reply.start(0.05)
    assert (failed.value.status, failed.value.code, cancelled) == (504, "agent_timeout", ["r1"])


async def test_p12_a_holder_gone_elsewhere_is_a_502(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "LIVENESS_CHECK", 0.01)

    async def gone() -> bool:
        return False

    reply = Reply("r1", lambda: None, gone)
    with pytest.raises(RelayError) as failed:
        await reply.start(30)
    assert (failed.value.status, failed.value.code) == (502, "agent_disconnected")


async def test_p12_dropped_connection_fails_its_open_replies() -> None:
    connection = _connection()
    reply = Reply("r1", lambda: connection.cancel("r1"))
    connection.open("r1", "assertion", {"messages": []}, reply.put)
    connection.deliver({"type": "start", "id": "r1", "status": 200, "headers": {}})
    connection.deliver({"type": "data", "id": "r1", "chunk": "half"})
    connection.drop()
    assert await reply.start(1) == (200, {})
    chunks: list[str] = []
    with pytest.raises(RelayError) as failed:
        async for chunk in reply.chunks(1):
            chunks.append(chunk)
    assert (chunks, failed.value.status, failed.value.code) == (
        ["half"],
        502,
        "agent_disconnected",
    )


async def test_p12_frames_reach_only_the_request_they_answer() -> None:
    connection = _connection()
    got: list[dict[str, Any]] = []
    connection.open("mine", "assertion", {}, got.append)
    connection.deliver({"type": "start", "id": "someone-elses", "status": 200})
    connection.deliver({"type": "data", "id": None, "chunk": "x"})
    connection.deliver({"type": "end", "id": "mine"})
    connection.deliver({"type": "data", "id": "mine", "chunk": "after the end"})
    assert got == [{"type": "end", "id": "mine"}]
    assert connection.pending == {}
    sent = [connection.outbox.get_nowait() for _ in range(connection.outbox.qsize())]
    assert sent == [
        '{"type":"request","id":"mine","assertion":"assertion","method":"POST",'
        '"path":"chat/completions","body":{}}'
    ]


async def test_p12_cancel_is_sent_once_and_not_after_the_end() -> None:
    connection = _connection()
    connection.open("a", "x", {}, lambda frame: None)
    connection.open("b", "x", {}, lambda frame: None)
    connection.deliver({"type": "end", "id": "b"})
    connection.cancel("a")
    connection.cancel("a")
    connection.cancel("b")
    sent = [connection.outbox.get_nowait() for _ in range(connection.outbox.qsize())]
    assert sent[2:] == ['{"type":"cancel","id":"a"}']
