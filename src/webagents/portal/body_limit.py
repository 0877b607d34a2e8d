"""A cap on the size of a request's body, for the whole portal, before any route reads it, and
the check every JSON body meets there (json_body: its depth, no NaN).

FastAPI reads and parses a JSON body before a route's dependencies run, so without a cap an
anonymous caller could make the portal hold a body of any size before the 401. A declared
Content-Length over the cap is answered 413 at once; a body without one (chunked) is counted
as it arrives and cut at the cap with the same 413. The features' own limits (a note's 1 MB,
a sync's 8 MB) are smaller and stay. A body that routes read as JSON (a JSON content type,
or none: FastAPI parses those too) is read whole here and checked, then handed on as read.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..openai_wire import error_body
from . import json_body

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024


def too_large_message(cap: int) -> str:
    return (
        f"the request body is larger than the portal accepts ({cap:,} bytes): send less "
        "(split the data over several requests)"
    )


class BodyLimit:
    """ASGI middleware: HTTP requests' bodies at most `cap` bytes (WebSockets pass)."""

    def __init__(self, app: ASGIApp, cap: int) -> None:
        self.app = app
        self.cap = cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.cap:
            await _refuse(send, self.cap)
            return
        if _read_as_json(scope):
            await self._checked(scope, receive, send)
            return
        seen = 0
        cut = False  # the body passed the cap: the app is told the client left
        started = False
        replaced = False  # the app's answer to a cut body, dropped for our 413

        async def counted() -> Message:
            nonlocal seen, cut
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.cap:
                    cut = True
                    return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start":
                started = True
                if cut:
                    replaced = True
                    await _refuse(send, self.cap)
                    return
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except Exception:
            if not cut or (started and not replaced):
                raise
        if cut and not started:
            await _refuse(send, self.cap)

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The whole body read and checked first; the app gets it in one message."""
        parts: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before the body ended: nobody to answer
            part = bytes(message.get("body", b""))
            seen += len(part)
            if seen > self.cap:
                await _refuse(send, self.cap)
                return
            parts.append(part)
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        problem = json_body.problem(body) if body else None
        if problem is not None:
            await _answer(send, 400, error_body(problem, "invalid_request_error", "bad_json"))
            return
        pending: bytes | None = body

        async def replayed() -> Message:
            nonlocal pending
            if pending is not None:
                message, pending = {"type": "http.request", "body": pending}, None
                return message
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replayed, send)


_FORMS = (b"application/x-www-form-urlencoded", b"multipart/form-data")


def _read_as_json(scope: Scope) -> bool:
    """Whether a route may read this request's body as JSON: any but a form's. FastAPI parses
    a JSON type or none, and the public Connect endpoint reads its body as JSON whatever the
    type says."""
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() not in _FORMS
    return True


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, cap: int) -> None:
    await _answer(
        send, 413, error_body(too_large_message(cap), "invalid_request_error", "body_too_large")
    )


async def _answer(send: Send, status: int, error: dict[str, object]) -> None:
    body = json.dumps(error).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"x-content-type-options", b"nosniff"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
