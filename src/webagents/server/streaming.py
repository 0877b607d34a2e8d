"""ASGI pieces the app needs: a body-size limit, and work that stops when the client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..openai_wire import error_body
from .api_errors import ApiError

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it if the client disconnects first (then raise ClientGone)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        # Both are finished (their own clean-up may await) before anything is decided.
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task not in done:
        raise ClientGone
    return task.result()


class EventStream(Response):
    """Server-sent events that stop being produced as soon as the client goes away."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes]) -> None:
        # Not Response.__init__: it would announce a Content-Length of 0.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )

        async def pump() -> None:
            async for chunk in self._events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        pumping = asyncio.ensure_future(pump())
        watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
        try:
            await asyncio.wait({pumping, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pumping, watcher):
                task.cancel()
            results = await asyncio.gather(pumping, watcher, return_exceptions=True)
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
        if isinstance(results[0], Exception):
            raise results[0]


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413, by header or as they arrive."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._refuse(send)
                return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise ApiError(413, self._message(), "request_too_large")
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        # Named for `webagents serve`'s users, true for any app: the option is the CLI's.
        return (
            f"the request body is over {self.max_bytes} bytes, this server's limit "
            "(webagents serve --max-body-mb raises it)"
        )

    async def _refuse(self, send: Send) -> None:
        response = JSONResponse(
            error_body(self._message(), "request_too_large", "request_too_large"), status_code=413
        )
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
