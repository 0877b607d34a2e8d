"""The server's limits in process: the connection cap against the file limit, floods of events
logged once, asyncio's accept errors counted, the 413 that names --max-body-mb (issue 11)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
from pathlib import Path

import httpx
import pytest

from webagents import Agent
from webagents.access import AccessVerifier
from webagents.errors import ModelError
from webagents.model import ModelRequest
from webagents.server import AgentHost, ServedAgent, create_app, turn_errors
from webagents.server.connection_limits import connection_cap
from webagents.server.flood import AcceptErrors, FloodLog
from webagents.testing import FunctionModel


def test_serve_the_connection_cap_keeps_files_for_the_agent_and_its_model() -> None:
    """Review finding 2: an eighth of the file limit (at least 32) is kept for the agent's
    files, and of the rest half for connections, half for their requests' connections to
    the model."""
    assert [
        connection_cap(1000, 1024),  # Linux's usual ulimit -n: (1024 - 128) / 2
        connection_cap(1000, 128),  # at least 32 kept: (128 - 32) / 2
        connection_cap(1000, 1 << 20),
        connection_cap(10, 1024),
        connection_cap(1000, 33),
        connection_cap(1000, 32),
    ] == [448, 48, 1000, 10, 0, 0]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _messages(caplog: pytest.LogCaptureFixture, under: str = "") -> list[tuple[str, str]]:
    return [(r.name, r.getMessage()) for r in caplog.records if r.name.startswith(under)]


def test_serve_a_flood_is_logged_once_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    flood = FloodLog("out of %s", "%d more in the last %d s", every=60, clock=clock)
    caplog.set_level(logging.WARNING, "webagents.server")
    for _ in range(5000):
        flood.event("files")
    assert _messages(caplog) == [("webagents.server", "out of files")]

    clock.now += 60
    flood.event("files")  # the first after the interval tells the count so far
    clock.now += 10
    flood.event("files")
    flood.flush()  # as its timer does, or at the end
    clock.now += 3600
    flood.event("memory")  # an hour later: a new flood, told in full
    assert _messages(caplog) == [
        ("webagents.server", "out of files"),
        ("webagents.server", "5000 more in the last 60 s"),
        ("webagents.server", "1 more in the last 60 s"),
        ("webagents.server", "out of memory"),
    ]


async def test_serve_the_count_of_a_flood_that_stops_is_still_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flood = FloodLog("first", "%d more in the last %d s", every=0.05)
    caplog.set_level(logging.WARNING, "webagents.server")
    for _ in range(3):
        flood.event()
    for _ in range(200):  # bounded: the timer fires after 50 ms
        if len(caplog.records) == 2:
            break
        await asyncio.sleep(0.01)
    assert _messages(caplog) == [
        ("webagents.server", "first"),
        ("webagents.server", "2 more in the last 0 s"),
    ]


async def test_serve_accept_errors_are_one_line_not_a_traceback_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What asyncio's accept loop reports, as it reports it, a thousand times."""
    loop = asyncio.get_running_loop()
    accepting = logging.getLogger("asyncio")
    errors = AcceptErrors(128)
    accepting.addFilter(errors)
    caplog.set_level(logging.WARNING)
    listener = socket.socket()
    try:
        for _ in range(1000):
            loop.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(errno.EMFILE, "Too many open files"),
                    "socket": listener,
                }
            )
        loop.call_exception_handler({"message": "something else broke"})
    finally:
        accepting.removeFilter(errors)
        errors.flood.flush()
        listener.close()
    assert _messages(caplog)[:2] == [
        (
            "webagents.server",
            "cannot accept new connections: Too many open files (the file limit is 128); "
            "they wait until others close. Lower --max-connections or raise the limit "
            "(ulimit -n)",
        ),
        ("asyncio", "something else broke"),  # other errors pass as they were
    ]
    assert _messages(caplog)[2:] == [
        ("webagents.server", "cannot accept new connections: 999 more times in the last 60 s")
    ]
    assert all(r.exc_info is None for r in caplog.records if r.name == "webagents.server")


async def test_serve_413_names_the_option_that_raises_the_limit() -> None:
    app = create_app(AgentHost([]), max_body_bytes=100)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/v1/chat/completions", content=b"x" * 101)
    assert (answer.status_code, answer.json()) == (
        413,
        {
            "error": {
                "message": "the request body is over 100 bytes, this server's limit "
                "(webagents serve --max-body-mb raises it)",
                "type": "request_too_large",
                "param": None,
                "code": "request_too_large",
            }
        },
    )


def test_daemon_without_a_model_key_suggests_offline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon goes on watching an agent it cannot load, and its log says the fix."""
    from webagents.chat_completions import NO_ENDPOINT
    from webagents.server.daemon import FolderHost

    (tmp_path / "helper").mkdir()
    (tmp_path / "helper" / "AGENT.md").write_text("---\nmodel: openai/m\n---\nBe brief.\n")
    with caplog.at_level(logging.ERROR, logger="webagents.daemon"):
        host = FolderHost(tmp_path)
    assert host.names() == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{NO_ENDPOINT} (or serve the offline model: --offline); the agent is not served until "
        "it is fixed"
    ]


def _out_of_files(request: ModelRequest) -> str:
    """A turn that finds the process out of descriptors: the agent's own files on odd
    requests, the model client's connection (behind a ModelError) on even ones."""
    if len(request.messages) % 2:
        raise OSError(errno.EMFILE, "Too many open files")
    try:
        raise OSError(errno.EMFILE, "Too many open files")
    except OSError:
        raise ModelError("cannot reach the model endpoint") from None


async def test_serve_out_of_descriptors_mid_turn_is_503_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Review finding 2: turns that ran out of file descriptors answered 500 internal_error,
    with a traceback each in the log. Now 503 server_busy with Retry-After, streamed or not,
    and one line for the flood."""
    monkeypatch.setattr(
        turn_errors,
        "_OUT_OF_FILES",
        FloodLog(turn_errors._OUT_OF_FILES._first, turn_errors._OUT_OF_FILES._summary),
    )
    agent = Agent("busy", "Be brief.", model=FunctionModel(_out_of_files))
    served = ServedAgent(agent, AccessVerifier(None, environ={}))
    transport = httpx.ASGITransport(app=create_app(AgentHost([served])))
    caplog.set_level(logging.INFO, "webagents")
    message = (
        "the server has too much to do at once to take this turn (it is out of open files); "
        "try again shortly"
    )
    answers = []
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for history in ([], [{"role": "assistant", "content": "earlier"}]):
            body = {"model": "busy", "messages": [*history, {"role": "user", "content": "hi"}]}
            answer = await client.post("/v1/chat/completions", json=body)
            answers.append((answer.status_code, answer.headers.get("retry-after"), answer.json()))
        streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
    assert (
        answers
        == [
            (
                503,
                "1",
                {
                    "error": {
                        "message": message,
                        "type": "server_error",
                        "param": None,
                        "code": "server_busy",
                    }
                },
            )
        ]
        * 2
    )
    events = [line.removeprefix("data: ") for line in streamed.text.splitlines() if line]
    assert [json.loads(events[-2]), events[-1]] == [answers[0][2], "[DONE]"]
    assert _messages(caplog, "webagents") == [
        (
            "webagents.server",
            "a turn failed for lack of file descriptors (Too many open files): it was answered "
            "503 server_busy, as are others until some close. Lower --max-connections or "
            "raise the file limit (ulimit -n)",
        )
    ]
    assert all(record.exc_info is None for record in caplog.records)
    turn_errors._OUT_OF_FILES.flush()
    assert _messages(caplog, "webagents")[1:] == [
        ("webagents.server", "out of file descriptors: 2 more turns answered 503 in the last 60 s")
    ]
