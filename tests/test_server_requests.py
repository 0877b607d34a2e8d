"""What a served request means, in process (issue 11): nesting bounds, which agent a request
names and who learns the names, whether its conversation was kept, and the options the agent
does not take from a client. The same through a real `webagents serve` is in tests/e2e/."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from starlette.testclient import TestClient

from webagents import Agent
from webagents._loop import copy_json
from webagents.access import AccessVerifier
from webagents.agent_file import AccessSpec
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.server.openai_api import MAX_NESTING
from webagents.testing import ScriptedModel

KEYS = {"OWNER": "owner-key", "ALICE": "alice-key", "BETA": "beta-key"}


def _served(
    name: str, model: ScriptedModel | None = None, access: AccessSpec | None = None
) -> ServedAgent:
    agent = Agent(name, f"You are {name}.", model=model or ScriptedModel(["hi"] * 10))
    return ServedAgent(agent, AccessVerifier(access, environ=KEYS))


def _client(*served: ServedAgent) -> TestClient:
    return TestClient(create_app(AgentHost(list(served))), raise_server_exceptions=False)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _tool_call_history(extra: Any) -> list[dict[str, Any]]:
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": "lookup", "arguments": "{}"},
        "extra": extra,
    }
    return [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call-1", "content": "found"},
        {"role": "user", "content": "thanks"},
    ]


def _error(response: Any) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["message"], error["code"]


# -- bullet: deep nesting ------------------------------------------------------------------------


def test_hardening_deep_nesting_in_tool_calls_is_400_naming_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 500 levels inside an assistant's tool call: a 1.4 KB request that was a 500 (deepcopy).
    body = {"model": "helper", "messages": _tool_call_history(_nested(500))}
    with caplog.at_level(logging.INFO), _client(_served("helper")) as client:
        answer = client.post("/v1/chat/completions", content=json.dumps(body))
    assert _error(answer) == (
        400,
        "invalid request: messages.1.tool_calls.0.extra.0.…: JSON nests deeper than 64 "
        "levels of arrays and objects, the most a request may; send flatter data (tool call "
        "arguments are a JSON string)",
        "too_deep",
    )
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_hardening_nesting_at_the_limit_is_answered_and_reaches_the_model_whole() -> None:
    model = ScriptedModel(["done"])
    # The body is level 1, messages 2, the message 3, tool_calls 4, the call 5: 59 more fit.
    deepest = _nested(MAX_NESTING - 5)
    body = {"model": "helper", "messages": _tool_call_history(deepest)}
    with _client(_served("helper", model)) as client:
        answer = client.post("/v1/chat/completions", json=body)
        too_deep = {"model": "helper", "messages": _tool_call_history([deepest])}
        refused = client.post("/v1/chat/completions", json=too_deep)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "done"
    assert model.requests[0].messages[2]["tool_calls"][0]["extra"] == deepest
    assert _error(refused)[2] == "too_deep"


def test_hardening_deep_nesting_on_the_agent_route_and_in_any_field_is_400() -> None:
    with _client(_served("helper")) as client:
        answers = [
            client.post(
                "/agents/helper/chat/completions",
                json={"messages": [{"role": "user", "content": "x", "extra": _nested(100)}]},
            ),
            client.post(
                "/v1/chat/completions",
                json={"model": "helper", "messages": [], "response_format": _nested(100)},
            ),
        ]
    assert [_error(a)[0::2] for a in answers] == [(400, "too_deep"), (400, "too_deep")]


def test_hardening_copying_a_conversation_needs_no_recursion() -> None:
    deep = _nested(20_000)  # far past Python's recursion limit
    history = [{"role": "user", "content": "x", "deep": deep}, {"role": "user", "content": "y"}]
    copied = copy_json(history)
    assert copied is not history and copied[0] is not history[0]
    depth, here = 0, copied[0]["deep"]
    while isinstance(here, list):
        assert len(here) == 1
        depth, here = depth + 1, here[0]
    assert (depth, here, copied[1]) == (20_000, "leaf", {"role": "user", "content": "y"})
    copied[1]["content"] = "changed"
    assert history[1]["content"] == "y"
