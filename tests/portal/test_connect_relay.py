"""Portal Connect's relay in the portal (P12), in the app on SQLite and PostgreSQL with an
agent on a WebSocket of the test client: a non-stream reply over the relay's cap is 502
reply_too_large (the agent told to stop), the body's type is the portal's own (nosniff), the
agent's own reply headers (X-Webagents-*) are passed on only where they are a header (a name
or value with a line break or another control character is left out, and the reply served),
an agent holds at most `max_connections_per_agent` WebSockets (close 4429), and an assertion
signed when no signing key existed yet is valid."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from starlette.websockets import WebSocketDisconnect

from webagents.portal.accounts import service as accounts
from webagents.portal.agents import service as agents
from webagents.portal.agents.schemas import AgentIn
from webagents.portal.app import create_app
from webagents.portal.connect import assertion, live
from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import upgrade
from webagents.portal.settings import PortalSettings

from .conftest import PASSWORD

HI = {"messages": [{"role": "user", "content": "Hi"}]}
Frames = Callable[[str], list[dict[str, Any]]]


@dataclasses.dataclass
class World:
    client: TestClient
    engine: Engine
    user_key: str
    agent_key: str

    def agent(self, frames: Frames) -> threading.Thread:
        """An agent that answers one request with `frames`, then closes."""
        ready = threading.Event()
        got: list[dict[str, Any]] = []

        def run() -> None:
            with self.client.websocket_connect(
                "/ws", headers={"Authorization": f"Bearer {self.agent_key}"}
            ) as ws:
                got.append(ws.receive_json())
                ready.set()
                request = ws.receive_json()
                for frame in frames(request["id"]):
                    ws.send_json(frame)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert ready.wait(30), "the agent never got its hello"
        assert got[0]["type"] == "hello"
        return thread

    def call(self, body: dict[str, Any]) -> Any:
        return self.client.post(
            "/agents/helper/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.user_key}"},
        )


def _world(url: str, **settings: Any) -> Iterator[World]:
    chosen = PortalSettings(database_url=url, **settings)
    engine = make_engine(chosen)
    upgrade(engine)
    with Session(engine) as db:
        alice = accounts.add_user(db, "alice", PASSWORD)
        made = agents.create_agent(db, alice, AgentIn(name="helper"))
        user_key = accounts.create_key(db, alice, "test").key
        db.commit()
    app = create_app(chosen, engine=engine, embedder=None)
    with TestClient(app) as client:
        yield World(client, engine, user_key, made.rawApiKey)
    engine.dispose()


@pytest.fixture
def world(fresh_database_url: str) -> Iterator[World]:
    yield from _world(fresh_database_url, max_connections_per_agent=2)


def _start(request_id: str, content_type: str) -> dict[str, Any]:
    return {
        "type": "start",
        "id": request_id,
        "status": 200,
        "headers": {"content-type": content_type},
    }


def test_p12_a_non_stream_reply_over_the_relays_cap_is_502(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "MAX_REPLY_CHARS", 1000)

    def frames(request_id: str) -> list[dict[str, Any]]:
        data = [{"type": "data", "id": request_id, "chunk": "x" * 300} for _ in range(5)]
        return [_start(request_id, "application/json"), *data, {"type": "end", "id": request_id}]

    agent = world.agent(frames)
    answer = world.call(HI)
    agent.join(30)
    assert (answer.status_code, answer.json()) == (
        502,
        {
            "error": {
                "message": "the agent's reply is longer than the portal relays (1,000 "
                "characters, or that much unread): ask for a shorter answer, or read it as a "
                'stream ("stream": true) as it comes',
                "type": "server_error",
                "param": None,
                "code": "reply_too_large",
            }
        },
    )


def test_p12_a_relayed_replys_body_type_is_the_portals_own(world: World) -> None:
    def html(request_id: str) -> list[dict[str, Any]]:
        return [
            _start(request_id, "text/html"),
            {"type": "data", "id": request_id, "chunk": "<script>alert(1)</script>"},
            {"type": "end", "id": request_id},
        ]

    agent = world.agent(html)
    plain = world.call(HI)
    agent.join(30)
    assert plain.status_code == 200
    assert plain.headers["content-type"] == "application/json"
    assert plain.headers["x-content-type-options"] == "nosniff"
    agent = world.agent(html)
    streamed = world.call({**HI, "stream": True})
    agent.join(30)
    assert streamed.headers["content-type"] == "text/event-stream"
    assert streamed.headers["x-content-type-options"] == "nosniff"


def test_p12_an_agent_holds_at_most_the_cap_of_connections(world: World) -> None:
    headers = {"Authorization": f"Bearer {world.agent_key}"}
    with world.client.websocket_connect("/ws", headers=headers) as first:
        assert first.receive_json()["type"] == "hello"
        with world.client.websocket_connect("/ws", headers=headers) as second:
            assert second.receive_json()["type"] == "hello"
            with world.client.websocket_connect("/ws", headers=headers) as third:
                with pytest.raises(WebSocketDisconnect) as refused:
                    third.receive_json()
                assert (refused.value.code, refused.value.reason) == (
                    4429,
                    "this agent holds 2 connections already: close one",
                )
    with world.client.websocket_connect("/ws", headers=headers) as again:
        assert again.receive_json()["type"] == "hello"


def test_p12_an_assertion_is_signed_when_no_signing_key_existed_yet(tmp_path: Path) -> None:
    url = f"sqlite+pysqlite:///{tmp_path / 'portal.db'}"
    engine = make_engine(PortalSettings(database_url=url))
    upgrade(engine)
    import uuid

    with Session(engine) as db:
        token = assertion.sign(
            db,
            issuer="http://portal",
            agent_id=uuid.uuid4(),
            user_id=uuid.uuid4(),
            username="alice",
            tier="owner",
        )
        db.commit()
    assert token.count(".") == 2
    engine.dispose()


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
