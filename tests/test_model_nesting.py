"""R3, R4: how deep what a model sends may nest. Tool arguments nested deeper than
MAX_NESTING are a tool error that says so (brackets inside strings are text, not nesting), and
arguments at the limit reach the tool; an endpoint's whole answer nested too deep to read is a
model error that names the endpoint. None is an internal error or leaves a traceback."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from webagents import Agent, tool
from webagents.chat_completions import OpenAIModel
from webagents.errors import ModelError, ToolError
from webagents.model import MAX_NESTING, ModelRequest, ToolCall, parse_arguments
from webagents.testing import AppServer, ScriptedModel, call

from .log_helpers import warnings_logged

TOO_DEEP = (
    f"arguments nest deeper than {MAX_NESTING} levels of arrays and objects, the most a tool "
    "call may; send flatter arguments"
)


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
    assert warnings_logged(caplog) == []


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
