"""The early refusal (portal/refusal.py): while the database gate is full, an API request is
answered 503 with Retry-After before the app runs (its middleware, routing and body parsing),
with the API's headers; pages, /health, bodies the app must judge (too large, no declared
length) and a gate with room go to the app (issue 21)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from webagents.portal.db.gate import DatabaseGate, GateLimits
from webagents.portal.refusal import EarlyRefusal

from .load_helpers import busy

CAP = 1000


class _App:
    """The app behind the layer: answers 200 and says which paths reached it."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"app"})


def _api(path: str) -> bool:
    return path.startswith("/api/")


@pytest.fixture
async def full() -> AsyncIterator[tuple[httpx.AsyncClient, _App]]:
    """A client of the layer over a gate whose one slot is taken and whose queue is none."""
    gate = DatabaseGate(GateLimits(slots=1, waiting=0), one_writer=False)
    app = _App()
    layer = EarlyRefusal(app, gate, _api, CAP)
    async with gate.enter(writes=False):
        transport = httpx.ASGITransport(app=layer)
        async with httpx.AsyncClient(transport=transport, base_url="http://portal") as client:
            yield client, app


async def test_p_full_gate_refuses_an_api_request_503_before_the_app(
    full: tuple[httpx.AsyncClient, _App],
) -> None:
    """Not JSON, and yet 503, not 400: the body was read and dropped, never parsed (the app's
    body check would have answered 400 first; it was so before the refusal moved here)."""
    client, app = full
    answer = await client.put(
        "/api/storage/memory-scoped",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    assert answer.json() == busy(0, 1)
    assert app.reached == []


async def test_p_full_gate_leaves_pages_and_bodies_it_cannot_judge_to_the_app(
    full: tuple[httpx.AsyncClient, _App],
) -> None:
    """A page (refused by the gate itself, as a page), a body over the cap (the app's 413)
    and a body of no declared length (chunked) reach the app."""
    client, app = full
    assert (await client.get("/signin")).status_code == 200

    async def chunks() -> AsyncIterator[bytes]:
        yield b"{}"

    over = await client.post("/api/agents", content=b"x" * (CAP + 1))
    chunked = await client.post("/api/agents", content=chunks())
    assert (over.status_code, chunked.status_code) == (200, 200)
    assert app.reached == ["/signin", "/api/agents", "/api/agents"]


async def test_p_gate_with_room_lets_api_requests_through() -> None:
    gate = DatabaseGate(GateLimits(slots=1, waiting=0), one_writer=False)
    app = _App()
    transport = httpx.ASGITransport(app=EarlyRefusal(app, gate, _api, CAP))
    async with httpx.AsyncClient(transport=transport, base_url="http://portal") as client:
        answer = await client.get("/api/users/me")
    assert (answer.status_code, answer.text, app.reached) == (200, "app", ["/api/users/me"])
