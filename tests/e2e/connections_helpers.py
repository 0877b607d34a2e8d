"""Connections to a served agent in tests: raw sockets, trickled requests and the server's log."""

from __future__ import annotations

import re
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .serving import Process

# The served process's `ulimit -n`: 32 kept for its files, then 48 connections and beside
# each a descriptor for the connection to the model that its request may hold.
FILE_LIMIT = 128


CAP = 48


LIMITED = [
    sys.executable,
    "-c",
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FILE_LIMIT}, {FILE_LIMIT})); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]


EVICTING = (
    f"WARNING webagents.server: {CAP} connections are open, the limit (--max-connections): "
    "closing the longest-idle ones to make room for new ones"
)


TIMED_OUT = (
    "WARNING webagents.server: closed a connection that sent no complete request head "
    "within 1 s (--header-timeout)"
)


SUMMARY = re.compile(
    r"WARNING webagents\.server: (connection limit|header timeout|body timeout): \d+ more .* "
    r"in the last 60 s"
)


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


@contextmanager
def _sending_slowly(sockets: list[socket.socket], data: bytes) -> Iterator[None]:
    """Each of `sockets` sends `data` one byte every 0.1 s, until the server closes it."""
    stop = threading.Event()

    def trickle(sock: socket.socket) -> None:
        for byte in data:
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
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


@contextmanager
def _trickling(process: Process, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send a request head one byte at a time and never finish it."""
    sockets = [_connect(process) for _ in range(count)]
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    try:
        with _sending_slowly(sockets, head):
            yield sockets
    finally:
        for sock in sockets:
            sock.close()


def _server_lines(output: str) -> list[str]:
    """What the server logged after it started, less uvicorn's own INFO lines."""
    after = output.split("(Ctrl-C stops)\n", 1)[1]
    return [line for line in after.splitlines() if not line.startswith("INFO:")]
