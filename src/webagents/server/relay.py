"""One request the portal relays over Portal Connect, answered by the server's own app.

The relayed request is dispatched into the ASGI app in this process, exactly as an HTTP
request to `/agents/<name>/<path>` is: one routing table serves both ways (Chat Completions,
Responses, Conversations, and any route added under `/agents/<name>/`), and the request meets
the same verifier, sessions and memory. The frame names its `method` and its `path` below the
agent (with a `query`); a frame of a portal that names neither (before they were carried) is
`POST chat/completions`. Its identity travels in the ASGI scope's `extensions` (a `Relayed`
value), which only code in this process can put there: no header or body a network caller
sends can claim it. The app verifies the portal's assertion it carries (typ `connect`, this
agent's audience, a new jti) and never reads a credential header for it. The reply goes back
to the portal as start/data/end frames, as it is written.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
from starlette.types import ASGIApp, Message, Scope

log = logging.getLogger("webagents.connect")

RELAY_EXTENSION = "webagents.relay"
"""The key of a relayed request's `Relayed` in its ASGI scope's `extensions`."""
CANCEL_GRACE_SECONDS = 5.0
"""How long a cancelled request may take to stop by itself (it is told its caller left)
before its task is cancelled outright."""
UNENCODABLE = (
    "the request body is nested deeper than the agent takes (255 levels of JSON arrays and "
    "objects): send a flatter body"
)
_FORWARDED_HEADERS = ("allow", "content-type", "retry-after", "x-should-retry")
# A method is an HTTP token; the app answers 405 for one its route does not take.
_METHOD = re.compile(r"[A-Z]{1,16}")
# A segment of the path below the agent: printable, no separator, not `.` or `..` (which
# would name something outside the agent's routes).
_SEGMENT = re.compile(r"[^\x00-\x20\x7f/?#]{1,512}")
BAD_TARGET = (
    "the portal relayed a request whose method or path the agent cannot read: send the "
    "request to a path below /agents/<name>/"
)

Frame = dict[str, Any]
SendFrame = Callable[[Frame], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Target:
    """What a relayed request asks for: `method` at `/agents/<agent>/<path>?<query>`."""

    method: str
    path: str
    query: str


def target_of(frame: Frame) -> Target | None:
    """The frame's method and path (POST chat/completions where it names neither, as a portal
    before they were carried sends); None for one that is not a method and a path below the
    agent."""
    method = frame.get("method", "POST")
    path = frame.get("path", "chat/completions")
    query = frame.get("query", "")
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        return None
    if not isinstance(path, str) or not isinstance(query, str) or len(query) > 4096:
        return None
    segments = path.split("/")
    if any(s in (".", "..") or not _SEGMENT.fullmatch(s) for s in segments):
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in query):
        return None
    return Target(method, path, query)


@dataclass(frozen=True, slots=True)
class Relayed:
    """What the app knows of a relayed request's caller: the portal's assertion, unverified."""

    assertion: str | None
    request_id: str


def relayed(scope: Scope) -> Relayed | None:
    """The relay of a request dispatched by Portal Connect; None for a request of the network."""
    extensions = scope.get("extensions") or {}
    value = extensions.get(RELAY_EXTENSION)
    return value if isinstance(value, Relayed) else None


def _forwarded(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The reply headers the frame carries: the content type, retry hints, `Allow` (of a 405),
    X-Webagents-* (the portal passes on the last alone)."""
    kept: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in _FORWARDED_HEADERS or name.startswith("x-webagents-"):
            kept[name] = raw_value.decode("latin-1")
    return kept


class RelayedRequest:
    """One relayed request: dispatched into `app`, its reply sent as frames with its id."""

    def __init__(self, app: ASGIApp, agent: str, frame: Frame, send: SendFrame) -> None:
        self.id = str(frame.get("id"))
        assertion = frame.get("assertion")
        self._relayed = Relayed(assertion if isinstance(assertion, str) else None, self.id)
        self._target = target_of(frame)
        body = frame.get("body")
        try:
            # No body (a GET, a DELETE) is an empty one; an old frame always has one.
            self._body = b"" if body is None and "method" in frame else orjson.dumps(body)
        except orjson.JSONEncodeError:
            # Deeper than orjson writes (255 levels): no agent would read it either. This one
            # request is refused; the connection it came on goes on (run answers the error).
            self._body = b""
            self._unencodable = True
        else:
            self._unencodable = False
        self._pending: bytes | None = self._body
        self._app = app
        self._agent = agent
        self._send = send
        self._cancelled = asyncio.Event()
        self._started = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def cancel(self) -> None:
        """The portal's caller went away: the app is told its client disconnected."""
        self._cancelled.set()

    async def run(self) -> None:
        if self._target is None:
            await self._frame(
                {
                    "type": "error",
                    "id": self.id,
                    "status": 400,
                    "message": BAD_TARGET,
                    "code": "bad_target",
                }
            )
            return
        if self._unencodable:
            await self._frame(
                {
                    "type": "error",
                    "id": self.id,
                    "status": 400,
                    "message": UNENCODABLE,
                    "code": "body_too_deep",
                }
            )
            return
        work = asyncio.ensure_future(self._dispatch(self._target))
        stop = asyncio.ensure_future(self._cancelled.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                # Told of the disconnect, the app stops the turn itself; this is the backstop.
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result
                # instead of the cancellation when both arrive together, so a stop was lost.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CANCEL_GRACE_SECONDS):
                        await asyncio.shield(work)
        finally:
            stop.cancel()
            if not work.done():
                work.cancel()
            await asyncio.gather(work, stop, return_exceptions=True)

    async def _dispatch(self, target: Target) -> None:
        path = f"/agents/{self._agent}/{target.path}"
        headers = [(b"content-length", str(len(self._body)).encode())]
        if self._body:
            headers.insert(0, (b"content-type", b"application/json"))
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": target.method,
            "scheme": "http",
            "path": path,
            "raw_path": quote(path).encode(),
            "query_string": target.query.encode(),
            "root_path": "",
            "headers": headers,
            "client": None,
            "server": None,
            "extensions": {RELAY_EXTENSION: self._relayed},
        }
        try:
            await self._app(scope, self._receive, self._reply)
        except Exception as exc:  # the app's own handlers answered what they could
            log.error("a relayed request failed", exc_info=exc)
            await self._frame(
                {"type": "error", "id": self.id, "status": 500, "message": "internal error"}
            )

    async def _receive(self) -> Message:
        if self._pending is not None:
            body, self._pending = self._pending, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._cancelled.wait()
        return {"type": "http.disconnect"}

    async def _reply(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._started = True
            await self._frame(
                {
                    "type": "start",
                    "id": self.id,
                    "status": int(message["status"]),
                    "headers": _forwarded(list(message.get("headers", []))),
                }
            )
        elif message["type"] == "http.response.body":
            more = bool(message.get("more_body", False))
            chunk = self._decoder.decode(bytes(message.get("body", b"")), final=not more)
            if chunk:
                await self._frame({"type": "data", "id": self.id, "chunk": chunk})
            if not more:
                await self._frame({"type": "end", "id": self.id})

    async def _frame(self, frame: Frame) -> None:
        if self._cancelled.is_set():
            return  # nobody waits for it at the portal any more
        await self._send(frame)
