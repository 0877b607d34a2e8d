"""The portal's outermost layer: an API request that the database gate would refuse at once
(db/gate.py) is answered 503 with Retry-After here, before the app's middleware, routing,
body parsing and error handlers run.

Under a flood of clients the portal answers hundreds of such refusals a second, and every
CPU millisecond they take is one the admitted requests lack (the portal's one process uses a
whole core at that point): here a refusal costs a look at the gate, the body read and dropped
(so the connection can carry the client's next request) and a few bytes written. Pages,
`/health` and Portal Connect's WebSocket are not refused here: a page is refused by the gate
itself, as a page. A body larger than the portal accepts, or one of no declared length, is
left to the app (its body limit answers it).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..openai_wire import error_body
from ..server.api_errors import error_type
from .db.gate import Busy, DatabaseGate
from .web import API_HEADERS

_HEADERS = [(b"content-type", b"application/json")] + [
    (name.lower().encode(), value.encode()) for name, value in API_HEADERS.items()
]


class EarlyRefusal:
    """ASGI: `app`, but a request for which `refusable(path)` holds is answered 503 with
    Retry-After at once while `gate` would refuse it (see the module's docstring)."""

    def __init__(
        self, app: ASGIApp, gate: DatabaseGate, refusable: Callable[[str], bool], cap: int
    ) -> None:
        self.app = app
        self.gate = gate
        self.refusable = refusable
        self.cap = cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.refusable(scope["path"]):
            await self.app(scope, receive, send)
            return
        refusal = self.gate.busy()
        if refusal is None or not self._small_body(scope):
            await self.app(scope, receive, send)
            return
        # The body read first: answered with its body unread, the connection could not
        # carry the client's next request, and a client still sending it would see the
        # connection dropped.
        message: Message = {"type": "http.request", "more_body": True}
        while message.get("more_body", False) and message["type"] != "http.disconnect":
            message = await receive()
        await _answer(send, refusal)

    def _small_body(self, scope: Scope) -> bool:
        """Whether the request declares a body no larger than the portal accepts (none
        counts), so that reading it to drop it is cheap."""
        length = b"0"
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                return False
        return length.isdigit() and int(length) <= self.cap


async def _answer(send: Send, refusal: Busy) -> None:
    body = orjson.dumps(error_body(refusal.message, error_type(refusal.status), refusal.code))
    headers = [
        *_HEADERS,
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(refusal.retry_after).encode()),
    ]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
