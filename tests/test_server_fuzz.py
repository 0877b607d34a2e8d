"""Section 6: generated requests against the server's own OpenAPI schema find no 500s."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.budgets import examples
from webagents import Agent
from webagents.access import AccessVerifier
from webagents.agent_spec import AccessSpec
from webagents.model import ModelRequest
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.testing import FunctionModel, ProbeSkill, Reply, call


def _model(request: ModelRequest) -> Any:
    last = request.messages[-1]
    return (
        Reply("seen: " + str(last.get("content"))[:50])
        if last["role"] == "tool"
        else call("whoami")
    )


def _app() -> Any:
    agent = Agent(
        "helper", "Report the caller.", skills=[ProbeSkill()], model=FunctionModel(_model)
    )
    verifier = AccessVerifier(
        AccessSpec(owner="env:OWNER", keys={"alice@example.com": "env:ALICE"}),
        environ={"OWNER": "owner-key", "ALICE": "alice-key"},
    )
    return create_app(AgentHost([ServedAgent(agent, verifier)]), max_body_bytes=64 * 1024)


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_the_schema_allows_gets_a_500(case: Any) -> None:
    # Aim the generated bodies at the served agent, so that they reach it, as alice.
    if case.path_parameters is not None and "name" in case.path_parameters:
        case.path_parameters["name"] = "helper"
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = "helper"
    case.headers = {**(case.headers or {}), "Authorization": "Bearer alice-key"}
    response = case.call()
    assert response.status_code < 500, (case.body, response.text)
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"]


_client = TestClient(_app())

_text = st.text(max_size=300)
_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
        "content": st.one_of(_text, st.none()),
    }
)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    history=st.lists(_message, max_size=4),
    last=_text,
    stream=st.booleans(),
    metadata=st.dictionaries(st.sampled_from(["session_id", "source"]), _text, max_size=2),
    key=st.sampled_from([None, "alice-key", "owner-key", "wrong-key"]),
)
def test_conversations_of_any_text_are_answered_or_refused_never_500(
    history: list[dict[str, Any]],
    last: str,
    stream: bool,
    metadata: dict[str, str],
    key: str | None,
) -> None:
    body = {
        "model": "helper",
        "stream": stream,
        "metadata": metadata,
        "messages": [*history, {"role": "user", "content": last}],
    }
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = _client.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code in (200, 400, 401), response.text
    if key == "wrong-key":
        assert response.status_code == 401
    elif response.status_code == 200 and not stream:
        assert response.json()["choices"][0]["message"]["content"].startswith("seen: ")
    elif response.status_code == 200:
        assert response.text.rstrip().endswith("data: [DONE]")
        assert '"error"' not in response.text
