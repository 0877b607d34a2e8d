"""Bounds on the connections a served agent holds, so that idle or slow clients cannot starve it.

uvicorn (with h11) closes a connection only after a response plus `timeout_keep_alive`: a
client that connects and sends nothing, or trickles header bytes, is held forever, and each
one holds a file descriptor. Once the process runs out of them asyncio logs a traceback for
every refused accept, and the agent cannot open its own files. Here:

- a connection must send a complete request head within `header_timeout` seconds of opening
  (or of its previous response), however many bytes it trickles;
- at most `max_connections` are open, fewer where the file limit (`ulimit -n`) needs it, with
  a reserve of descriptors kept for the agent's own files. A new connection beyond the cap
  closes the longest-idle one (no request in progress) to make room, or, when every one is
  busy with a request, is answered 503 at once. The listening socket checks the cap before
  each accept, so descriptors never run out through connections, not even in a burst;
- a flood of such events is logged once, then counted at most once a minute, and asyncio's
  "out of system resource" accept errors (with a traceback each) are reported the same way.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..openai_wire import error_body

log = logging.getLogger("webagents.server")

# Descriptors kept out of the cap for the agent's own files (notes, index, sessions, logs).
MIN_RESERVED_FILES = 32
FLOOD_SUMMARY_SECONDS = 60.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(frozen=True)
class ConnectionLimits:
    """The server options of the same names (their defaults are the CLI's)."""

    max_connections: int
    header_timeout: float
    keep_alive_timeout: int


def file_limit() -> int:
    """The process's soft limit on open files (`ulimit -n`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(requested: int, files: int) -> int:
    """How many connections may be open: `requested`, less where `files` must keep a reserve."""
    return min(requested, files - max(MIN_RESERVED_FILES, files // 8))


class FloodLog:
    """Logs the first of a kind of event, then only how many more came, at most once every
    `every` seconds: thousands of identical lines would bury everything else in the log."""

    def __init__(
        self,
        first: str,
        summary: str,
        *,
        every: float = FLOOD_SUMMARY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self._first = first
        self._summary = summary  # formatted with the count and the interval
        self._every = every
        self._clock = clock
        self._log = logger
        self._unreported = 0
        self._reported_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def event(self, *args: object) -> None:
        now = self._clock()
        since = None if self._reported_at is None else now - self._reported_at
        if since is None or (since >= self._every and not self._unreported):
            self._reported_at = now  # a new flood (or the first): say what it is
            self._log.warning(self._first, *args)
            return
        self._unreported += 1
        if since >= self._every:
            self.flush()
        elif self._timer is None:
            try:  # so that the count of a flood that stops is still told
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(self._every - since, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._unreported:
            self._log.warning(self._summary, self._unreported, round(self._every))
            self._unreported = 0
            self._reported_at = self._clock()


class AcceptErrors(logging.Filter):
    """On the `asyncio` logger: its accept errors for lack of descriptors, as a FloodLog."""

    def __init__(self, files: int) -> None:
        super().__init__()
        self.flood = FloodLog(
            f"cannot accept new connections: %s (the file limit is {files}); they wait until "
            "others close. Lower --max-connections or raise the limit (ulimit -n)",
            "cannot accept new connections: %d more times in the last %d s",
        )

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if (
            isinstance(exc, OSError)
            and exc.errno in _OUT_OF_RESOURCES
            and str(record.msg).startswith("socket.accept()")
        ):
            self.flood.event(exc.strerror)
            return False
        return True


class ConnectionGuard:
    """The cap on open connections and the order in which idle ones are closed for room."""

    def __init__(self, limits: ConnectionLimits, cap: int) -> None:
        self.limits = limits
        self.cap = cap
        self._sockets: set[socket.socket] = set()  # accepted; closed ones pruned when counted
        self._connections: set[_GuardedH11] = set()  # started and not yet lost
        self._idle: dict[_GuardedH11, None] = {}  # waiting for a request head, oldest first
        self._refusal = _refusal(cap)
        self.evicted = FloodLog(
            f"{cap} connections are open, the limit (--max-connections): closing the "
            "longest-idle ones to make room for new ones",
            "connection limit: %d more idle connections closed in the last %d s",
        )
        self.refused = FloodLog(
            f"{cap} connections are open, the limit (--max-connections), and every one is "
            "busy with a request: new connections are answered 503",
            "connection limit: %d more connections answered 503 in the last %d s",
        )
        self.timed_out = FloodLog(
            "closed a connection that sent no complete request head within "
            f"{limits.header_timeout:g} s (--header-timeout)",
            "header timeout: %d more connections closed in the last %d s",
        )

    def listen_on(self, sock: socket.socket) -> socket.socket:
        """`sock` (bound, not yet listening) as one whose accepts keep to the cap."""
        guarded = _GuardedSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        guarded.guard = self
        return guarded

    def protocol(self) -> type[asyncio.Protocol]:
        """uvicorn's h11 protocol class with the header timeout, for this guard."""
        guard = self

        class Guarded(_GuardedH11):
            _guard = guard

        return Guarded

    def _full(self) -> bool:
        if len(self._sockets) >= self.cap:
            self._sockets = {sock for sock in self._sockets if sock.fileno() != -1}
        return len(self._sockets) >= self.cap

    def accept(self, accept: Callable[[], tuple[socket.socket, Any]]) -> tuple[socket.socket, Any]:
        while self._full():
            if self._idle:
                oldest = next(iter(self._idle))
                self._idle.pop(oldest)
                oldest.close_idle()
                self.evicted.event()
                # Its descriptor is freed in the loop's next turn; accept then.
                raise BlockingIOError(errno.EAGAIN, "making room for a new connection")
            if len(self._sockets) > len(self._connections):
                # Accepted in a burst, not yet started: whether they are idle shows soon.
                raise BlockingIOError(errno.EAGAIN, "waiting for new connections to start")
            conn, _ = accept()  # raises BlockingIOError once none wait
            self._refuse(conn)
        conn, address = accept()
        self._sockets.add(conn)
        return conn, address

    def _refuse(self, conn: socket.socket) -> None:
        self.refused.event()
        conn.setblocking(False)
        try:
            conn.send(self._refusal)
        except OSError:
            pass  # the client is gone already; nothing to tell
        conn.close()

    def started(self, connection: _GuardedH11) -> None:
        self._connections.add(connection)
        self.became_idle(connection)

    def lost(self, connection: _GuardedH11) -> None:
        self._connections.discard(connection)
        self._idle.pop(connection, None)

    def became_idle(self, connection: _GuardedH11) -> None:
        self._idle.pop(connection, None)
        self._idle[connection] = None

    def became_busy(self, connection: _GuardedH11) -> None:
        self._idle.pop(connection, None)


def _refusal(cap: int) -> bytes:
    body = orjson.dumps(
        error_body(
            f"the server is at its limit of {cap} open connections and all are busy; "
            "try again shortly",
            "server_error",
            "too_many_connections",
        )
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _GuardedSocket(socket.socket):
    guard: ConnectionGuard

    def accept(self) -> tuple[socket.socket, Any]:
        return self.guard.accept(super().accept)


class _GuardedH11(H11Protocol):
    """h11 with a deadline on each request head: armed when the connection opens and after
    each response, cleared once the head is in, and not moved by bytes that trickle in."""

    _guard: ClassVar[ConnectionGuard]
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._guard.started(self)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
            self._head_in()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_in()
        self._guard.lost(self)
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # The connection goes to another protocol; this one never hears of it again.
        self._head_in()
        self._guard.lost(self)
        super().handle_websocket_upgrade(event)

    def _await_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(
            self._guard.limits.header_timeout, self._head_timed_out
        )
        self._guard.became_idle(self)

    def _head_in(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._guard.became_busy(self)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._guard.became_busy(self)
        if not self.transport.is_closing():
            self._guard.timed_out.event()
            self.close_idle()

    def close_idle(self) -> None:
        """Close a connection that has no request in progress."""
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if self.transport.is_closing():
            return
        try:
            self.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:
            pass  # half a request head came: there is nothing to end cleanly
        self.transport.close()
