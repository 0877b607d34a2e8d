"""Models and a model server for tests, demos and benchmarks: nothing here reaches a network.

- `ScriptedModel`: a queue of replies and tool calls; it raises `ScriptMismatch` as soon as
  the run and the script disagree (called once too often, a tool the request does not offer).
- `FunctionModel`: replies computed by a function of the request.
- `ScriptedServer`: any of these behind a real OpenAI-compatible HTTP endpoint on a free
  loopback port, for end-to-end tests of processes that speak to a model over HTTP.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .context import Context
from .model import (
    Model,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)
from .offline import pieces
from .openai_wire import DONE, Completion, error_body, json_bytes
from .skills.base import Skill, tool


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


class _RecordingModel(Model):
    """Keeps every request it was sent, and reports usage (an estimate when the step gives
    none; none at all with `report_usage=False`, as some endpoints do)."""

    def __init__(self, name: str, report_usage: bool = True) -> None:
        self.name = name
        self.report_usage = report_usage
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
        usage: Usage | None = step.usage or Usage(
            estimate_tokens(request.messages, request.tools),
            max(1, len(step.text or "") // 4 + 10 * len(calls)),
        )
        if not self.report_usage:
            usage = None
        return ModelResponse(step.text, calls, usage, "tool_calls" if calls else "stop")

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        response = await self.complete(request)
        for piece in pieces(response.content or ""):
            yield TextDelta(piece)
            await asyncio.sleep(0)
        yield response


class ScriptedModel(_RecordingModel):
    """Replies from a script, in order. Each step is one model call.

    A step is text, `reply(text, call(...), ...)`, a `call(...)` or a list of calls, or a
    function of the request returning one of those. `requests` keeps what the model was
    sent, for assertions; `assert_finished()` checks that the whole script was used.
    """

    def __init__(
        self, script: Iterable[Step] = (), *, name: str = "scripted", report_usage: bool = True
    ) -> None:
        super().__init__(name, report_usage)
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
        self,
        fn: Callable[[ModelRequest], Any | Awaitable[Any]],
        *,
        name: str = "function",
        report_usage: bool = True,
    ) -> None:
        super().__init__(name, report_usage)
        self._fn = fn

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self._calls += 1
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        return self._response(request, _as_reply(result))


# ---------------------------------------------------------------------------------------------
# A real OpenAI-compatible HTTP endpoint around any Model


class AppServer:
    """Any ASGI app served by uvicorn from a background thread on a free loopback port.

    For tests that need a real HTTP peer (a model endpoint, an identity provider's JWKS).
    Use as a context manager; `url` is http://127.0.0.1:<port>.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1") -> None:
        self.app = app
        self.host = host
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # NODELAY
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"app-server-{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # a test ends: no need to wait for slow replies
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ScriptedServer(AppServer):
    """A model behind a real OpenAI-compatible endpoint at `base_url` (…/v1).

    `bodies` keeps every request body as received; `errors` keeps what went wrong inside the
    model (a `ScriptMismatch`, say), which also answers HTTP 500.
    """

    def __init__(self, model: Model, *, host: str = "127.0.0.1") -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        self.model = model
        self.bodies: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        """The Authorization header of each request, as received."""
        self.errors: list[str] = []
        super().__init__(
            Starlette(
                routes=[
                    Route("/v1/chat/completions", self._completions, methods=["POST"]),
                    Route("/v1/models", self._models, methods=["GET"]),
                ]
            ),
            host=host,
        )

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        self.bodies.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        model_request = ModelRequest(list(body.get("messages", [])), list(body.get("tools") or []))
        completion = Completion(str(body.get("model", self.model.name)))
        if not body.get("stream"):
            try:
                response = await self.model.complete(model_request)
            except Exception as exc:
                return self._failure(exc)
            # Sent as an endpoint sends it: a lone surrogate in the text goes as its escape.
            return Response(json_bytes(completion.body(response)), media_type="application/json")
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = self.model.stream(model_request)
        try:  # fail before the first byte, with a status, when the model fails at once
            first = await anext(events)
        except Exception as exc:
            return self._failure(exc)
        return StreamingResponse(
            _sse(completion, first, events, include_usage), media_type="text/event-stream"
        )

    async def _models(self, request: Request) -> Response:
        model = {
            "id": self.model.name,
            "object": "model",
            "created": 0,
            "owned_by": "webagents.testing",
        }
        return JSONResponse({"object": "list", "data": [model]})

    def _failure(self, exc: Exception) -> JSONResponse:
        self.errors.append(f"{type(exc).__name__}: {exc}")
        return JSONResponse(
            error_body(f"{type(exc).__name__}: {exc}", "server_error", "scripted_model_error"),
            status_code=500,
        )


async def _sse(
    completion: Completion,
    first: TextDelta | ModelResponse,
    rest: AsyncIterator[TextDelta | ModelResponse],
    include_usage: bool,
) -> AsyncIterator[bytes]:
    yield completion.chunk({"role": "assistant", "content": ""})
    item: TextDelta | ModelResponse | None = first
    response: ModelResponse | None = None
    while item is not None:
        if isinstance(item, TextDelta):
            yield completion.chunk({"content": item.text})
        else:
            response = item
        item = await anext(rest, None)
    assert response is not None
    for index, tool_call in enumerate(response.tool_calls):
        for chunk in completion.tool_call_chunks(index, tool_call):
            yield chunk
    yield completion.chunk({}, response.finish_reason or "stop")
    if include_usage:
        yield completion.usage_chunk(response.usage or Usage())
    yield DONE


# ---------------------------------------------------------------------------------------------
# A skill for end-to-end tests of served agents


class ProbeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    record: str | None = None
    """A file the probe appends what happens to (a wait that starts, or is cancelled)."""


class ProbeSkill(Skill[ProbeSettings]):
    """Tells the model who the caller is, and can be made to wait: for end-to-end tests.

    In an agent file: `- webagents.testing:ProbeSkill: {record: /tmp/events.log}`.
    """

    name = "probe"
    Settings = ProbeSettings

    @tool
    async def whoami(self, ctx: Context) -> dict[str, Any]:
        """Who is calling, as the agent verified it."""
        return {
            "kind": ctx.caller.kind.value,
            "identity": ctx.caller.identity,
            "namespace": ctx.caller.namespace,
            "conversation_id": ctx.conversation_id,
            "metadata": dict(ctx.metadata),
        }

    @tool
    async def wait(self, seconds: float) -> str:
        """Wait, then say so."""
        self._record("wait started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self._record("wait cancelled")
            raise
        self._record("wait finished")
        return f"waited {seconds}s"

    def _record(self, event: str) -> None:
        if self.settings.record:
            with open(self.settings.record, "a", encoding="utf-8") as handle:
                handle.write(event + "\n")
