"""`webagents serve` as a process against idle, slow and surplus connections, and what a new
user meets when it cannot start (issue 11: hardening and a new user's friction)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import threading
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from webagents.model import ModelRequest
from webagents.testing import FunctionModel, ScriptedServer

from .conftest import child_env, webagents_command
from .connections_helpers import (
    CAP,
    EVICTING,
    FILE_LIMIT,
    LIMITED,
    SUMMARY,
    TIMED_OUT,
    _closed_by_server,
    _connect,
    _sending_slowly,
    _server_lines,
    _trickling,
)
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

HI = {"model": "brief", "messages": [{"role": "user", "content": "hi"}]}
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(json.dumps(HI)), json.dumps(HI).encode())
)
OFFLINE_HI = (
    "(offline scripted model, turn 1) You said: 'hi'. I can't think offline, but everything "
    "around me works: the chat, the slash commands and my skills' tools."
)


def _agent(tmp_path: Path) -> Path:
    write(tmp_path / "brief" / "AGENT.md", "---\nmodel: openai/m\n---\nBe brief.\n")
    return tmp_path / "brief"


def _answer(process: Process) -> tuple[int, str]:
    reply = httpx.post(f"{process.url}/v1/chat/completions", json=HI, timeout=30)
    return reply.status_code, reply.json()["choices"][0]["message"]["content"]


def test_serve_closes_idle_and_slow_connections_and_serves_real_callers(
    tmp_path: Path,
) -> None:
    """More idle connections than the process has files, and some that trickle header bytes:
    a normal request is still answered, the server closes every idle and slow connection,
    and the log says so in a line each instead of a traceback per refused accept."""
    idle_count = FILE_LIMIT + 72
    args = ["serve", str(_agent(tmp_path)), "--offline", "--header-timeout", "1"]
    with running(args, child_env(tmp_path), wrapper=LIMITED) as process, ExitStack() as stack:
        assert (
            f"  connections: at most {CAP} open (ulimit -n 128 allows fewer than "
            "--max-connections 1000); a request head within 1 s, its body within 30 s more; "
            "idle ones closed after 5 s\n"
        ) in process.output
        idle = [_connect(process) for _ in range(idle_count)]
        for sock in idle:
            stack.callback(sock.close)
        slow = stack.enter_context(_trickling(process, 8))

        assert _answer(process) == (200, OFFLINE_HI)

        assert [_closed_by_server(sock) for sock in idle] == [True] * idle_count
        assert [_closed_by_server(sock) for sock in slow] == [True] * 8
        assert _answer(process) == (200, OFFLINE_HI)
        output = process.output

    assert "Traceback" not in output
    lines = _server_lines(output)
    assert [line for line in lines if not SUMMARY.fullmatch(line)] == [EVICTING, TIMED_OUT]
    assert len(lines) <= 6  # a summary a minute at most, should the test run that long


def _busy(process: Process) -> socket.socket:
    """A connection with a request in progress: its head is in, its body not yet."""
    sock = _connect(process)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n"
    )
    # uvicorn says 100 Continue once the app reads the body: the request is surely running.
    assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
    return sock


def test_serve_beyond_max_connections_all_busy_is_503_at_once(tmp_path: Path) -> None:
    args = ["serve", str(_agent(tmp_path)), "--offline", "--max-connections", "2"]
    with running(args, child_env(tmp_path)) as process:
        busy = [_busy(process), _busy(process)]
        refusals = []
        for sends_request in (False, False, False, True, True, True):
            with _connect(process) as sock:
                if sends_request:  # as clients do: the refusal must not become a reset
                    sock.sendall(REQUEST)
                refusals.append(b"".join(iter(lambda s=sock: s.recv(4096), b"")))
        head, body = refusals[0].split(b"\r\n\r\n", 1)
        assert head.split(b"\r\n") == [
            b"HTTP/1.1 503 Service Unavailable",
            b"content-type: application/json",
            f"content-length: {len(body)}".encode(),
            b"retry-after: 1",
            b"connection: close",
        ]
        assert json.loads(body) == {
            "error": {
                "message": "the server is at its limit of 2 open connections and all are "
                "busy; try again shortly",
                "type": "server_error",
                "param": None,
                "code": "too_many_connections",
            }
        }
        assert refusals == [refusals[0]] * 6

        busy.pop().close()  # room again, once the server has seen it go
        process.wait_until(lambda: _answer(process) == (200, OFFLINE_HI))
        busy[0].close()
        output = process.output

    assert (
        _server_lines(output).count(
            "WARNING webagents.server: 2 connections are open, the limit (--max-connections), "
            "and every one is busy with a request: new connections are answered 503"
        )
        == 1
    )
    assert "Traceback" not in output, output


def _printed_cap(output: str) -> int:
    found = re.search(r"\n  connections: at most (\d+) open ", output)
    assert found, output
    return int(found.group(1))


def _health_on(sock: socket.socket) -> tuple[bytes, object]:
    """`GET /health` on an open connection (kept open): the status line and the body."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    return _response_on(sock)


def _response_on(sock: socket.socket) -> tuple[bytes, object]:
    """The next response on an open connection: its status line and its body (JSON where it
    has a length); `<closed>` in their place where the server closed the connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(4096) or b"<closed>\r\n\r\n"
    head, body = received.split(b"\r\n\r\n", 1)
    length = re.search(rb"\r\ncontent-length: (\d+)", head)
    while length and len(body) < int(length.group(1)):
        body += sock.recv(4096) or b"<closed>"
    return head.split(b"\r\n")[0], json.loads(body) if length else body


def _closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (the close is in before anything answered after)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def test_serve_the_connection_cap_is_exactly_the_printed_number(tmp_path: Path) -> None:
    """Second review, finding 1: with as many idle connections open as the printed cap, the
    oldest was closed at once: asyncio calls accept until none is waiting, and the guard
    made room at every such call at the cap. Now the printed number of idle connections stay
    open, and one more closes the longest-idle one, only then."""
    args = ["serve", str(_agent(tmp_path)), "--offline"]
    health = (b"HTTP/1.1 200 OK", {"status": "ok", "agents": 1})
    with running(args, child_env(tmp_path), wrapper=LIMITED) as process, ExitStack() as stack:
        cap = _printed_cap(process.output)
        assert cap == CAP
        idle = [_connect(process) for _ in range(cap - 1)]
        for sock in idle:
            stack.callback(sock.close)
        # Answered: the server has started them all (they are idle, it is not busy).
        assert _health_on(idle[-1]) == health
        idle.append(stack.enter_context(_connect(process)))  # the cap-th
        assert _health_on(idle[-1]) == health
        assert [i for i, sock in enumerate(idle) if _closed(sock)] == []

        with _connect(process) as beyond:  # one more: the longest-idle one makes room
            assert _health_on(beyond) == health
            assert [i for i, sock in enumerate(idle) if _closed(sock)] == [0]

    output = process.output  # all of it: the process has ended
    assert "Traceback" not in output, output
    assert _server_lines(output) == [EVICTING]


def _send(sock: socket.socket, request: bytes) -> None:
    """Send `request` at once, whatever comes back meanwhile."""
    try:
        sock.sendall(request)
    except OSError:
        pass  # answered and closed before the end of the request: the answer may be in


def _outcome_of(sock: socket.socket) -> bytes | str:
    """All that `sock` receives until the server closes it, or the error that ended it."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except OSError as exc:
        return f"{type(exc).__name__} after {received!r}"
    return received


def _refusal_of(cap: int) -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": f"the server is at its limit of {cap} open connections and all are "
                "busy; try again shortly",
                "type": "server_error",
                "param": None,
                "code": "too_many_connections",
            }
        },
        separators=(",", ":"),
    ).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nretry-after: 1\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


def test_serve_all_busy_new_connections_sending_at_once_all_read_the_503(
    tmp_path: Path,
) -> None:
    """Second review, finding 1: a refused connection was closed right after its 503, so a
    request that arrived meanwhile, or more of it than was read at once, made the close a
    reset that destroyed the 503. Now the server ends its side after the 503 and reads and
    drops what the client still sends: each reads the whole 503, whatever it sent."""
    history = [{"role": "user", "content": "x" * 1000}] * 2000  # a long conversation: 2 MB
    big = json.dumps({**HI, "messages": [*history, *HI["messages"]]}).encode()
    big_request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(big), big)
    )
    args = ["serve", str(_agent(tmp_path)), "--offline"]
    with running(args, child_env(tmp_path), wrapper=LIMITED) as process, ExitStack() as stack:
        busy = [_busy(process) for _ in range(CAP)]
        for sock in busy:
            stack.callback(sock.close)
        new = [stack.enter_context(_connect(process)) for _ in range(10)]
        outcomes = []
        for index, sock in enumerate(new):  # as clients do: send the request, then read
            _send(sock, REQUEST if index % 2 else big_request)
            outcomes.append(_outcome_of(sock))
        assert outcomes == [_refusal_of(CAP)] * 10

    output = process.output  # all of it: the process has ended
    assert "Traceback" not in output, output
    assert [line for line in _server_lines(output) if not SUMMARY.fullmatch(line)] == [
        f"WARNING webagents.server: {CAP} connections are open, the limit (--max-connections), "
        "and every one is busy with a request: new connections are answered 503"
    ]


def _parsed(outcome: bytes | str) -> tuple[bytes, object]:
    """A response read to the close: its status line, and its text (200) or body (others)."""
    if isinstance(outcome, str) or b"\r\n\r\n" not in outcome:
        return b"no response", outcome
    head, body = outcome.split(b"\r\n\r\n", 1)
    status, document = head.split(b"\r\n")[0], json.loads(body)
    if status == b"HTTP/1.1 200 OK":
        return status, document["choices"][0]["message"]["content"]
    return status, document


def test_serve_new_connections_whose_request_is_in_are_not_closed_as_idle(
    tmp_path: Path,
) -> None:
    """Second review, finding 1: with a few places left, new connections that each sent a
    request at once were closed for one another as idle (their requests not read yet), with
    no answer or a reset. Now those whose request is in keep their places and are answered;
    the rest are answered 503."""
    release = threading.Event()

    async def held(request: ModelRequest) -> str:
        # Polled: the test's thread sets it, and an asyncio.Event is the server thread's.
        while not release.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return "done"

    free = 2
    request = REQUEST.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    with ScriptedServer(FunctionModel(held)) as model, ExitStack() as stack:
        env = child_env(tmp_path, OPENAI_BASE_URL=model.base_url)
        args = ["serve", str(_agent(tmp_path))]
        process = stack.enter_context(running(args, env, wrapper=LIMITED))
        for _ in range(CAP - free):
            stack.enter_context(_busy(process))
        new = []
        for _ in range(8):  # each sends its request as it connects
            new.append(stack.enter_context(_connect(process)))
            _send(new[-1], request)
        try:  # until the requests given a place wait on the model
            process.wait_until(lambda: len(model.bodies) >= free, timeout=20)
        except AssertionError:
            pass  # told by the outcomes
        finally:
            release.set()
        outcomes = sorted((_parsed(_outcome_of(sock)) for sock in new), key=lambda o: o[0])

    assert outcomes == [(b"HTTP/1.1 200 OK", "done")] * free + [_parsed(_refusal_of(CAP))] * (
        8 - free
    )
    output = process.output  # all of it: the process has ended
    assert "Traceback" not in output, output


BODY_TIMED_OUT = (
    "WARNING webagents.server: answered 408 and closed a connection whose request body did "
    "not arrive in full within 1 s of its head (--body-timeout)"
)


def _read_to_close(sock: socket.socket) -> bytes | None:
    """All the server sends until it closes the connection; None if it does not close it
    within the socket's timeout."""
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        return None
    return received


def test_serve_a_request_body_that_trickles_is_answered_408_and_closed(
    tmp_path: Path,
) -> None:
    """Review finding 1: connections that sent a request head, then its body a byte at a
    time, held every connection for as long as they kept trickling, and each new caller got
    503. Now the body has --body-timeout seconds from the head, whatever trickles in."""
    # Room for the three, and for the start's health check, which may not be seen gone yet.
    args = ["serve", str(_agent(tmp_path)), "--offline", "--max-connections", "4"]
    with running([*args, "--body-timeout", "1"], child_env(tmp_path)) as process:
        slow = [_connect(process) for _ in range(3)]
        for sock in slow:
            sock.settimeout(15)
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
        with _sending_slowly(slow, b"x" * 10_000):
            answers = [_read_to_close(sock) for sock in slow]
        assert answers[0] is not None, "the server never closed the connection"
        head, body = answers[0].split(b"\r\n\r\n", 1)
        assert head.split(b"\r\n") == [
            b"HTTP/1.1 408 Request Timeout",
            b"content-type: application/json",
            f"content-length: {len(body)}".encode(),
            b"connection: close",
        ]
        assert json.loads(body) == {
            "error": {
                "message": "the request body did not arrive in full within 1 s of the "
                "request head (this server's --body-timeout); send it at once, or send a "
                "smaller one",
                "type": "invalid_request_error",
                "param": None,
                "code": "request_timeout",
            }
        }
        assert answers == [answers[0]] * 3
        with _connect(process):  # the fourth: the connections are busy no more
            assert _answer(process) == (200, OFFLINE_HI)
        for sock in slow:
            sock.close()
        output = process.output

    assert "Traceback" not in output, output
    evicting = (  # a closed one may still be seen as open, idle: its room is taken
        "WARNING webagents.server: 4 connections are open, the limit (--max-connections): "
        "closing the longest-idle ones to make room for new ones"
    )
    lines = [line for line in _server_lines(output) if line != evicting]
    assert [line for line in lines if not SUMMARY.fullmatch(line)] == [BODY_TIMED_OUT]


def test_serve_a_response_sent_before_its_body_was_read_ends_the_connection(
    tmp_path: Path,
) -> None:
    """Review finding 1: `GET /health` with a Content-Length, answered at once; its client
    went on sending the body a byte at a time and the connection stayed open and "busy",
    holding a connection forever. Now the response ends the connection, whatever the body
    and keep-alive timeouts, and meanwhile it counts as idle (room for a new caller)."""
    args = ["serve", str(_agent(tmp_path)), "--offline", "--max-connections", "1"]
    timeouts = ["--body-timeout", "600", "--keep-alive-timeout", "600"]
    with running([*args, *timeouts], child_env(tmp_path)) as process:
        with _connect(process) as sock:
            sock.settimeout(15)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
            with _sending_slowly([sock], b"x" * 10_000):
                received = _read_to_close(sock)
                assert received is not None, "the server never closed the connection"
                assert _answer(process) == (200, OFFLINE_HI)  # the only connection's room
        head, body = received.split(b"\r\n\r\n", 1)
        assert (head.split(b"\r\n")[0], json.loads(body)) == (
            b"HTTP/1.1 200 OK",
            {"status": "ok", "agents": 1},
        )
        output = process.output

    assert "Traceback" not in output, output
    evicting = (
        "WARNING webagents.server: 1 connections are open, the limit (--max-connections): "
        "closing the longest-idle ones to make room for new ones"
    )
    assert set(_server_lines(output)) <= {evicting}  # closed for room, or already gone


def test_serve_a_body_that_ends_after_its_early_response_leaves_the_connection_reusable(
    tmp_path: Path,
) -> None:
    """A request answered before its body was read (a 404 answered from the head, the body
    still in flight: httpx sends them in two writes) keeps its keep-alive connection when the
    body then ends: the client's next request on it is answered, not dropped. (It had been
    half-closed at the response, without `Connection: close`: the client sent its next
    request into a closing connection, "Server disconnected without sending a response",
    now and then in test_mcp_http's daemon test.)"""
    args = ["serve", str(_agent(tmp_path)), "--offline"]
    body = b'{"jsonrpc": "2.0"}'
    head = f"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with running(args, child_env(tmp_path)) as process:
        # The body, then the next request (two writes), and the body with the next request
        # pipelined behind it (one write).
        for rest in ([body, health], [body + health]):
            with _connect(process) as sock:
                sock.settimeout(15)
                sock.sendall(head.encode())
                status, _ = _response_on(sock)  # answered from the head alone
                assert status == b"HTTP/1.1 404 Not Found"
                for data in rest:
                    sock.sendall(data)
                assert _response_on(sock) == (b"HTTP/1.1 200 OK", {"status": "ok", "agents": 1})
        output = process.output
    assert "Traceback" not in output, output


def test_serve_a_malformed_body_after_its_early_response_ends_the_connection_quietly(
    tmp_path: Path,
) -> None:
    """The rest of an answered request's body is still read by h11: a chunked body that
    turns out malformed ends the connection, with no second response (one cannot follow the
    first) and no traceback in the log."""
    args = ["serve", str(_agent(tmp_path)), "--offline"]
    with running(args, child_env(tmp_path)) as process:
        with _connect(process) as sock:
            sock.settimeout(15)
            sock.sendall(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            status, _ = _response_on(sock)
            assert status == b"HTTP/1.1 404 Not Found"
            sock.sendall(b"not a chunk size\r\n\r\n")
            assert _read_to_close(sock) == b"", "no second response, then the close"
        assert _answer(process) == (200, OFFLINE_HI)  # the server serves on
        output = process.output
    assert "Traceback" not in output, output
    assert "Fatal error" not in output, output


def _streamed_text(process: Process) -> tuple[int, str, str]:
    """A streamed answer: its status, its text, and its last event."""
    with httpx.stream(
        "POST", f"{process.url}/v1/chat/completions", json={**HI, "stream": True}, timeout=60
    ) as reply:
        events = [line.removeprefix("data: ") for line in reply.iter_lines() if line]
    text = "".join(
        choice["delta"].get("content", "")
        for event in events[:-1]
        for choice in json.loads(event)["choices"]
    )
    return reply.status_code, text, events[-1]


def test_serve_the_body_timeout_never_cuts_off_a_long_answer(tmp_path: Path) -> None:
    """The body deadline ends when the body is in: an answer that takes longer than it, streamed
    or not, comes whole. The model answers only once the body timeout has cut off another
    connection that sent a head and no body (so the answer outlasted the deadline)."""
    answer = "an answer that took longer than the body timeout"
    served: list[Process] = []
    cut_off: list[bytes | None] = []

    def another_connection_cut_off() -> None:
        with _connect(served[0]) as sock:
            sock.settimeout(15)
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            cut_off.append(_read_to_close(sock))

    async def slow(request: ModelRequest) -> str:
        await asyncio.to_thread(another_connection_cut_off)
        return answer

    with ScriptedServer(FunctionModel(slow)) as model:
        env = child_env(tmp_path, OPENAI_BASE_URL=model.base_url)
        args = ["serve", str(_agent(tmp_path)), "--body-timeout", "1"]
        with running(args, env) as process:
            served.append(process)
            assert _streamed_text(process) == (200, answer, "[DONE]")
            assert _answer(process) == (200, answer)
            output = process.output
    assert [(cut or b"").split(b"\r\n")[0] for cut in cut_off] == [
        b"HTTP/1.1 408 Request Timeout"
    ] * 2
    lines = _server_lines(output)  # the second cut-off is counted, not said again
    assert [line for line in lines if not SUMMARY.fullmatch(line)] == [BODY_TIMED_OUT]


def _outcome(reply: httpx.Response) -> tuple[int, object]:
    body = reply.json()
    if reply.status_code == 200:
        return 200, body["choices"][0]["message"]["content"]
    return reply.status_code, body


def test_serve_busy_requests_leave_descriptors_for_their_model_connections(
    tmp_path: Path,
) -> None:
    """Review finding 2: with `ulimit -n 128` the server took 96 connections, and as many
    requests waiting on the model each held a second descriptor (their connection to the
    model): the process ran out of them, and turns failed with 500 and a traceback each. Now
    the cap leaves a descriptor beside each connection: 48 requests wait on the model, and
    a connection beyond is answered 503 at once; each of the 48 is answered when it returns."""
    release = threading.Event()

    async def held(request: ModelRequest) -> str:
        # Polled: the test's thread sets it, and an asyncio.Event is the server thread's.
        while not release.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return "done"

    folder = _agent(tmp_path)
    write(folder / "AGENT.md", "---\nmodel: openai/m\nskills: [memory]\n---\nBe brief.\n")
    outcomes: dict[int, tuple[int, object] | str] = {}

    def call(index: int, url: str) -> None:
        try:
            reply = httpx.post(f"{url}/v1/chat/completions", json=HI, timeout=60)
            outcomes[index] = _outcome(reply)
        except httpx.HTTPError as exc:
            outcomes[index] = type(exc).__name__

    threads: list[threading.Thread] = []
    with ScriptedServer(FunctionModel(held)) as model:
        env = child_env(tmp_path, OPENAI_BASE_URL=model.base_url)
        with running(["serve", str(folder)], env, wrapper=LIMITED) as process:
            try:
                for index in range(CAP + 12):
                    waiting = len(model.bodies)
                    thread = threading.Thread(target=call, args=(index, process.url))
                    threads.append(thread)
                    thread.start()
                    try:  # until it waits on the model too, or is answered
                        process.wait_until(
                            lambda i=index, w=waiting: len(model.bodies) > w or i in outcomes,
                            timeout=20,
                        )
                    except AssertionError:
                        break  # stuck: the rest would be too
                waiting = len(model.bodies)
            finally:
                release.set()
                for thread in threads:
                    thread.join(timeout=60)
            output = process.output

    refused = (
        503,
        {
            "error": {
                "message": f"the server is at its limit of {CAP} open connections and all "
                "are busy; try again shortly",
                "type": "server_error",
                "param": None,
                "code": "too_many_connections",
            }
        },
    )
    assert waiting == CAP
    assert [outcomes.get(i) for i in range(CAP + 12)] == [(200, "done")] * CAP + [refused] * 12
    assert "Traceback" not in output, output


def test_serve_upgrade_requests_are_answered_and_logged_once(tmp_path: Path) -> None:
    """Review finding 8: uvicorn warned twice for each request with an Upgrade header (it
    speaks no WebSocket here): a client could write the log full. Now one line says so;
    the requests are answered as ordinary ones."""
    with running(["serve", str(_agent(tmp_path)), "--offline"], child_env(tmp_path)) as process:
        answers = []
        for _ in range(20):
            with _connect(process) as sock:
                sock.sendall(
                    b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\n"
                    b"Upgrade: websocket\r\n\r\n"
                )
                received = _read_to_close(sock)
                assert received is not None, "the server never closed the connection"
                head, body = received.split(b"\r\n\r\n", 1)
                answers.append((head.split(b"\r\n")[0], json.loads(body)))
        output = process.output

    assert answers == [(b"HTTP/1.1 200 OK", {"status": "ok", "agents": 1})] * 20
    assert _server_lines(output) == [
        "WARNING webagents.server: ignored a request's Upgrade header (this server speaks plain "
        "HTTP/1.1, no WebSocket): the request is answered as an ordinary one"
    ]


def _serve_fails(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [webagents_command(), "serve", str(_agent(tmp_path)), *args],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_without_a_model_key_suggests_offline(tmp_path: Path) -> None:
    done = _serve_fails(tmp_path, "--port", "0")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "error: no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or "
        "OPENAI_BASE_URL (for a compatible server such as vLLM, Ollama or llama.cpp); or "
        "serve the offline scripted model: --offline\n",
    )


def test_serve_a_port_in_use_suggests_another_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve_fails(tmp_path, "--offline", "--port", str(port))
    assert (done.returncode, done.stderr) == (
        1,
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use; another program "
        f"(another webagents serve?) is using port {port}: choose another with --port, or "
        "--port 0 for any free one\n",
    )


def test_serve_a_port_out_of_range_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    done = _serve_fails(tmp_path, "--offline", "--port", "99999")
    assert (done.returncode, done.stdout, done.stderr.splitlines()[-1]) == (
        2,
        "",
        "Error: Invalid value for '--port': 99999 is not in the range 0<=x<=65535.",
    )
    assert "Traceback" not in done.stderr


def test_serve_offline_names_the_memory_phrases_and_they_work(tmp_path: Path) -> None:
    """`serve --offline` of an agent with the memory skill says how to make the offline model
    keep a note, and saying so over HTTP keeps it (in the owner's namespace for the owner key)."""
    from webagents.offline import OFFLINE_MEMORY_HINT

    folder = _agent(tmp_path)
    write(
        folder / "AGENT.md",
        "---\nmodel: openai/m\nskills: [memory]\naccess:\n  owner: env:OWNER_KEY\n---\nHi.\n",
    )
    env = child_env(tmp_path, OWNER_KEY="owner-secret")
    with running(["serve", str(folder), "--offline"], env) as process:
        assert OFFLINE_MEMORY_HINT in process.output.splitlines()
        reply = httpx.post(
            f"{process.url}/v1/chat/completions",
            headers={"Authorization": "Bearer owner-secret"},
            json={
                "model": "any",
                "messages": [{"role": "user", "content": "remember that the launch is Friday"}],
            },
            timeout=60,
        )
    assert reply.status_code == 200, reply.text
    notes = list((folder / ".webagents" / "memory" / "owner").glob("*.md"))
    assert len(notes) == 1
    assert "the launch is Friday" in notes[0].read_text(encoding="utf-8")
