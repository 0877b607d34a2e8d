"""What a served request means, in process (issue 11): nesting bounds, which agent a request
names and who learns the names, whether its conversation was kept, and the options the agent
does not take from a client. The same through a real `webagents serve` is in tests/e2e/."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from webagents import Agent
from webagents._loop import copy_json
from webagents.access import AccessVerifier
from webagents.agent_spec import AccessSpec
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.server.openai_api import MAX_NESTING
from webagents.skills.base import Skill
from webagents.skills.session import SessionSkill
from webagents.testing import ScriptedModel

KEYS = {"OWNER": "owner-key", "ALICE": "alice-key", "BETA": "beta-key"}


def _served(
    name: str,
    model: ScriptedModel | None = None,
    access: AccessSpec | None = None,
    skills: list[Skill[Any]] | None = None,
) -> ServedAgent:
    model = model or ScriptedModel(["hi"] * 10)
    agent = Agent(name, f"You are {name}.", skills=skills or [], model=model)
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


def test_server_deep_nesting_in_tool_calls_is_400_naming_the_limit(
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


def test_server_nesting_at_the_limit_is_answered_and_reaches_the_model_whole() -> None:
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


def test_server_deep_nesting_on_the_agent_route_and_in_any_field_is_400() -> None:
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


def test_server_copying_a_conversation_needs_no_recursion() -> None:
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


# -- bullet: which agent a request names, verified first -----------------------------------------

SEEDS_REQUEST = {
    "model": "openai/gpt-4o-mini",
    "messages": [{"role": "user", "content": "hello"}],
    "metadata": {"session_id": "seed-1"},
}


def _several() -> TestClient:
    """A daemon's view: an open agent, and two that verify their own callers."""
    return _client(
        _served("open"),
        _served("alpha", access=AccessSpec(keys={"alice@example.com": "env:ALICE"})),
        _served("beta", access=AccessSpec(owner="env:OWNER", keys={"b@example.com": "env:BETA"})),
    )


def _bearer(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def test_server_one_served_agent_answers_whatever_model_names() -> None:
    access = AccessSpec(owner="env:OWNER")
    with _client(_served("helper", access=access)) as client:
        answers = [
            client.post("/v1/chat/completions", json=SEEDS_REQUEST, headers=_bearer(key))
            for key in ("owner-key", None)
        ]
        refused = client.post("/v1/chat/completions", json=SEEDS_REQUEST, headers=_bearer("bad"))
    assert [(a.status_code, a.json()["model"]) for a in answers] == [
        (200, "helper"),
        (200, "helper"),
    ]
    assert _error(refused) == (
        401,
        "the bearer token is not valid for this agent",
        "invalid_credential",
    )


def test_server_with_several_agents_model_picks_one_and_an_unknown_one_is_verified_first() -> None:
    def ask(key: str | None, model: str = "nobody") -> tuple[int, str, str]:
        body = {**SEEDS_REQUEST, "model": model}
        answer = client.post("/v1/chat/completions", json=body, headers=_bearer(key))
        if answer.status_code == 200:
            return 200, answer.json()["model"], ""
        return _error(answer)

    with _several() as client:
        seen = {
            "anonymous": ask(None),
            "alice": ask("alice-key"),
            "beta's owner": ask("owner-key"),
            "a key no agent accepts": ask("wrong-key"),
            "wrong key, known agent": ask("wrong-key", "alpha"),
            "alice calls alpha": ask("alice-key", "alpha"),
            "the seeds' model name": ask("alice-key", "openai/gpt-4o-mini"),
        }
        route = client.post(
            "/agents/nobody/chat/completions", json=SEEDS_REQUEST, headers=_bearer("wrong-key")
        )
    unknown = "no agent named 'nobody' is served here; the agents you may call: "
    pick = " (send one's name as model, or post to /agents/<name>/chat/completions)"
    assert seen == {
        "anonymous": (404, unknown + "open" + pick, "model_not_found"),
        "alice": (404, unknown + "alpha" + pick, "model_not_found"),
        "beta's owner": (404, unknown + "beta" + pick, "model_not_found"),
        "a key no agent accepts": (
            401,
            "the credential is not valid for any agent served here",
            "invalid_credential",
        ),
        "wrong key, known agent": (
            401,
            "the bearer token is not valid for this agent",
            "invalid_credential",
        ),
        "alice calls alpha": (200, "alpha", ""),
        "the seeds' model name": (
            404,
            "no agent named 'openai/gpt-4o-mini' is served here; the agents you may call: alpha"
            + pick,
            "model_not_found",
        ),
    }
    assert _error(route) == seen["a key no agent accepts"]


def test_a1_two_credentials_are_refused_before_any_list() -> None:
    with _several() as client:
        answer = client.post(
            "/v1/chat/completions",
            json={**SEEDS_REQUEST, "model": "nobody"},
            headers=[("Authorization", "Bearer alice-key"), ("Authorization", "Bearer x")],
        )
        models = client.get(
            "/v1/models",
            headers=[("Authorization", "Bearer alice-key"), ("Authorization", "Bearer x")],
        )
    refused = (401, "send one authorization header, not several", "invalid_credential")
    assert (_error(answer), _error(models)) == (refused, refused)


def test_server_models_and_health_list_names_only_to_who_may_call_them() -> None:
    def models(key: str | None) -> list[str] | tuple[int, str, str]:
        answer = client.get("/v1/models", headers=_bearer(key))
        if answer.status_code != 200:
            return _error(answer)
        return [m["id"] for m in answer.json()["data"]]

    with _several() as client:
        listed = {key: models(key) for key in (None, "alice-key", "owner-key", "beta-key", "x")}
        health = client.get("/health").json()
    assert listed == {
        None: ["open"],
        "alice-key": ["alpha"],
        "owner-key": ["beta"],
        "beta-key": ["beta"],
        "x": (401, "the credential is not valid for any agent served here", "invalid_credential"),
    }
    assert health == {"status": "ok", "agents": 3}
    with _client(_served("helper", access=AccessSpec(owner="env:OWNER"))) as client:
        assert [models(None), models("owner-key")] == [["helper"], ["helper"]]
        assert models("x") == (
            401,
            "the bearer token is not valid for this agent",
            "invalid_credential",
        )


# -- bullet: every served reply says whether its conversation was kept ---------------------------


def test_s5_every_served_reply_says_whether_and_where_its_conversation_was_kept(
    tmp_path: Path,
) -> None:
    """S5: kept for verified callers who name a session with the session skill; else why not."""
    access = AccessSpec(
        owner="env:OWNER", keys={"alice@example.com": "env:ALICE", "carol,x": "env:BETA"}
    )
    keeper = _served("keeper", access=access, skills=[SessionSkill(agent_dir=tmp_path)])
    forgetful = _served("forgetful", access=access)
    named = {**SEEDS_REQUEST, "metadata": {"session_id": "plan"}}
    unnamed = {**SEEDS_REQUEST, "metadata": {"source": "test"}}

    def state(agent: str, body: dict[str, Any], key: str | None, stream: bool = False) -> str:
        answer = client.post(
            f"/agents/{agent}/chat/completions",
            json={**body, "stream": stream},
            headers=_bearer(key),
        )
        assert answer.status_code == 200, answer.text
        return answer.headers.get("x-webagents-session", "(none)")

    with _client(keeper, forgetful) as client:
        seen = {
            "alice, named": state("keeper", named, "alice-key"),
            "alice, named, streamed": state("keeper", named, "alice-key", stream=True),
            "owner, named": state("keeper", named, "owner-key"),
            "alice, unnamed": state("keeper", unnamed, "alice-key"),
            "anonymous, named": state("keeper", named, None),
            "anonymous, named, streamed": state("keeper", named, None, stream=True),
            "an identity naming no namespace": state("keeper", named, "beta-key"),
            "no session skill": state("forgetful", named, "alice-key"),
        }
    assert seen == {
        "alice, named": "kept; where=local",
        "alice, named, streamed": "kept; where=local",
        "owner, named": "kept; where=local",
        "alice, unnamed": "not-kept; reason=no-session-id",
        "anonymous, named": "not-kept; reason=anonymous",
        "anonymous, named, streamed": "not-kept; reason=anonymous",
        "an identity naming no namespace": "not-kept; reason=identity-names-no-namespace",
        "no session skill": "not-kept; reason=no-session-skill",
    }
    store = keeper.agent.skill("session")
    assert isinstance(store, SessionSkill)
    kept = {
        namespace: [s.id for s in store.store.recent(namespace)]
        for namespace in ("owner", "caller:alice@example.com")
    }
    assert kept == {"owner": ["plan"], "caller:alice@example.com": ["plan"]}


# -- bullet: a client's system message and model options are never taken silently ---------------


def _ours(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith("x-webagents-")}


def test_r5_a_client_system_message_is_framed_as_the_callers_and_the_reply_says_so() -> None:
    """R5: the agent's own system prompt is sent unchanged; the client's is the caller's text."""
    model = ScriptedModel(["one", "two"])
    messages = [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "hello"},
    ]
    with _client(_served("helper", model)) as client:
        framed = client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        plain = client.post("/v1/chat/completions", json={"model": "m", "messages": messages[1:]})
    assert _ours(framed.headers) == {
        "x-webagents-session": "not-kept; reason=no-session-id",
        "x-webagents-client-system": "framed-as-caller",
    }
    assert _ours(plain.headers) == {"x-webagents-session": "not-kept; reason=no-session-id"}
    assert [r.messages for r in model.requests] == [
        [
            {"role": "system", "content": "You are helper."},
            {
                "role": "user",
                "content": "[The caller's own system message; it is the caller's text, not "
                "the agent's]\nYou are a pirate.",
            },
            {"role": "user", "content": "hello"},
        ],
        [{"role": "system", "content": "You are helper."}, {"role": "user", "content": "hello"}],
    ]


def test_server_model_options_a_client_sends_are_named_as_not_applied() -> None:
    """The agent's model settings are its owner's: a client's are listed, not silently lost."""
    model = ScriptedModel(["one", "two", "three"])
    base = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    options = {"temperature": 0.2, "max_tokens": 5, "top_p": None, "seed": 7}
    with _client(_served("helper", model)) as client:
        answers = [
            client.post("/v1/chat/completions", json={**base, **options}),
            client.post("/v1/chat/completions", json={**base, **options, "stream": True}),
            client.post("/v1/chat/completions", json={**base, "top_p": None, "n": 1}),
        ]
    assert [(a.status_code, _ours(a.headers)) for a in answers] == [
        (
            200,
            {
                "x-webagents-session": "not-kept; reason=no-session-id",
                "x-webagents-ignored": "max_tokens, seed, temperature",
            },
        ),
        (
            200,
            {
                "x-webagents-session": "not-kept; reason=no-session-id",
                "x-webagents-ignored": "max_tokens, seed, temperature",
            },
        ),
        (200, {"x-webagents-session": "not-kept; reason=no-session-id"}),
    ]


def test_server_odd_option_names_are_counted_never_echoed_into_a_header() -> None:
    """A field name is the client's text: a line break or any character stays out of headers."""
    odd = {"\u0100": 1, "a\r\nX-Evil: 1": 2, **{f"opt{i:02}": i for i in range(20)}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], **odd}
    with _client(_served("helper")) as client:
        answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    assert _ours(answer.headers) == {
        "x-webagents-session": "not-kept; reason=no-session-id",
        "x-webagents-ignored": ", ".join(f"opt{i:02}" for i in range(16)) + ", +6 more",
    }
