"""The agents' connections this process holds, and a relayed request's reply as the caller
reads it. Frames are routed by request id within one connection only: a connection can
answer only what was sent to it, so another agent's connection cannot reach these replies."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..errors import PortalError
from . import protocol

Sink = Callable[[dict[str, Any]], None]
# How often a caller waiting on a remote reply checks that its holder is still alive.
LIVENESS_CHECK = 2.0

# A reply's text the portal holds for a caller at most: a whole non-stream reply, or the
# part of a stream the caller has not read yet. An agent that sends more is cut off (502).
MAX_REPLY_CHARS = 16 * 1024 * 1024
# Frames waiting to go to one agent's WebSocket; past this the agent is busy (503).
MAX_OUTBOX_FRAMES = 256

# The place of a memory notice in a connection's outbox: the frame is made as it is sent,
# with the latest cursor then (never a JSON frame, so never an agent's reply).
MEMORY_NOTICE = "memory_changed"

DISCONNECTED = (
    "the agent's connection to the portal dropped before its reply was complete: send the "
    "request again (the agent reconnects by itself)"
)


class RelayError(PortalError):
    """A relayed request that got no (whole) reply: answered with this status and code."""

    status = 502
    code = "agent_disconnected"


def too_large() -> dict[str, Any]:
    return {
        "type": "error",
        "status": 502,
        "code": "reply_too_large",
        "message": f"the agent's reply is longer than the portal relays ({MAX_REPLY_CHARS:,} "
        "characters, or that much unread): ask for a shorter answer, or read it as a stream "
        '("stream": true) as it comes',
    }


class Reply:
    """The frames of one relayed request's reply, in order, with bounded waits."""

    def __init__(
        self,
        request_id: str,
        cancel: Callable[[], None],
        still_there: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.id = request_id
        self._frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._cancel = cancel
        self._still_there = still_there
        self.finished = False
        self._unread = 0  # characters of data frames queued and not read yet
        self._overflowed = False

    def put(self, frame: dict[str, Any]) -> None:
        if self._overflowed:
            return
        chunk = frame.get("chunk")
        if frame.get("type") == "data" and isinstance(chunk, str):
            self._unread += len(chunk)
            if self._unread > MAX_REPLY_CHARS:  # the caller reads slower than the agent sends
                self._overflowed = True
                while not self._frames.empty():  # what is queued is let go: the error alone
                    self._frames.get_nowait()
                self._frames.put_nowait(too_large())
                self.cancel()
                return
        self._frames.put_nowait(frame)

    async def whole(self, idle: float) -> str:
        """The body's chunks joined, at most MAX_REPLY_CHARS (else a RelayError, 502)."""
        parts: list[str] = []
        size = 0
        async for chunk in self.chunks(idle):
            size += len(chunk)
            if size > MAX_REPLY_CHARS:
                self.cancel()
                self._fail(too_large())
            parts.append(chunk)
        return "".join(parts)

    def cancel(self) -> None:
        """The caller went away: the agent is told to stop (no wait; safe in a finally of a
        cancelled task)."""
        if not self.finished:
            self.finished = True
            self._cancel()

    async def start(self, wait: float) -> tuple[int, dict[str, str]]:
        """The reply's status and headers, once the agent starts it (waiting `wait` at most)."""
        frame = await self._next(wait, "start")
        if frame["type"] != "start":
            self._fail(frame)
        status = frame.get("status")
        headers = frame.get("headers")
        if not isinstance(status, int) or not 100 <= status <= 599:
            self.cancel()
            raise RelayError("the agent started its reply without a valid status")
        shown = {
            str(name).lower(): str(value)
            for name, value in (headers.items() if isinstance(headers, dict) else [])
        }
        return status, shown

    async def chunks(self, idle: float) -> AsyncIterator[str]:
        """The body's chunks until `end`; a RelayError when it fails or stalls for `idle`."""
        while True:
            frame = await self._next(idle, "data")
            kind = frame["type"]
            if kind == "end":
                self.finished = True
                return
            if kind == "data" and isinstance(frame.get("chunk"), str):
                yield frame["chunk"]
            elif kind == "error":
                self._fail(frame)

    def _fail(self, frame: dict[str, Any]) -> None:
        self.finished = True
        status = frame.get("status")
        message = frame.get("message")
        raise RelayError(
            str(message) if isinstance(message, str) and message else "the agent failed",
            status=status if isinstance(status, int) and 400 <= status <= 599 else 502,
            code=str(frame.get("code") or "agent_error"),
        )

    async def _next(self, wait_at_most: float, waiting_for: str) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_at_most
        while True:
            left = deadline - loop.time()
            if left <= 0:
                self.cancel()
                raise RelayError(
                    f"the agent sent no {waiting_for} of its reply within {wait_at_most:g} s: it "
                    "may be overloaded; try again",
                    status=504,
                    code="agent_timeout",
                )
            wait = min(left, LIVENESS_CHECK) if self._still_there else left
            try:
                frame = await asyncio.wait_for(self._frames.get(), wait)
            except TimeoutError:
                if self._still_there is not None and not await self._still_there():
                    self.finished = True
                    raise RelayError(DISCONNECTED) from None
                continue
            chunk = frame.get("chunk")
            if frame.get("type") == "data" and isinstance(chunk, str):
                self._unread -= len(chunk)
            return frame


class LiveConnection:
    """One agent's WebSocket: what is sent to it goes through one queue, so frames from
    many requests never interleave within a frame and a send never waits in a caller."""

    def __init__(
        self,
        connection_id: uuid.UUID,
        agent_id: uuid.UUID,
        agent_name: str,
        key_id: uuid.UUID | None = None,
    ) -> None:
        self.id = connection_id
        self.agent_id = agent_id
        self.agent_name = agent_name
        self.key_id = key_id
        """The agent key (one machine's) this connection was opened with: revoked, it ends."""
        self.end: Callable[[], None] = lambda: None
        """Ends the WebSocket (set by who holds it): what a revoked key's connection gets."""
        self.outbox: asyncio.Queue[str] = asyncio.Queue(MAX_OUTBOX_FRAMES)
        self.pending: dict[str, Sink] = {}
        self.closed = False
        self._memory_cursor = 0
        self._memory_queued = False

    def memory_changed(self, cursor: int) -> None:
        """Tell the agent its memory changed: at most one notice waits in the outbox, and it
        carries the latest cursor when it is sent (a burst of writes is one or two frames)."""
        self._memory_cursor = max(self._memory_cursor, cursor)
        if self._memory_queued or self.closed or self.outbox.full():
            return  # the one queued says the latest; a full outbox: the agent is not reading
        self._memory_queued = True
        self.outbox.put_nowait(MEMORY_NOTICE)

    async def next_frame(self) -> str:
        """The next frame to send to the agent (the writer's one read of the outbox)."""
        text = await self.outbox.get()
        if text is MEMORY_NOTICE:
            self._memory_queued = False
            return protocol.memory_changed(self._memory_cursor)
        return text

    def post(self, text: str) -> None:
        """Queue a frame for the agent; a full queue drops it (a pong, a cancel: the agent
        is not reading; requests are refused in `open` first)."""
        with contextlib.suppress(asyncio.QueueFull):
            self.outbox.put_nowait(text)

    def open(
        self,
        request_id: str,
        assertion: str,
        body: dict[str, Any] | None,
        sink: Sink,
        call: protocol.Call = protocol.CHAT_COMPLETIONS,
    ) -> None:
        if self.outbox.full():
            raise RelayError(
                f"the agent {self.agent_name!r} has {MAX_OUTBOX_FRAMES} requests waiting to be "
                "sent to it: it is not reading them; try again later",
                status=503,
                code="agent_busy",
            )
        self.pending[request_id] = sink
        self.post(protocol.request(request_id, assertion, body, call))

    def cancel(self, request_id: str) -> None:
        if self.pending.pop(request_id, None) is not None and not self.closed:
            self.post(protocol.cancel(request_id))

    def deliver(self, frame: dict[str, Any]) -> None:
        """A reply frame from the agent, to the request it answers (unknown ids dropped)."""
        request_id = frame.get("id")
        if not isinstance(request_id, str):
            return
        sink = self.pending.get(request_id)
        if sink is None:
            return
        if frame["type"] in ("end", "error"):
            del self.pending[request_id]
        sink(frame)

    def drop(self) -> None:
        """The WebSocket closed: every reply still open fails now, none waits forever."""
        self.closed = True
        pending, self.pending = self.pending, {}
        for request_id, sink in pending.items():
            sink(protocol.error(request_id, 502, DISCONNECTED, "agent_disconnected"))


class Registry:
    """This process's live connections by agent; requests go round the agent's connections."""

    def __init__(self) -> None:
        self._by_agent: dict[uuid.UUID, list[LiveConnection]] = {}
        self._by_id: dict[uuid.UUID, LiveConnection] = {}
        self._turns = itertools.count()

    def add(self, connection: LiveConnection) -> None:
        self._by_agent.setdefault(connection.agent_id, []).append(connection)
        self._by_id[connection.id] = connection

    def remove(self, connection: LiveConnection) -> None:
        self._by_id.pop(connection.id, None)
        held = self._by_agent.get(connection.agent_id, [])
        if connection in held:
            held.remove(connection)
        if not held:
            self._by_agent.pop(connection.agent_id, None)

    def get(self, connection_id: uuid.UUID) -> LiveConnection | None:
        return self._by_id.get(connection_id)

    def of(self, agent_id: uuid.UUID) -> list[LiveConnection]:
        """The agent's connections held here."""
        return list(self._by_agent.get(agent_id, []))

    def count(self, agent_id: uuid.UUID) -> int:
        return len(self._by_agent.get(agent_id, []))

    def pick(self, agent_id: uuid.UUID) -> LiveConnection | None:
        held = [c for c in self._by_agent.get(agent_id, []) if not c.closed]
        return held[next(self._turns) % len(held)] if held else None

    def all(self) -> list[LiveConnection]:
        return list(self._by_id.values())
