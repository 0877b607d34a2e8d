"""The portal's public endpoint relays each of its paths (SPEC P12, issue 24): the Responses
API's and Conversations' calls under `/agents/<name>/` go to the agent as a frame that names
the method, the path below the agent and the query (a GET or DELETE with no body), from this
portal process or (PostgreSQL) from another; they are API paths (the API's headers); a POST
whose body is not a JSON object is a 400 that says what to send. Against a real portal and a
fake agent on its WebSocket (connect_agent.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .connect_agent import ConnectAgent, connected
from .connect_world import World, make_world
from .processes import Served

pytestmark = pytest.mark.e2e  # runs the installed webagents command

CALLS: list[tuple[str, str, str, dict[str, Any] | None]] = [
    ("POST", "responses", "", {"input": "Hi", "stream": False}),
    ("GET", "responses/resp_1", "", None),
    ("DELETE", "responses/resp_1", "", None),
    ("GET", "responses/resp_1/input_items", "limit=2&order=asc", None),
    ("POST", "conversations", "", {}),
    ("GET", "conversations/conv_1", "", None),
    ("DELETE", "conversations/conv_1", "", None),
    ("GET", "conversations/conv_1/items", "after=msg_1", None),
]


@pytest.fixture
def world(served: Served, fresh_database_url: str) -> World:
    return make_world(served.url, fresh_database_url)


@pytest.fixture
def agent(world: World) -> Iterator[ConnectAgent]:
    with connected(world.url, world.agent_key) as echoing:
        yield echoing


def _calls(world: World, url: str) -> list[tuple[int, Any, dict[str, str]]]:
    answers = []
    with httpx.Client(headers=world.headers("alice"), timeout=60) as client:
        for method, path, query, body in CALLS:
            answer = client.request(
                method,
                f"{url}/agents/helper/{path}" + (f"?{query}" if query else ""),
                json=body,
            )
            kept = {k: answer.headers[k] for k in ("cache-control", "x-content-type-options")}
            answers.append((answer.status_code, answer.json(), kept))
    return answers


def _expected() -> list[tuple[int, Any, dict[str, str]]]:
    headers = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
    return [
        (
            200,
            {"method": method, "path": path, "query": query or None, "body": body},
            headers,
        )
        for method, path, query, body in CALLS
    ]


def test_p12_each_path_of_the_endpoint_is_relayed_with_its_method_path_and_query(
    world: World, agent: ConnectAgent
) -> None:
    assert _calls(world, world.url) == _expected()
    assert len(agent.seen.requests) == len(CALLS)
    assert all("body" not in r for r in agent.seen.requests if r["method"] != "POST")


def test_p12_a_post_to_a_relayed_path_whose_body_is_no_object_is_a_400_that_says_what_to_send(
    world: World, agent: ConnectAgent
) -> None:
    hints = {
        "responses": 'a Responses request: a JSON object with input (like {"input": "Hi"})',
        "conversations": 'a new conversation: a JSON object (like {} or {"items": [{"type": '
        '"message", "role": "user", "content": "Hi"}]})',
    }
    answers = {
        path: httpx.post(
            f"{world.url}/agents/helper/{path}",
            content=b"[1]",
            headers={**world.headers("alice"), "content-type": "application/json"},
            timeout=60,
        )
        for path in hints
    }
    assert {path: (a.status_code, a.json()) for path, a in answers.items()} == {
        path: (
            400,
            {
                "error": {
                    "message": f"send {hint}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_request",
                }
            },
        )
        for path, hint in hints.items()
    }
    assert agent.seen.requests == []


def test_p12_each_path_is_relayed_from_another_portal_process_on_postgresql(
    tmp_path: Path, database_kind: str, fresh_database_url: str, served: Served
) -> None:
    if database_kind != "postgresql":
        pytest.skip("several portal processes need PostgreSQL (SQLite: one process)")
    world = make_world(served.url, fresh_database_url)
    other = Served(tmp_path, "--database", fresh_database_url)
    try:
        with connected(world.url, world.agent_key) as holder:
            assert _calls(world, other.url) == _expected()
        assert len(holder.seen.requests) == len(CALLS)
    finally:
        other.stop()
