"""Bounds on the connections a served agent holds, so that idle or slow clients cannot starve it.

uvicorn (with h11) closes a connection only after a response plus `timeout_keep_alive`, and
every byte that comes in cancels that timer: a client that connects and sends nothing, or
trickles header or body bytes, is held forever, and each one holds a file descriptor. Once the
process runs out of them asyncio logs a traceback for every refused accept, and the agent
cannot open its own files nor connect to its model. Here:

- a connection must send a complete request head within `header_timeout` seconds of opening
  (or of its previous response), and then the request's whole body within `body_timeout`
  seconds of the head, however many bytes it trickles; a body too late is answered 408 and
  the connection closed. The body deadline ends when the body is in: a long answer is never
  cut off by it;
- a response sent before its request's body was read to the end (a 404, `/health` with a
  body, a body still in flight when the app answered) leaves the connection reading the rest
  of that body, dropped, for a moment: a body that ends within it (the common case, a small
  body sent just after its head) leaves the connection carrying the client's next request as
  any other; one that does not ends the connection. Meanwhile it counts as idle;
- at most `max_connections` are open, fewer where the file limit (`ulimit -n`) needs it: a
  reserve of descriptors is kept for the agent's own files, and half the rest for the
  connection to the model that each busy request holds while it waits for an answer. A new
  connection beyond the cap closes the longest-idle one (no request in progress, and none
  arriving in its socket) to make room, or, when every one is busy with a request, is
  answered 503 at once. The listening socket checks the cap at each accept, and closes a
  connection for room only once a new one is accepted (asyncio calls accept until none is
  waiting), one at a time, so descriptors never run out through connections, not even in a
  burst. A refused connection is half-closed after its 503 and what its client still sends
  is read and dropped for a moment, so that the 503 is not lost to a reset;
- a flood of such events is logged once, then counted at most once a minute (flood.py), and
  asyncio's "out of system resource" accept errors (with a traceback each) and uvicorn's
  warnings about Upgrade headers it cannot honour are reported the same way.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..openai_wire import error_body
from .api_errors import error_type
from .flood import FloodLog

log = logging.getLogger("webagents.server")

# Descriptors kept out of the cap for the agent's own files (notes, index, sessions, logs).
MIN_RESERVED_FILES = 32
# How long a connection whose response is sent goes on reading (and dropping) the rest of its
# request's body: if the body ends within it, the connection carries the next request; if not,
# it is half-closed and dropped for as long again before it closes. Closing a socket with
# unread bytes makes the kernel send a reset, which can destroy the response before the
# client reads it; a short grace avoids that without letting a trickling client hold the
# connection.
LINGER_SECONDS = 2.0
# Refused connections lingering (see LINGER_SECONDS) at once, at most: each holds a descriptor
# out of those the cap left beside the connections and their requests' model connections, of
# which they take half at most. More in the same moment are closed at once after their 503.
MAX_LINGERING_REFUSALS = 64


@dataclass(frozen=True)
class ConnectionLimits:
    """The server options of the same names (their defaults are the CLI's)."""

    max_connections: int
    header_timeout: float
    body_timeout: float
    keep_alive_timeout: int


def file_limit() -> int:
    """The process's soft limit on open files (`ulimit -n`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(requested: int, files: int) -> int:
    """How many connections may be open: `requested`, less where `files` must keep a reserve
    for the agent's own files, and beside each connection one for the connection to the model
    that its request holds while it waits for the answer (every connection may be busy)."""
    return min(requested, (files - max(MIN_RESERVED_FILES, files // 8)) // 2)


class ConnectionGuard:
    """The cap on open connections and the order in which idle ones are closed for room."""

    def __init__(self, limits: ConnectionLimits, cap: int) -> None:
        self.limits = limits
        self.cap = cap
        # Accepted, by descriptor (a reused one replaces a closed socket); closed ones are
        # pruned when counted.
        self._sockets: dict[int, socket.socket] = {}
        # Started and not yet lost, with its socket (to see whether a request is arriving).
        self._connections: dict[_GuardedH11, socket.socket | None] = {}
        self._idle: dict[_GuardedH11, None] = {}  # waiting for a request head, oldest first
        self._refusals: dict[socket.socket, asyncio.TimerHandle] = {}  # lingering after a 503
        spare = file_limit() - 2 * cap
        self._refusal_room = max(1, min(MAX_LINGERING_REFUSALS, spare // 2))
        self._refusal = _refusal(cap)
        self.late_body = _late_body(limits.body_timeout)
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
        self.body_timed_out = FloodLog(
            "answered 408 and closed a connection whose request body did not arrive in full "
            f"within {limits.body_timeout:g} s of its head (--body-timeout)",
            "body timeout: %d more connections closed in the last %d s",
        )
        self.upgrades = FloodLog(
            "ignored a request's Upgrade header (this server speaks plain HTTP/1.1, no "
            "WebSocket): the request is answered as an ordinary one",
            "Upgrade headers: %d more ignored in the last %d s",
        )

    def listen_on(self, sock: socket.socket) -> socket.socket:
        """`sock` (bound, and listening) as one whose accepts keep to the cap."""
        guarded = _GuardedSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        guarded.guard = self
        return guarded

    def protocol(self) -> type[asyncio.Protocol]:
        """uvicorn's h11 protocol class with the header timeout, for this guard."""
        guard = self

        class Guarded(_GuardedH11):
            _guard = guard

        return Guarded

    def _open(self) -> int:
        if len(self._sockets) >= self.cap:
            self._sockets = {fd: sock for fd, sock in self._sockets.items() if sock.fileno() != -1}
        return len(self._sockets)

    def accept(self, accept: Callable[[], tuple[socket.socket, Any]]) -> tuple[socket.socket, Any]:
        open_now = self._open()
        if open_now < self.cap:
            return self._admit(*accept())
        if open_now > len(self._connections):
            # Room being made (a connection closed for it frees its descriptor in the loop's
            # next turn), or connections accepted in a burst and not yet started (whether they
            # are idle shows soon): accept then, one beyond the cap at a time.
            raise BlockingIOError(errno.EAGAIN, "waiting for room for new connections")
        while True:
            # Accept first: asyncio calls accept until none is waiting, and a connection must
            # not be closed for one that is not there (this raises BlockingIOError then).
            conn, address = accept()
            room = self._idle_to_close()
            if room is not None:
                self._idle.pop(room)
                room.close_idle(at_once=True)
                self.evicted.event()
                return self._admit(conn, address)
            self._refuse(conn)

    def _admit(self, conn: socket.socket, address: Any) -> tuple[socket.socket, Any]:
        self._sockets[conn.fileno()] = conn
        return conn, address

    def _idle_to_close(self) -> _GuardedH11 | None:
        """The longest-idle connection but those whose request is already arriving: accepted
        in the same moment as the new one, or just done with a response, they are not read yet
        (the loop reads them in its next turn) but they are no longer idle."""
        for connection in self._idle:
            if connection.lingering() or not _arriving(self._connections.get(connection)):
                return connection
        return None

    def _refuse(self, conn: socket.socket) -> None:
        self.refused.event()
        conn.setblocking(False)
        try:
            conn.send(self._refusal)
            # The end of the answer, while the client may still send. Closing the socket with
            # what it sent unread, or before its request arrives, makes the kernel answer with
            # a reset, which can destroy the 503 before the client reads it: read and drop
            # what comes, until the client closes or for a moment at most.
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()  # the client is gone already
            return
        if len(self._refusals) >= self._refusal_room:
            _drop_received(conn)  # no more descriptors to spare: what is there, then close
            conn.close()
            return
        loop = asyncio.get_running_loop()
        self._refusals[conn] = loop.call_later(LINGER_SECONDS, self._end_refusal, conn)
        loop.add_reader(conn, self._refusal_read, conn)

    def _refusal_read(self, conn: socket.socket) -> None:
        if _drop_received(conn):
            self._end_refusal(conn)

    def _end_refusal(self, conn: socket.socket) -> None:
        timer = self._refusals.pop(conn, None)
        if timer is None:
            return
        timer.cancel()
        asyncio.get_running_loop().remove_reader(conn)
        conn.close()

    def started(self, connection: _GuardedH11) -> None:
        sock = connection.transport.get_extra_info("socket")
        self._connections[connection] = None if sock is None else self._sockets.get(sock.fileno())
        self.became_idle(connection)

    def lost(self, connection: _GuardedH11) -> None:
        self._connections.pop(connection, None)
        self._idle.pop(connection, None)

    def became_idle(self, connection: _GuardedH11) -> None:
        self._idle.pop(connection, None)
        self._idle[connection] = None

    def became_busy(self, connection: _GuardedH11) -> None:
        self._idle.pop(connection, None)


def _arriving(sock: socket.socket | None) -> bool:
    """Whether bytes from the client wait in `sock` (not read yet)."""
    if sock is None:
        return False
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except OSError:
        return False  # nothing there (BlockingIOError), or the client is gone


def _drop_received(conn: socket.socket) -> bool:
    """Read and drop what the client sent; True once it has closed its side, or is gone."""
    try:
        for _ in range(16):
            if not conn.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False


def _refusal(cap: int) -> bytes:
    return _closing_answer(
        "503 Service Unavailable",
        f"the server is at its limit of {cap} open connections and all are busy; try again shortly",
        "too_many_connections",
        "retry-after: 1\r\n",
    )


def _late_body(body_timeout: float) -> bytes:
    return _closing_answer(
        "408 Request Timeout",
        f"the request body did not arrive in full within {body_timeout:g} s of the request "
        "head (this server's --body-timeout); send it at once, or send a smaller one",
        "request_timeout",
    )


def _closing_answer(status: str, message: str, code: str, headers: str = "") -> bytes:
    """An error response written straight to the socket (ahead of h11), then the end."""
    body = orjson.dumps(error_body(message, error_type(int(status[:3])), code))
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{headers}connection: close\r\n\r\n"
    )
    return head.encode() + body


class _GuardedSocket(socket.socket):
    guard: ConnectionGuard

    def accept(self) -> tuple[socket.socket, Any]:
        return self.guard.accept(super().accept)


class _GuardedH11(H11Protocol):
    """h11 with a deadline on each request head (armed when the connection opens and after
    each response, cleared once the head is in) and on each request body (armed once the head
    is in, cleared once the body is), neither moved by bytes that trickle in."""

    _guard: ClassVar[ConnectionGuard]
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _drain_timer: asyncio.TimerHandle | None = None
    _linger_timer: asyncio.TimerHandle | None = None
    _upgraded = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._guard.started(self)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self._linger_timer is not None:
            return  # the rest of a body whose response is sent: for no one
        super().data_received(data)

    def handle_events(self) -> None:
        # Here, not in data_received: after a response uvicorn reads pipelined requests too.
        super().handle_events()
        state = self.conn.their_state
        if self._drain_timer is not None and not self._draining():
            self._drained()
        if state is h11.IDLE or self._upgraded:
            return  # an upgraded connection is the WebSocket protocol's: no timer of ours
        if self._head_timer is not None:
            self._head_in()
        if state is h11.SEND_BODY and not self._draining():  # a drain has its own bound
            if self._body_timer is None and not self.transport.is_closing():
                self._body_timer = self.loop.call_later(
                    self._guard.limits.body_timeout, self._body_timed_out
                )
        else:
            self._stop_body_timer()  # the body is in: whatever the answer takes is fine

    def on_response_complete(self) -> None:
        body_unread = self.conn.their_state is h11.SEND_BODY
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if body_unread:
            # The connection cannot carry another request until that body ends, which the
            # client decides: a moment for it to end (uvicorn drops what comes, then starts
            # the next cycle), else the connection ends.
            self._drain()
        elif self.conn.their_state is h11.IDLE:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self._guard.lost(self)
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # The connection goes to another protocol; this one never hears of it again.
        self._upgraded = True
        self._cancel_timers()
        self._guard.lost(self)
        super().handle_websocket_upgrade(event)

    def send_400_response(self, msg: str) -> None:
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            # A malformed rest of a body being drained, its request answered already: no
            # second response can be sent (uvicorn's would raise in data_received, a
            # traceback in the log for every such client); the connection ends.
            self.close_idle()
            return
        super().send_400_response(msg)

    def _unsupported_upgrade_warning(self) -> None:
        # uvicorn's two warnings for each such request, as one flood-limited line.
        self._guard.upgrades.event()

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

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.cycle.response_started:
            return  # answered without the body: the drain after the response bounds it
        self._guard.body_timed_out.event()
        # The app, waiting for the body, hears that the client is gone, and sends nothing.
        self.cycle.disconnected = True
        self.cycle.message_event.set()
        self.transport.write(self._guard.late_body)
        self._linger()

    def _drain(self) -> None:
        """Read and drop the rest of the body of a request already answered, for a moment
        (LINGER_SECONDS); counted as idle meanwhile, with no body timer (none is armed while
        draining). The body's end (`handle_events`) keeps the connection; no end in time ends
        it (`_linger`)."""
        self._stop_body_timer()
        self._drain_timer = self.loop.call_later(LINGER_SECONDS, self._not_drained)
        self.flow.resume_reading()
        self._guard.became_idle(self)

    def _draining(self) -> bool:
        """The response is sent and its request's body still coming."""
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.SEND_BODY

    def _drained(self) -> None:
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        if self.conn.their_state is h11.IDLE:
            # As after any response: the next request's head awaited, and uvicorn's keep-alive
            # timer (which the body's bytes cancelled) armed again.
            self._await_head()
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )
        else:
            self._guard.became_busy(self)  # the next request, pipelined, is in already

    def _not_drained(self) -> None:
        self._drain_timer = None
        if not self.transport.is_closing() and self._draining():
            self._linger()

    def _linger(self) -> None:
        """End a connection whose response is sent while its request's body is still coming:
        say so (FIN after the response), drop what still comes for a moment, then close. It
        counts as idle meanwhile, so a new connection may close it at once for room."""
        self._stop_body_timer()
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, self.close_idle)
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._guard.became_idle(self)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._drain_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._drain_timer = self._linger_timer = None

    def lingering(self) -> bool:
        """Whether its response is sent and it only waits to close (see `_linger`)."""
        return self._linger_timer is not None

    def close_idle(self, *, at_once: bool = False) -> None:
        """Close a connection that has no request in progress; `at_once`: even if a response
        is still being written (to a client that does not read it), so that its descriptor is
        freed in the loop's next turn."""
        self._cancel_timers()
        if self.transport.is_closing() and not at_once:
            return
        try:
            self.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:
            pass  # half a request, or an unread body: there is nothing to end cleanly
        if at_once:
            self.transport.abort()
        else:
            self.transport.close()
