"""`webagents serve` as a process against idle, slow and surplus connections, and what a new
user meets when it cannot start (issue 11: hardening and a new user's friction)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from .conftest import child_env, webagents_command
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

FILE_LIMIT = 128  # the served process's `ulimit -n`: 96 connections, 32 kept for its files
LIMITED = [
    sys.executable,
    "-c",
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FILE_LIMIT}, {FILE_LIMIT})); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]
HI = {"model": "brief", "messages": [{"role": "user", "content": "hi"}]}
OFFLINE_HI = (
    "(offline scripted model, turn 1) You said: 'hi'. I can't think offline, but everything "
    "around me works: the chat, the slash commands and my skills' tools."
)
EVICTING = (
    "WARNING webagents.server: 96 connections are open, the limit (--max-connections): "
    "closing the longest-idle ones to make room for new ones"
)
TIMED_OUT = (
    "WARNING webagents.server: closed a connection that sent no complete request head "
    "within 1 s (--header-timeout)"
)
SUMMARY = re.compile(
    r"WARNING webagents\.server: (connection limit|header timeout): \d+ more .* in the last 60 s"
)


def _agent(tmp_path: Path) -> Path:
    write(tmp_path / "brief" / "AGENT.md", "---\nmodel: openai/m\n---\nBe brief.\n")
    return tmp_path / "brief"


def _connect(process: Process) -> socket.socket:
    host, port = process.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes (bounded by the socket's timeout); True if it did."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def _answer(process: Process) -> tuple[int, str]:
    reply = httpx.post(f"{process.url}/v1/chat/completions", json=HI, timeout=30)
    return reply.status_code, reply.json()["choices"][0]["message"]["content"]


@contextmanager
def _trickling(process: Process, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send a request head one byte at a time and never finish it."""
    stop = threading.Event()
    sockets = [_connect(process) for _ in range(count)]

    def trickle(sock: socket.socket) -> None:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
        for byte in head:
            if stop.wait(0.1):
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return  # closed by the server

    threads = [threading.Thread(target=trickle, args=(sock,), daemon=True) for sock in sockets]
    for thread in threads:
        thread.start()
    try:
        yield sockets
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for sock in sockets:
            sock.close()


def _server_lines(output: str) -> list[str]:
    """What the server logged after it started, less uvicorn's own INFO lines."""
    after = output.split("(Ctrl-C stops)\n", 1)[1]
    return [line for line in after.splitlines() if not line.startswith("INFO:")]


def test_hardening_idle_and_slow_connections_are_closed_and_real_callers_served(
    tmp_path: Path,
) -> None:
    """More idle connections than the process has files, and some that trickle header bytes:
    a normal request is still answered, the server closes every idle and slow connection,
    and the log says so in a line each instead of a traceback per refused accept."""
    idle_count = FILE_LIMIT + 72
    args = ["serve", str(_agent(tmp_path)), "--offline", "--header-timeout", "1"]
    with running(args, child_env(tmp_path), wrapper=LIMITED) as process, ExitStack() as stack:
        assert (
            "  connections: at most 96 open (ulimit -n 128 allows fewer than --max-connections "
            "1000); a request head within 1 s; idle ones closed after 5 s\n"
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


def test_hardening_beyond_max_connections_all_busy_is_503_at_once(tmp_path: Path) -> None:
    args = ["serve", str(_agent(tmp_path)), "--offline", "--max-connections", "2"]
    with running(args, child_env(tmp_path)) as process:
        busy = [_busy(process), _busy(process)]
        refusals = []
        for _ in range(3):
            with _connect(process) as sock:
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
        assert refusals == [refusals[0]] * 3

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


def _serve_fails(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [webagents_command(), "serve", str(_agent(tmp_path)), *args],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hardening_serve_without_a_model_key_suggests_offline(tmp_path: Path) -> None:
    done = _serve_fails(tmp_path, "--port", "0")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "error: no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or "
        "OPENAI_BASE_URL (for a compatible server such as vLLM, Ollama or llama.cpp); or "
        "serve the offline scripted model: --offline\n",
    )


def test_hardening_a_port_in_use_suggests_another_port(tmp_path: Path) -> None:
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


def test_hardening_a_port_out_of_range_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    done = _serve_fails(tmp_path, "--offline", "--port", "99999")
    assert (done.returncode, done.stdout, done.stderr.splitlines()[-1]) == (
        2,
        "",
        "Error: Invalid value for '--port': 99999 is not in the range 0<=x<=65535.",
    )
    assert "Traceback" not in done.stderr


def test_hardening_serve_offline_names_the_memory_phrases_and_they_work(tmp_path: Path) -> None:
    """`serve --offline` of an agent with the memory skill says how to make the offline model
    keep a note, and saying so over HTTP keeps it (in the owner's namespace for the owner key)."""
    from webagents.testing import OFFLINE_MEMORY_HINT

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
