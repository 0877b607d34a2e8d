"""Issue 11, odd model output (review finding 6): a reply whose text is not Unicode (a lone
surrogate, which JSON's `\\ud800` escape can carry) is answered and kept with U+FFFD in its
place, streamed or not; tool arguments nested too deep are a tool error that says so. Neither
is an internal error, and neither leaves a traceback in the log."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from webagents import Agent, TextDelta, TurnResult, tool
from webagents.access import AccessVerifier
from webagents.agent_file import AccessSpec
from webagents.chat_completions import OpenAIModel
from webagents.errors import ModelError, ToolError
from webagents.model import (
    MAX_NESTING,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
    parse_arguments,
)
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.skills.session import SessionSkill
from webagents.testing import AppServer, FunctionModel, ScriptedModel, ScriptedServer, call

LONE = "a\ud800b"
"""What a model endpoint that sends `"a\\ud800b"` gives: a str that is not Unicode."""
REPLACED = "a\ufffdb"
REPLACED_LOG = (
    "the model {} replied with text that is not Unicode (a lone surrogate, half of a UTF-16 "
    "pair); it is answered and kept with U+FFFD in its place"
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, bool]]:
    """Every record at WARNING or above: (logger, message, whether it carries a traceback)."""
    return [
        (r.name, r.getMessage(), r.exc_info is not None)
        for r in caplog.records
        if r.levelno >= logging.WARNING
    ]


# -- a lone surrogate in the reply's text --------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_r3_a_lone_surrogate_in_a_reply_is_answered_and_kept_as_u_fffd(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    conversation = await Agent("echo", model=FunctionModel(lambda _: LONE, name="odd")).start()
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
    assert _warnings(caplog) == [("webagents.loop", REPLACED_LOG.format("odd"), False)]


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
    conversation = await Agent("echo", model=_Halves()).start()
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
    assert _warnings(caplog) == [("webagents.loop", REPLACED_LOG.format("odd"), False)]


# -- tool arguments nested too deep --------------------------------------------------------------


def _deep_arguments(levels: int) -> str:
    """A tool call's arguments {"value": [[...]]}, `levels` deep with the object itself."""
    return '{"value": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


@tool
def depth(value: list[Any]) -> int:
    """How deep `value` nests."""
    levels, items = 1, value
    while items:
        levels, items = levels + 1, items[0]
    return levels


TOO_DEEP = (
    f"arguments nest deeper than {MAX_NESTING} levels of arrays and objects, the most a tool "
    "call may; send flatter arguments"
)


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 5000, 200_000])
async def test_r3_tool_arguments_nested_too_deep_are_a_tool_error_that_says_so(
    levels: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: "failed unexpectedly (RecursionError)" and a traceback from json.loads."""
    model = ScriptedModel([call("depth", _deep_arguments(levels)), "too deep, then"])
    with caplog.at_level(logging.INFO):
        result = await Agent("calc", tools=[depth], model=model).run("how deep?")
    assert result.output == "too deep, then"
    assert result.messages[1] == {
        "role": "tool",
        "tool_call_id": result.messages[0]["tool_calls"][0]["id"],
        "content": f"Error: {TOO_DEEP}",
    }
    assert _warnings(caplog) == []


async def test_r3_tool_arguments_at_the_nesting_limit_reach_the_tool() -> None:
    model = ScriptedModel([call("depth", _deep_arguments(MAX_NESTING)), "done"])
    result = await Agent("calc", tools=[depth], model=model).run("how deep?")
    assert result.messages[1]["content"] == str(MAX_NESTING - 1)  # the list, without the object


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # Brackets inside strings are text, not nesting, whatever escapes come before them.
        ('{"value": "' + "[" * 1000 + '"}', {"value": "[" * 1000}),
        ('{"value": "\\"' + "{" * 1000 + '"}', {"value": '"' + "{" * 1000}),
        ('{"value": "\\\\", "list": [[1]]}', {"value": "\\", "list": [[1]]}),
        # Past the limit, whether the rest would parse or not.
        ("[" * 5000, TOO_DEEP),
        ('{"value": ' + "[" * 100 + '"unclosed', TOO_DEEP),
        # A string left open hides what follows, as a parser stops there too.
        ('{"value": "unclosed' + "[" * 5000, "arguments are not valid JSON"),
    ],
)
def test_r4_argument_nesting_is_counted_outside_strings_only(
    arguments: str, expected: dict[str, Any] | str
) -> None:
    tool_call = ToolCall("call-1", "depth", arguments)
    if isinstance(expected, dict):
        assert parse_arguments(tool_call) == expected
    else:
        with pytest.raises(ToolError) as caught:
            parse_arguments(tool_call)
        assert str(caught.value).startswith(expected)


# -- a model endpoint's whole answer nested too deep --------------------------------------------


@pytest.fixture
def deep_endpoint() -> Iterator[AppServer]:
    """An endpoint whose answer (streamed or not) carries 5000 levels of nesting."""
    deep = "[" * 5000 + "]" * 5000

    async def completions(request: Request) -> Response:
        if not (await request.json()).get("stream"):
            body = '{"choices": [{"message": {"content": "hi", "extra": ' + deep + "}}]}"
            return Response(body, media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            yield b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
            yield b'data: {"choices": [{"delta": {"extra": ' + deep.encode() + b"}}]}\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with AppServer(app) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True])
async def test_r3_an_endpoint_answer_nested_too_deep_is_a_model_error(
    stream: bool, deep_endpoint: AppServer
) -> None:
    model = OpenAIModel("deep", base_url=f"{deep_endpoint.url}/v1", api_key="k", max_retries=0)
    request = ModelRequest([{"role": "user", "content": "hi"}])
    with pytest.raises(ModelError) as caught:
        if stream:
            _ = [item async for item in model.stream(request)]
        else:
            await model.complete(request)
    await model.aclose()
    assert str(caught.value) == (
        f"the model endpoint at {deep_endpoint.url}/v1 answered JSON nested too deeply to read "
        "(thousands of levels of arrays and objects): check the endpoint"
    )
