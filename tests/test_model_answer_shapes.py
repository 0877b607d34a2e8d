"""Issue 11, malformed model answers (second review, finding 5): an endpoint's answer of the
wrong shape (a number where text belongs, a string where an object does) is a ModelError that
says what was wrong, so a served agent answers 502 model_error with one log line and no
traceback; content as a list of text parts is taken as text, and tool arguments given as a
JSON object are taken as that object, streamed or not. Was: 500 internal_error and a traceback
(AttributeError, TypeError, ValueError from deep in the client)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from webagents import Agent, Caller, TextDelta, TurnResult, tool
from webagents.access import AccessVerifier
from webagents.agent_spec import AccessSpec
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
from webagents.testing import AppServer

from .log_helpers import warnings_logged

MODEL_FAILED = (502, "the agent's model endpoint failed; try again later", "model_error")
TEXT = "not text (a string or a list of text parts)"
TOO_DEEP = (
    f"arguments nest deeper than {MAX_NESTING} levels of arrays and objects, the most a tool "
    "call may; send flatter arguments"
)


@dataclass
class _Answers:
    """What the raw endpoint answers a user's message: `body` as the whole JSON body (not
    streamed), `events` as its server-sent events, each its own `data:` line (streamed). A
    tool's result is answered "RESULT <its content>" in the well-formed shape."""

    body: Any = None
    events: list[Any] = field(default_factory=list)


@pytest.fixture
def raw() -> Iterator[tuple[_Answers, str]]:
    """A model endpoint that answers whatever a test sets, and its base URL."""
    answers = _Answers()

    async def completions(request: Request) -> Response:
        sent = await request.json()
        last = sent["messages"][-1]
        streamed = bool(sent.get("stream"))
        if last["role"] == "tool":
            text = f"RESULT {last['content']}"
            body: Any = {"choices": [{"message": {"role": "assistant", "content": text}}]}
            events: list[Any] = [{"choices": [{"delta": {"content": text}}]}]
        else:
            body, events = answers.body, answers.events
        if not streamed:
            return Response(json.dumps(body), media_type="application/json")

        async def stream() -> AsyncIterator[bytes]:
            for event in events:
                yield f"data: {json.dumps(event)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with AppServer(app) as server:
        yield answers, f"{server.url}/v1"


def _message(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", **fields}}]}


def _delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def _called(**call: Any) -> dict[str, Any]:
    return {"id": "c1", "type": "function", **call}


def _malformed(base_url: str, problem: str) -> str:
    return (
        f"the model endpoint at {base_url} answered a malformed completion: {problem}; check "
        "that it speaks the Chat Completions format"
    )


def _malformed_chunk(base_url: str, problem: str) -> str:
    return (
        f"the model endpoint at {base_url} streamed a malformed chunk: {problem}; check that "
        "it speaks the Chat Completions format"
    )


MALFORMED_BODIES = {
    "content a number": (_message(content=123), f"choices[0].message.content is a number, {TEXT}"),
    "content parts not text": (
        _message(content=[{"type": "text", "text": "hi"}, {"type": "image_url"}]),
        "choices[0].message.content[1] is a part of type 'image_url', not text",
    ),
    "content part a string": (
        _message(content=["hi"]),
        "choices[0].message.content[0] is a string, not an object",
    ),
    "usage a string": (
        {**_message(content="ok"), "usage": "many"},
        "usage is a string, not an object",
    ),
    "prompt_tokens a string": (
        {**_message(content="ok"), "usage": {"prompt_tokens": "many", "completion_tokens": 1}},
        "usage.prompt_tokens is a string, not a count of tokens",
    ),
    "completion_tokens negative": (
        {**_message(content="ok"), "usage": {"prompt_tokens": 1, "completion_tokens": -1}},
        "usage.completion_tokens is -1, not a count of tokens",
    ),
    "choices a string": ({"choices": "abc"}, "choices is a string, not a list"),
    "a choice a string": ({"choices": ["x"]}, "choices[0] is a string, not an object"),
    "message a string": (
        {"choices": [{"message": "hello"}]},
        "choices[0].message is a string, not an object",
    ),
    "finish_reason a number": (
        {"choices": [{"message": {"content": "ok"}, "finish_reason": 1}]},
        "choices[0].finish_reason is a number, not a string",
    ),
    "tool_calls an object": (
        _message(content=None, tool_calls={"id": "c1"}),
        "choices[0].message.tool_calls is an object, not a list",
    ),
    "a tool call a string": (
        _message(content=None, tool_calls=["x"]),
        "choices[0].message.tool_calls[0] is a string, not an object",
    ),
    "a tool call's function a string": (
        _message(content=None, tool_calls=[_called(function="memory_search")]),
        "choices[0].message.tool_calls[0].function is a string, not an object",
    ),
    "a tool call's id a number": (
        _message(content=None, tool_calls=[{"id": 5, "function": {"name": "f"}}]),
        "choices[0].message.tool_calls[0].id is a number, not a string",
    ),
    "a tool's name a list": (
        _message(content=None, tool_calls=[_called(function={"name": ["f"]})]),
        "choices[0].message.tool_calls[0].function.name is a list, not a string",
    ),
    "arguments a list": (
        _message(content=None, tool_calls=[_called(function={"name": "f", "arguments": [1]})]),
        "choices[0].message.tool_calls[0].function.arguments is a list, not a JSON object or "
        "its text",
    ),
}

MALFORMED_STREAMS = {
    "content a number": ([_delta(content=5)], f"choices[0].delta.content is a number, {TEXT}"),
    "usage a string": (
        [_delta(content="ok"), {"choices": [], "usage": "many"}],
        "usage is a string, not an object",
    ),
    "prompt_tokens a string": (
        [_delta(content="ok"), {"choices": [], "usage": {"prompt_tokens": "x"}}],
        "usage.prompt_tokens is a string, not a count of tokens",
    ),
    "choices a string": (['{"choices": "abc"}'], "choices is a string, not a list"),
    "a chunk a list": ([[1, 2]], "the chunk is a list, not an object"),
    "a choice a string": ([{"choices": ["x"]}], "choices[0] is a string, not an object"),
    "delta a string": (
        [{"choices": [{"delta": "hi"}]}],
        "choices[0].delta is a string, not an object",
    ),
    "tool call index a string": (
        [_delta(tool_calls=[{"index": "0", "id": "c", "function": {"name": "f"}}])],
        "choices[0].delta.tool_calls[0].index is a string, not a whole number",
    ),
    "tool call index true": (
        [_delta(tool_calls=[{"index": True, "id": "c", "function": {"name": "f"}}])],
        "choices[0].delta.tool_calls[0].index is true or false, not a whole number",
    ),
    "arguments a number": (
        [_delta(tool_calls=[{"index": 0, "function": {"name": "f", "arguments": 7}}])],
        "choices[0].delta.tool_calls[0].function.arguments is a number, not a JSON object or "
        "its text",
    ),
}


def _events(strings_or_chunks: list[Any]) -> list[Any]:
    """Events as sent: a str is sent as it is (already JSON text), anything else as JSON."""
    return [json.loads(e) if isinstance(e, str) else e for e in strings_or_chunks]


# -- the client: a ModelError naming what was wrong ----------------------------------------------


@pytest.mark.parametrize("case", MALFORMED_BODIES)
async def test_r3_a_malformed_completion_is_a_model_error_that_names_it(
    case: str, raw: tuple[_Answers, str]
) -> None:
    answers, base_url = raw
    answers.body, problem = MALFORMED_BODIES[case]
    model = OpenAIModel("odd", base_url=base_url, api_key="k", max_retries=0)
    with pytest.raises(ModelError) as caught:
        await model.complete(ModelRequest([{"role": "user", "content": "hi"}]))
    await model.aclose()
    assert str(caught.value) == _malformed(base_url, problem)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("case", MALFORMED_STREAMS)
async def test_r3_a_malformed_streamed_chunk_is_a_model_error_that_names_it(
    case: str, raw: tuple[_Answers, str]
) -> None:
    answers, base_url = raw
    events, problem = MALFORMED_STREAMS[case]
    answers.events = _events(events)
    model = OpenAIModel("odd", base_url=base_url, api_key="k", max_retries=0)
    with pytest.raises(ModelError) as caught:
        _ = [item async for item in model.stream(ModelRequest([{"role": "user", "content": "hi"}]))]
    await model.aclose()
    assert str(caught.value) == _malformed_chunk(base_url, problem)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# -- over HTTP: 502 model_error, one log line ----------------------------------------------------


@tool
def look_up(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def _serve(model: Model) -> TestClient:
    agent = Agent("helper", "Help.", tools=[look_up], model=model)
    verifier = AccessVerifier(
        AccessSpec(keys={"alice@example.com": "env:ALICE"}), environ={"ALICE": "a"}
    )
    return TestClient(create_app(AgentHost([ServedAgent(agent, verifier)])))


def _post(client: TestClient, stream: bool) -> tuple[int, str, Any]:
    """(status, what was said, the error's (status, message, code) or None)."""
    answer = client.post(
        "/v1/chat/completions",
        json={"model": "helper", "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        headers={"Authorization": "Bearer a"},
    )
    if not stream:
        if answer.status_code != 200:
            error = answer.json()["error"]
            return answer.status_code, "", (answer.status_code, error["message"], error["code"])
        return 200, answer.json()["choices"][0]["message"]["content"], None
    events = [line[6:] for line in answer.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    errors = [c["error"] for c in chunks if "error" in c]
    said = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if "choices" in c)
    if errors:
        assert errors[0]["type"] == "server_error" and len(errors) == 1
        return answer.status_code, said, (502, errors[0]["message"], errors[0]["code"])
    return answer.status_code, said, None


@pytest.mark.parametrize(
    ("stream", "case"),
    [(False, case) for case in MALFORMED_BODIES] + [(True, case) for case in MALFORMED_STREAMS],
)
def test_r3_a_malformed_model_answer_is_502_model_error_with_one_log_line(
    stream: bool, case: str, raw: tuple[_Answers, str], caplog: pytest.LogCaptureFixture
) -> None:
    answers, base_url = raw
    if stream:
        events, problem = MALFORMED_STREAMS[case]
        answers.events = _events(events)
        error = _malformed_chunk(base_url, problem)
    else:
        answers.body, problem = MALFORMED_BODIES[case]
        error = _malformed(base_url, problem)
    model = OpenAIModel("odd", base_url=base_url, api_key="k", max_retries=0)
    with caplog.at_level(logging.INFO), _serve(model) as client:
        status, said, failed = _post(client, stream)
    assert (status, failed) == (200 if stream else 502, MODEL_FAILED)
    assert said == ("ok" if case in {"usage a string", "prompt_tokens a string"} and stream else "")
    assert warnings_logged(caplog) == [("webagents.server", f"the model failed: {error}", False)]


# -- accepted shapes: text parts, arguments as an object -----------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_r3_content_as_a_list_of_text_parts_is_taken_as_text(
    stream: bool, raw: tuple[_Answers, str], caplog: pytest.LogCaptureFixture
) -> None:
    answers, base_url = raw
    parts = [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo."}]
    answers.body = _message(content=parts)
    answers.events = [_delta(content=parts[:1]), _delta(content=[]), _delta(content=parts[1:])]
    model = OpenAIModel("parts", base_url=base_url, api_key="k", max_retries=0)
    with caplog.at_level(logging.INFO), _serve(model) as client:
        assert _post(client, stream) == (200, "Hello.", None)
    assert warnings_logged(caplog) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_r3_tool_arguments_as_a_json_object_are_taken_as_that_object(
    stream: bool, raw: tuple[_Answers, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Was: "the tool failed unexpectedly (AttributeError)" and a traceback (not streamed), a
    TypeError and 500 (streamed). The conversation keeps the arguments as their JSON text, as
    the Chat Completions format has them."""
    answers, base_url = raw
    function = {"name": "look_up", "arguments": {"query": "tea"}}
    answers.body = _message(content=None, tool_calls=[_called(function=function)])
    answers.events = [_delta(tool_calls=[{"index": 0, "id": "c1", "function": function}])]
    model = OpenAIModel("objects", base_url=base_url, api_key="k", max_retries=0)
    agent = Agent("helper", tools=[look_up], model=model)
    with caplog.at_level(logging.INFO):
        if stream:
            conversation = await agent.start(caller=Caller.owner())
            result = [event async for event in conversation.stream("tea?")][-1]
        else:
            result = await agent.run("tea?")
    await model.aclose()
    assert isinstance(result, TurnResult)
    assert result.output == "RESULT found tea"
    assert result.messages[:2] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "look_up", "arguments": '{"query": "tea"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found tea"},
    ]
    assert warnings_logged(caplog) == []


def test_r4_parse_arguments_takes_an_object_as_that_object() -> None:
    """For any Model: one that hands over the arguments as a dict, not their JSON text."""
    given: Any = {"query": "tea", "options": {"deep": [1, 2]}, "text": "caf\u00e9"}
    assert parse_arguments(ToolCall("c1", "look_up", given)) == given


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        ([1, 2], "arguments must be a JSON object or its text, not a list"),
        (7, "arguments must be a JSON object or its text, not a number"),
        (None, "arguments must be a JSON object or its text, not null"),
        (True, "arguments must be a JSON object or its text, not true or false"),
        ({"a": {1, 2}}, "arguments must be a JSON object; these hold values JSON has not"),
        (_nested(MAX_NESTING + 1), TOO_DEEP),
        (_nested(100_000), TOO_DEEP),  # deeper than json.dumps can write
    ],
)
def test_r4_parse_arguments_refuses_what_is_neither_text_nor_an_object(
    arguments: Any, refused: str
) -> None:
    with pytest.raises(ToolError) as caught:
        parse_arguments(ToolCall("c1", "look_up", arguments))
    assert str(caught.value) == refused


def test_r4_arguments_as_an_object_at_the_nesting_limit_are_taken() -> None:
    given = _nested(MAX_NESTING)
    assert parse_arguments(ToolCall("c1", "look_up", given)) == given  # type: ignore[arg-type]


async def test_r3_tool_arguments_of_another_kind_are_a_tool_error_that_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class _ListArguments(Model):
        name = "lists"
        calls = 0

        async def complete(self, request: ModelRequest) -> ModelResponse:
            self.calls += 1
            if self.calls == 1:
                return ModelResponse(None, (ToolCall("c1", "look_up", [1]),))  # type: ignore[arg-type]
            return ModelResponse("gave up")

    with caplog.at_level(logging.INFO):
        result = await Agent("helper", tools=[look_up], model=_ListArguments()).run("tea?")
    assert result.output == "gave up"
    assert result.messages[1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Error: arguments must be a JSON object or its text, not a list",
    }
    assert warnings_logged(caplog) == []


# -- any Model: text that is not text ------------------------------------------------------------


class _NumberModel(Model):
    """A Model that replies with a number where the text belongs, as a whole or as a delta."""

    name = "numbers"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(42)  # type: ignore[arg-type]

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        yield TextDelta(4)  # type: ignore[arg-type]
        yield await self.complete(request)


NOT_TEXT = "the model numbers replied with content that is a number (int), not text"


@pytest.mark.parametrize("stream", [False, True])
async def test_r3_a_models_content_that_is_not_text_is_a_model_error(
    stream: bool,
) -> None:
    conversation = await Agent("helper", model=_NumberModel()).start(caller=Caller.owner())
    with pytest.raises(ModelError) as caught:
        if stream:
            _ = [event async for event in conversation.stream("hi")]
        else:
            await conversation.send("hi")
    assert str(caught.value) == NOT_TEXT


@pytest.mark.parametrize("stream", [False, True])
def test_r3_a_models_content_that_is_not_text_is_502_over_http(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO), _serve(_NumberModel()) as client:
        assert _post(client, stream) == (200 if stream else 502, "", MODEL_FAILED)
    assert warnings_logged(caplog) == [("webagents.server", f"the model failed: {NOT_TEXT}", False)]


async def test_r3_tool_arguments_as_an_object_nested_too_deep_are_a_tool_error(
    raw: tuple[_Answers, str], caplog: pytest.LogCaptureFixture
) -> None:
    answers, base_url = raw
    function = {"name": "look_up", "arguments": _nested(500)}
    answers.body = _message(content=None, tool_calls=[_called(function=function)])
    model = OpenAIModel("objects", base_url=base_url, api_key="k", max_retries=0)
    with caplog.at_level(logging.INFO):
        result = await Agent("helper", tools=[look_up], model=model).run("tea?")
    await model.aclose()
    assert result.output == f"RESULT Error: {TOO_DEEP}"
    assert result.messages[1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": f"Error: {TOO_DEEP}",
    }
    assert warnings_logged(caplog) == []


async def test_r3_tool_arguments_as_an_object_with_a_lone_surrogate_stay_escaped(
    raw: tuple[_Answers, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The object's text keeps the `\\ud800` escape it came with (no file or reply can hold
    the lone surrogate itself), and the tool refuses it as it refuses it in text."""
    answers, base_url = raw
    function = {"name": "look_up", "arguments": {"query": "caf\u00e9 \ud800"}}
    answers.body = _message(content=None, tool_calls=[_called(function=function)])
    model = OpenAIModel("objects", base_url=base_url, api_key="k", max_retries=0)
    with caplog.at_level(logging.INFO):
        result = await Agent("helper", tools=[look_up], model=model).run("tea?")
    await model.aclose()
    arguments = result.messages[0]["tool_calls"][0]["function"]["arguments"]
    assert arguments == '{"query": "caf\\u00e9 \\ud800"}'
    assert result.messages[1]["content"] == (
        "Error: invalid arguments: query: the text holds a lone surrogate (a \\ud800 to \\udfff "
        "escape without its pair), which is not Unicode; send it without one"
    )
    assert warnings_logged(caplog) == []
