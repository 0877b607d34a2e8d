"""R3: the openai skill's model over real HTTP, against the scripted OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from webagents import (
    Agent,
    Caller,
    TextDelta,
    ToolCallFinished,
    TurnResult,
    Usage,
    load_agent,
    tool,
)
from webagents.errors import ModelError
from webagents.model import ModelRequest
from webagents.skills.openai import OpenAIModel
from webagents.testing import AppServer, FunctionModel, ScriptedModel, ScriptedServer, call, reply

from .conftest import write_agent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def scripted() -> Iterator[tuple[ScriptedModel, ScriptedServer]]:
    model = ScriptedModel()
    with ScriptedServer(model) as server:
        yield model, server


async def test_r3_base_url_from_the_environment_and_a_tool_loop(
    scripted: tuple[ScriptedModel, ScriptedServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, server = scripted
    model.add(
        reply(None, call("add", a=2, b=2), call("add", a=1, b=1), usage=Usage(50, 9)),
        reply("4 and 2.", usage=Usage(80, 3)),
    )
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    folder = write_agent(
        tmp_path / "calc", "model: openai/test-model\nskills:\n  - openai: {temperature: 0}"
    )
    agent = load_agent(folder)
    agent = Agent(
        agent.name,
        agent.instructions,
        skills=agent.skills,
        tools=[add],
        model_name="openai/test-model",
    )
    result = await agent.run("2+2 and 1+1")
    await agent.aclose()

    assert result.output == "4 and 2."
    assert (result.usage, result.model_calls) == (Usage(130, 12), 2)
    first, second = server.bodies
    assert (first["model"], first["temperature"], first.get("stream")) == ("test-model", 0, None)
    assert [t["function"]["name"] for t in first["tools"]] == ["add"]
    assert first["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2 and 1+1"},
    ]
    assert [m["role"] for m in second["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
    ]
    assert [m.get("content") for m in second["messages"][3:]] == ["4", "2"]


async def test_r3_streaming_over_http_with_tool_calls_and_usage(
    scripted: tuple[ScriptedModel, ScriptedServer],
) -> None:
    model, server = scripted
    model.add(
        reply("Adding.", call("add", a=20, b=22), usage=Usage(33, 5)),
        reply("The answer is 42, of course.", usage=Usage(60, 8)),
    )
    openai_model = OpenAIModel("m", base_url=server.base_url)
    conversation = await Agent("calc", tools=[add], model=openai_model).start(caller=Caller.owner())
    events = [e async for e in conversation.stream("20+22?")]
    await openai_model.aclose()

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 3
    assert "".join(deltas) == "Adding.The answer is 42, of course."
    assert [
        (e.call.name, e.call.arguments, e.output) for e in events if isinstance(e, ToolCallFinished)
    ] == [("add", '{"a": 20, "b": 22}', "42")]
    result = events[-1]
    assert isinstance(result, TurnResult)
    assert (result.output, result.usage) == ("The answer is 42, of course.", Usage(93, 13))
    assert all(body["stream"] is True for body in server.bodies)
    assert all(body["stream_options"] == {"include_usage": True} for body in server.bodies)


async def test_r3_endpoint_errors_become_model_errors_that_say_what_to_check(
    scripted: tuple[ScriptedModel, ScriptedServer],
) -> None:
    _, server = scripted  # an empty script: the server answers 500
    model = OpenAIModel("m", base_url=server.base_url, max_retries=0)
    request = ModelRequest([{"role": "user", "content": "hi"}])
    with pytest.raises(ModelError, match=rf"the model endpoint at {server.base_url} answered 500"):
        await model.complete(request)
    with pytest.raises(ModelError, match="answered 500"):
        [item async for item in model.stream(request)]
    await model.aclose()
    assert server.errors[0].startswith("ScriptMismatch: the model was called 1 times")


async def test_r3_an_unreachable_endpoint_names_the_url() -> None:
    model = OpenAIModel(
        "m", base_url="http://127.0.0.1:9/v1", max_retries=0
    )  # port 9: nothing listens
    with pytest.raises(ModelError) as caught:
        await model.complete(ModelRequest([{"role": "user", "content": "hi"}]))
    assert str(caught.value) == (
        "cannot reach the model endpoint at http://127.0.0.1:9/v1: check OPENAI_BASE_URL "
        "and that the server is running"
    )
    await model.aclose()


def test_scripted_server_speaks_chat_completions_to_plain_http(
    scripted: tuple[ScriptedModel, ScriptedServer],
) -> None:
    model, server = scripted
    model.add("plain")
    listed = httpx.get(f"{server.base_url}/models").json()
    assert listed["data"][0]["id"] == "scripted"
    answer = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
    ).json()
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": "plain",
        "refusal": None,
    }
    assert (
        answer["usage"]["total_tokens"]
        == answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
    )


def test_r3_the_environments_key_goes_only_to_the_environments_endpoint(
    scripted: tuple[ScriptedModel, ScriptedServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, server = scripted
    model.add("via env", "via file", "via file with its key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own-key")
    monkeypatch.setenv("FILE_ENDPOINT_KEY", "sk-for-that-endpoint")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    env_agent = load_agent(write_agent(tmp_path / "env", "model: openai/m"))
    named = f"model: openai/m\nskills:\n  - openai: {{base_url: '{server.base_url}'}}"
    file_agent = load_agent(write_agent(tmp_path / "file", named))
    keyed = named.replace("'}", "', api_key: env:FILE_ENDPOINT_KEY}")
    keyed_agent = load_agent(write_agent(tmp_path / "keyed", keyed))
    assert [a.run_sync("hi").output for a in (env_agent, file_agent, keyed_agent)] == [
        "via env",
        "via file",
        "via file with its key",
    ]
    assert server.authorizations == [
        "Bearer sk-the-users-own-key",
        None,  # an endpoint named in the file, with no key of its own: no key at all
        "Bearer sk-for-that-endpoint",
    ]


def test_r4_run_sync_can_be_called_again(scripted: tuple[ScriptedModel, ScriptedServer]) -> None:
    model, server = scripted
    model.add("one", "two", "three")
    agent = Agent("a", model=OpenAIModel("m", base_url=server.base_url))
    assert [agent.run_sync(text).output for text in ("1", "2", "3")] == ["one", "two", "three"]


async def test_r3_server_errors_are_retried_and_client_errors_are_not() -> None:
    calls: list[str] = []

    def flaky(request: ModelRequest) -> str:
        calls.append(request.messages[-1]["content"])
        if len(calls) == 1:
            raise RuntimeError("a passing failure")  # the scripted server answers 500
        return "fine"

    with ScriptedServer(FunctionModel(flaky)) as server:
        model = OpenAIModel("m", base_url=server.base_url, max_retries=2)
        answer = await model.complete(ModelRequest([{"role": "user", "content": "hi"}]))
        assert (answer.content, calls) == ("fine", ["hi", "hi"])
        await model.aclose()

    # A 400 is the request's own fault: sending it again would not help.
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    hits: list[int] = []

    async def refuse(request: object) -> JSONResponse:
        hits.append(1)
        return JSONResponse({"error": {"message": "context too long"}}, status_code=400)

    with AppServer(
        Starlette(routes=[Route("/v1/chat/completions", refuse, methods=["POST"])])
    ) as server:
        model = OpenAIModel("m", base_url=f"{server.url}/v1", max_retries=2)
        with pytest.raises(ModelError, match=r"answered 400: context too long"):
            await model.complete(ModelRequest([{"role": "user", "content": "hi"}]))
        assert hits == [1]
        await model.aclose()


async def test_r3_an_error_in_the_middle_of_a_stream_is_a_model_error() -> None:
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def broken(request: object) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "Hal"}}]}\n\n'
            yield b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'

        return StreamingResponse(events(), media_type="text/event-stream")

    with AppServer(
        Starlette(routes=[Route("/v1/chat/completions", broken, methods=["POST"])])
    ) as server:
        model = OpenAIModel("m", base_url=f"{server.url}/v1", max_retries=0)
        seen: list[object] = []
        with pytest.raises(ModelError, match="failed while answering: overloaded"):
            async for item in model.stream(ModelRequest([{"role": "user", "content": "hi"}])):
                seen.append(item)
        assert seen == [TextDelta("Hal")]
        await model.aclose()
