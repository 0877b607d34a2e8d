"""R3, M4: text from a model that is not Unicode. A reply with a lone surrogate (which JSON's
`\\ud800` escape can carry) is answered and kept with U+FFFD in its place, streamed or not and
over HTTP; a lone surrogate in a tool's argument is a tool error that says so, and a surrogate
pair is text and is kept. Neither is an internal error or leaves a traceback in the log."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from webagents import Agent, Caller, TextDelta, TurnResult
from webagents.access import AccessVerifier
from webagents.agent_spec import AccessSpec
from webagents.chat_completions import OpenAIModel
from webagents.model import (
    Model,
    ModelRequest,
    ModelResponse,
)
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.skills.memory import MemorySkill
from webagents.skills.session import SessionSkill
from webagents.testing import FunctionModel, ScriptedModel, ScriptedServer, call

from .log_helpers import warnings_logged
from .memory_helpers import ALICE, use

LONE = "a\ud800b"
"""What a model endpoint that sends `"a\\ud800b"` gives: a str that is not Unicode."""
REPLACED = "a\ufffdb"
REPLACED_LOG = (
    "the model {} replied with text that is not Unicode (a lone surrogate, half of a UTF-16 "
    "pair); it is answered and kept with U+FFFD in its place"
)


@pytest.mark.parametrize("stream", [False, True])
async def test_r3_a_lone_surrogate_in_a_reply_is_answered_and_kept_as_u_fffd(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    conversation = await Agent("echo", model=FunctionModel(lambda _: LONE, name="odd")).start(
        caller=Caller.owner()
    )
    with caplog.at_level(logging.INFO):
        events = [event async for event in conversation.stream("hi")] if stream else []
        result = events[-1] if stream else await conversation.send("hi")
    assert isinstance(result, TurnResult)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert (result.output, streamed) == (REPLACED, REPLACED if stream else "")
    assert conversation.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": REPLACED},
    ]
    assert warnings_logged(caplog) == [("webagents.loop", REPLACED_LOG.format("odd"), False)]


class _Halves(Model):
    """Streams a surrogate pair split across two deltas, and a lone half at the very end."""

    name = "halves"
    pieces = ("x\ud83d", "\ude00y", "z\ud800")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse("".join(self.pieces))

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        for piece in self.pieces:
            yield TextDelta(piece)
        yield await self.complete(request)


async def test_r3_a_surrogate_pair_split_across_deltas_streams_as_what_is_kept() -> None:
    conversation = await Agent("echo", model=_Halves()).start(caller=Caller.owner())
    events = [event async for event in conversation.stream("hi")]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    result = events[-1]
    assert isinstance(result, TurnResult)
    assert deltas == ["x", "\U0001f600y", "z", "\ufffd"]
    assert result.output == "".join(deltas) == "x\U0001f600yz\ufffd"
    assert conversation.messages[-1] == {"role": "assistant", "content": "x\U0001f600yz\ufffd"}


@pytest.fixture
def odd_endpoint() -> Iterator[ScriptedServer]:
    """A real model endpoint whose every reply is `"a\\ud800b"` in JSON, streamed or not."""
    with ScriptedServer(FunctionModel(lambda _: LONE, name="odd")) as server:
        yield server


def test_scripted_server_sends_a_lone_surrogate_as_its_json_escape(
    odd_endpoint: ScriptedServer,
) -> None:
    """The fixture is what the review met: the escape on the wire, not a 500 of its own."""
    import httpx

    answer = httpx.post(
        f"{odd_endpoint.base_url}/chat/completions",
        json={"model": "odd", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 200
    assert b'"content": "a\\ud800b"' in answer.content
    assert answer.json()["choices"][0]["message"]["content"] == LONE


@pytest.mark.parametrize("stream", [False, True])
def test_r3_a_lone_surrogate_from_the_endpoint_is_answered_and_kept_over_http(
    stream: bool, odd_endpoint: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: 500 internal_error with two tracebacks (streamed: an error event and one), the
    turn kept and the reply lost."""
    model = OpenAIModel("odd", base_url=odd_endpoint.base_url, api_key="k")
    sessions = SessionSkill(agent_dir=tmp_path)
    agent = Agent("helper", "Help.", skills=[sessions], model=model)
    verifier = AccessVerifier(
        AccessSpec(keys={"alice@example.com": "env:ALICE"}), environ={"ALICE": "a"}
    )
    app = create_app(AgentHost([ServedAgent(agent, verifier)]))
    body = {
        "model": "helper",
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"session_id": "odd"},
        "stream": stream,
    }
    with caplog.at_level(logging.INFO), TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post(
            "/v1/chat/completions", json=body, headers={"Authorization": "Bearer a"}
        )
    assert answer.status_code == 200, answer.text
    if stream:
        events = [line[6:] for line in answer.text.split("\n\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert [c for c in chunks if "error" in c] == []
        said = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    else:
        said = answer.json()["choices"][0]["message"]["content"]
    assert said == REPLACED
    assert answer.headers["x-webagents-session"] == "kept; where=local"
    kept = sessions.store.load("caller:alice@example.com", "odd")
    assert kept is not None
    assert kept["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": REPLACED},
    ]
    assert odd_endpoint.errors == []
    assert warnings_logged(caplog) == [("webagents.loop", REPLACED_LOG.format("odd"), False)]


@pytest.mark.parametrize("argument", ["key", "content", "description"])
async def test_m4_a_lone_surrogate_in_a_memory_tool_argument_is_a_tool_error(
    tmp_path: Path, argument: str
) -> None:
    arguments = {"key": "plan", "content": "Lisbon", "description": "where"}
    raw = json.dumps(arguments).replace(f'"{arguments[argument]}"', '"half \\ud800 of a pair"')
    model = ScriptedModel([call("memory_write", raw), "noted"])
    skill = MemorySkill()
    agent = Agent("keeper", "Keep notes.", skills=[skill], model=model, directory=tmp_path)
    conversation = await agent.start(caller=ALICE)
    result = await conversation.send("remember this")
    assert result.output == "noted"
    assert result.messages[1] == {
        "role": "tool",
        "tool_call_id": result.messages[0]["tool_calls"][0]["id"],
        "content": f"Error: invalid arguments: {argument}: the text holds a lone surrogate (a "
        "\\ud800 to \\udfff escape without its pair), which is not Unicode; send it without one",
    }
    assert not skill.store.folder(ALICE.namespace).exists()


async def test_m4_a_surrogate_pair_in_a_memory_tool_argument_is_kept(tmp_path: Path) -> None:
    raw = '{"key": "plan", "content": "a smile \\ud83d\\ude00", "description": "\\ud83d\\ude00"}'
    model = ScriptedModel([call("memory_write", raw), "noted"])
    skill = MemorySkill()
    agent = Agent("keeper", "Keep notes.", skills=[skill], model=model, directory=tmp_path)
    result = await (await agent.start(caller=ALICE)).send("remember this")
    assert json.loads(result.messages[1]["content"])["saved"] == "plan"
    assert (await use(skill, ALICE, "memory_read", key="plan"))["content"] == "a smile 😀"
