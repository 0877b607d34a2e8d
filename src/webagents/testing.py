"""Models and a model server for tests, demos and benchmarks: nothing here reaches a network.

- `ScriptedModel`: a queue of replies and tool calls; it raises `ScriptMismatch` as soon as
  the run and the script disagree (called once too often, a tool the request does not offer).
- `FunctionModel`: replies computed by a function of the request.
- `OfflineModel`: the scripted model behind `--offline` and `make demo`.
- `ScriptedServer`: any of these behind a real OpenAI-compatible HTTP endpoint on a free
  loopback port, for end-to-end tests of processes that speak to a model over HTTP.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from starlette.responses import JSONResponse

from .model import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)


class ScriptMismatch(AssertionError):
    """The run asked the scripted model for something the script does not say."""


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    name: str
    arguments: str
    id: str | None = None
    offered: bool = True
    """Whether the request must offer the tool (False scripts a model calling a made-up tool)."""


@dataclass(frozen=True, slots=True)
class Reply:
    text: str | None = None
    calls: tuple[ScriptedCall, ...] = ()
    usage: Usage | None = None


def call(
    name: str, arguments: dict[str, Any] | str | None = None, /, **kwargs: Any
) -> ScriptedCall:
    """A scripted tool call: `call("memory_write", key="tone", content="dry")`.

    Pass a string as `arguments` to send exactly that text (to test malformed JSON).
    """
    if isinstance(arguments, str):
        return ScriptedCall(name, arguments)
    return ScriptedCall(name, json.dumps({**(arguments or {}), **kwargs}))


def call_unoffered(name: str, arguments: dict[str, Any] | None = None) -> ScriptedCall:
    """A call to a tool the request does not offer, as a confused model makes."""
    return ScriptedCall(name, json.dumps(arguments or {}), offered=False)


def reply(text: str | None = None, *calls: ScriptedCall, usage: Usage | None = None) -> Reply:
    """A scripted reply: text, tool calls, or both; `usage` is what the model reports."""
    return Reply(text, calls, usage)


Step = str | Reply | ScriptedCall | list[ScriptedCall] | Callable[[ModelRequest], Any]


def _as_reply(step: Any) -> Reply:
    if isinstance(step, Reply):
        return step
    if isinstance(step, str):
        return Reply(step)
    if isinstance(step, ScriptedCall):
        return Reply(None, (step,))
    if isinstance(step, list | tuple) and all(isinstance(c, ScriptedCall) for c in step):
        return Reply(None, tuple(step))
    if isinstance(step, ModelResponse):
        return Reply(
            step.content,
            tuple(ScriptedCall(c.name, c.arguments, c.id) for c in step.tool_calls),
            step.usage,
        )
    raise TypeError(
        f"a script step is text, reply(...), call(...) or a list of calls, not {step!r}"
    )


def _offered(request: ModelRequest) -> list[str]:
    return [t["function"]["name"] for t in request.tools if t.get("type") == "function"]


def _chunks(text: str) -> list[str]:
    """Split text the way a streaming model sends it: a few characters at a time."""
    return re.findall(r"\S*\s*", text)[:-1] or [text]


class _RecordingModel(Model):
    """Keeps every request it was sent, and reports usage when the step gives none."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[ModelRequest] = []
        self._calls = 0

    def _response(self, request: ModelRequest, step: Reply) -> ModelResponse:
        offered = _offered(request)
        for scripted in step.calls:
            if scripted.offered and scripted.name not in offered:
                raise ScriptMismatch(
                    f"model call {self._calls} calls tool {scripted.name!r}, but the request "
                    f"offers {offered or 'no tools'}"
                )
        calls = tuple(
            ToolCall(c.id or f"call_{self._calls}_{i}", c.name, c.arguments)
            for i, c in enumerate(step.calls)
        )
        usage = step.usage or Usage(
            estimate_tokens(request.messages, request.tools),
            max(1, len(step.text or "") // 4 + 10 * len(calls)),
        )
        return ModelResponse(step.text, calls, usage, "tool_calls" if calls else "stop")

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        response = await self.complete(request)
        for piece in _chunks(response.content or ""):
            yield TextDelta(piece)
            await asyncio.sleep(0)
        yield response


class ScriptedModel(_RecordingModel):
    """Replies from a script, in order. Each step is one model call.

    A step is text, `reply(text, call(...), ...)`, a `call(...)` or a list of calls, or a
    function of the request returning one of those. `requests` keeps what the model was
    sent, for assertions; `assert_finished()` checks that the whole script was used.
    """

    def __init__(self, script: Iterable[Step] = (), *, name: str = "scripted") -> None:
        super().__init__(name)
        self._script: deque[Step] = deque(script)
        self._total = len(self._script)

    def add(self, *steps: Step) -> None:
        self._script.extend(steps)
        self._total += len(steps)

    @property
    def remaining(self) -> int:
        return len(self._script)

    def assert_finished(self) -> None:
        if self._script:
            raise ScriptMismatch(f"{len(self._script)} scripted replies were never asked for")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self._calls += 1
        if not self._script:
            last = request.messages[-1] if request.messages else {}
            raise ScriptMismatch(
                f"the model was called {self._calls} times but the script has {self._total} "
                f"replies; the last message was {json.dumps(last)[:200]}"
            )
        step = self._script.popleft()
        if callable(step):
            step = step(request)
        return self._response(request, _as_reply(step))


class FunctionModel(_RecordingModel):
    """Replies computed by `fn(request)` (sync or async), returning any script step."""

    def __init__(
        self, fn: Callable[[ModelRequest], Any | Awaitable[Any]], *, name: str = "function"
    ) -> None:
        super().__init__(name)
        self._fn = fn

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self._calls += 1
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        return self._response(request, _as_reply(result))


OFFLINE_NOTICE = (
    "offline: replies come from the scripted model in webagents.testing, not a real one "
    "(set OPENAI_API_KEY or OPENAI_BASE_URL to talk to a real model)"
)


def _offline_reply(request: ModelRequest) -> Reply:
    last: Message = request.messages[-1] if request.messages else {}
    if last.get("role") == "tool":
        return Reply(f"Done. The tool said: {str(last.get('content'))[:300]}")
    text = str(last.get("content") or "").strip()
    offered = _offered(request)
    remember = re.match(r"(?i)^remember(?: that)?\s+(.+)$", text)
    if remember and "memory_write" in offered:
        content = remember.group(1)
        words = re.findall(r"[a-z0-9]+", content.lower())[:3] or ["note"]
        return Reply(
            None,
            (call("memory_write", key="-".join(words), content=content, description=content[:80]),),
        )
    if re.match(r"(?i)^what do you (remember|know)", text) and "memory_list" in offered:
        return Reply(None, (call("memory_list"),))
    turns = sum(1 for m in request.messages if m.get("role") == "user")
    return Reply(
        f"(offline scripted model, turn {turns}) You said: {text!r}. I can't think offline, "
        "but everything around me works: the chat, the slash commands and my skills' tools."
    )


class OfflineModel(FunctionModel):
    """The demo's model: answers in canned sentences and uses a few tools when asked."""

    def __init__(self) -> None:
        super().__init__(_offline_reply, name="offline-scripted")


# ---------------------------------------------------------------------------------------------
# A real OpenAI-compatible HTTP endpoint around any Model


@dataclass
class ScriptedServer:
    """Serve a model at `base_url` (http://127.0.0.1:<free port>/v1) from a background thread.

    Use as a context manager. `bodies` keeps every request body as received; `errors` keeps
    what went wrong inside the model (a `ScriptMismatch`, say), which also answers HTTP 500.
    """

    model: Model
    host: str = "127.0.0.1"
    bodies: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    port: int = 0
    _thread: threading.Thread | None = None
    _server: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response, StreamingResponse
        from starlette.routing import Route

        async def completions(request: Request) -> Response:
            body = await request.json()
            self.bodies.append(body)
            model_request = ModelRequest(
                list(body.get("messages", [])), list(body.get("tools") or [])
            )
            created = int(time.time())
            reply_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
            name = body.get("model", self.model.name)
            if not body.get("stream"):
                try:
                    response = await self.model.complete(model_request)
                except Exception as exc:
                    return self._failure(exc)
                return JSONResponse(_completion_json(reply_id, created, name, response))
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = self.model.stream(model_request)
            try:  # fail before the first byte, with a status, when the model fails at once
                first = await anext(events)
            except Exception as exc:
                return self._failure(exc)
            return StreamingResponse(
                _sse(first, events, reply_id, created, name, include_usage),
                media_type="text/event-stream",
            )

        async def models(request: Request) -> Response:
            return JSONResponse(
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.model.name,
                            "object": "model",
                            "created": 0,
                            "owned_by": "webagents.testing",
                        }
                    ],
                }
            )

        return Starlette(
            routes=[
                Route("/v1/chat/completions", completions, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
            ]
        )

    def _failure(self, exc: Exception) -> JSONResponse:
        self.errors.append(f"{type(exc).__name__}: {exc}")
        return JSONResponse(
            {
                "error": {
                    "message": f"{type(exc).__name__}: {exc}",
                    "type": "server_error",
                    "code": "scripted_model_error",
                }
            },
            status_code=500,
        )

    def start(self) -> ScriptedServer:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"scripted-model-{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the scripted model server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # a test ends: no need to wait for slow replies
            self._thread.join(timeout=10)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _message_json(response: ModelResponse) -> dict[str, Any]:
    message = response.to_message()
    message.setdefault("refusal", None)
    return message


def _completion_json(
    reply_id: str, created: int, name: str, response: ModelResponse
) -> dict[str, Any]:
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": created,
        "model": name,
        "choices": [
            {
                "index": 0,
                "message": _message_json(response),
                "logprobs": None,
                "finish_reason": response.finish_reason or "stop",
            }
        ],
        "usage": (response.usage or Usage()).as_dict(),
    }


async def _sse(
    first: TextDelta | ModelResponse,
    rest: AsyncIterator[TextDelta | ModelResponse],
    reply_id: str,
    created: int,
    name: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        choices = (
            []
            if usage is not None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        payload: dict[str, Any] = {
            "id": reply_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": choices,
        }
        if usage is not None:
            payload["usage"] = usage
        return f"data: {json.dumps(payload)}\n\n".encode()

    yield chunk({"role": "assistant", "content": ""})
    item: TextDelta | ModelResponse | None = first
    response: ModelResponse | None = None
    while item is not None:
        if isinstance(item, TextDelta):
            yield chunk({"content": item.text})
        else:
            response = item
        item = await anext(rest, None)
    assert response is not None
    for index, tool_call in enumerate(response.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": tool_call.id,
                        "type": "function",
                        "function": {"name": tool_call.name, "arguments": ""},
                    }
                ]
            }
        )
        yield chunk(
            {"tool_calls": [{"index": index, "function": {"arguments": tool_call.arguments}}]}
        )
    yield chunk({}, response.finish_reason or "stop")
    if include_usage:
        yield chunk({}, usage=(response.usage or Usage()).as_dict())
    yield b"data: [DONE]\n\n"
