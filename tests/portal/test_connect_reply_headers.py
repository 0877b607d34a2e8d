"""Portal Connect (P12) passes on an agent's own reply headers (X-Webagents-*) only where they
are a header: a name or value with a line break or another control character (which ended the
caller's connection when the portal wrote it) is left out, and the reply is served. On SQLite
and PostgreSQL, with an agent on a WebSocket of the test client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .test_connect_relay import HI, World, _world


@pytest.fixture
def world(fresh_database_url: str) -> Iterator[World]:
    yield from _world(fresh_database_url)


def test_p12_agent_reply_headers_that_are_no_header_are_left_out(world: World) -> None:
    def frames(request_id: str) -> list[dict[str, Any]]:
        headers = {
            "content-type": "application/json",
            "x-webagents-session": "kept; where=local",
            "x-webagents-split": "kept\r\nSet-Cookie: session=stolen",
            "x-webagents-bell": "a\x07b",
            "x-webagents-line\r\nbreak": "v",
            "x-webagents-long": "x" * 5000,
            "x-webagents-number": 5,
        }
        return [
            {"type": "start", "id": request_id, "status": 200, "headers": headers},
            {"type": "data", "id": request_id, "chunk": '{"ok": true}'},
            {"type": "end", "id": request_id},
        ]

    agent = world.agent(frames)
    answer = world.call(HI)
    agent.join(30)
    assert (answer.status_code, answer.json()) == (200, {"ok": True})
    assert {k: v for k, v in answer.headers.items() if k.startswith("x-")} == {
        "x-webagents-session": "kept; where=local",
        "x-webagents-number": "5",  # the portal writes every value as text
        "x-content-type-options": "nosniff",
    }
    assert "set-cookie" not in answer.headers
