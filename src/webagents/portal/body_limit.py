"""A cap on the size of a request's body, for the whole portal, before any route reads it.

FastAPI reads and parses a JSON body before a route's dependencies run, so without a cap an
anonymous caller could make the portal hold a body of any size before the 401. A declared
Content-Length over the cap is answered 413 at once; a body without one (chunked) is counted
as it arrives and cut at the cap with the same 413. The features' own limits (a note's 1 MB,
a sync's 8 MB) are smaller and stay.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..openai_wire import error_body

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


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, cap: int) -> None:
    body = json.dumps(
        error_body(too_large_message(cap), "invalid_request_error", "body_too_large")
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"x-content-type-options", b"nosniff"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
