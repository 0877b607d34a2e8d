"""The HTTP app of `webagents serve` and `webagents daemon`: OpenAI's Chat Completions.

Every request is answered for exactly one verified caller: the agent's verifier turns the
bearer credential into a `Caller` before the agent sees the request, and a credential that
fails is a 401 (A1). Errors are OpenAI-shaped; internals never reach the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match

from .. import __version__
from .._loop import TurnResult
from ..agent import Conversation
from ..caller import Caller
from ..model import Message, ModelResponse, TextDelta
from ..openai_wire import DONE, Completion, error_body, error_event
from .api_errors import ApiError, error_type, not_taken
from .hosting import AgentHost, ServedAgent
from .mcp_http import McpEndpoint
from .openai_api import (
    ChatRequest,
    conversation_messages,
    parse_json,
    requested_model,
    validate_request,
)
from .reply_headers import reply_headers
from .responses_api import install_responses
from .responses_request import ResponsesRequest
from .streaming import BodyLimit, ClientGone, EventStream, until_disconnected
from .turn_errors import run_turn, runtime_error
from .verified import agent_named, listed, verify

log = logging.getLogger("webagents.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
T = TypeVar("T")


def create_app(
    host: AgentHost,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    connect: Callable[[FastAPI], Coroutine[Any, Any, None]] | None = None,
) -> FastAPI:
    """`connect`: Portal Connect's connections (portal_link/connect.py), run while serving; they
    dispatch the requests the portal relays into this app."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        background = [asyncio.create_task(host.run(), name="agent-host")]
        if connect is not None:
            background.append(asyncio.create_task(connect(app), name="portal-connect"))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            for task in background:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await host.aclose()

    mcp = McpEndpoint(host)
    app = FastAPI(title="webagents", version=__version__, lifespan=mcp.around(lifespan))
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    _install_error_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "agents": len(host.names())}  # names only to their callers

    # Like a request naming no agent here, the list is for the verified caller: a credential
    # that no agent accepts is a 401, and each agent is listed only to the callers it serves.
    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": s.name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "webagents",
                    "description": s.agent.description,
                }
                for s in await listed(host, request)
            ],
        }

    # The caller is verified before the request is checked: a failing credential is a 401
    # whatever else is wrong (only the agent's name is read first, to know who verifies).
    @app.post("/v1/chat/completions", response_model=None)
    async def completions(request: Request) -> Any:
        data = parse_json(await request.body())
        served = host.sole or await agent_named(host, request, requested_model(data), by_model=True)
        caller = await verify(served, request)
        requested_model(data)  # required, as OpenAI's is, also where it picks nothing
        return await _answer(request, served, caller, validate_request(data))

    @app.post("/agents/{name}/chat/completions", response_model=None)
    async def agent_completions(name: str, request: Request) -> Any:
        served = await agent_named(host, request, name)
        caller = await verify(served, request)
        data = parse_json(await request.body())
        data.setdefault("model", name)  # the path names the agent; `model` may be left out
        return await _answer(request, served, caller, validate_request(data))

    install_responses(app, host)
    app.router.routes.extend(mcp.routes())  # MCP over streamable HTTP (mcp_http.py)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


async def _answer(request: Request, served: ServedAgent, caller: Caller, chat: ChatRequest) -> Any:
    messages = conversation_messages(chat)
    conversation = await run_turn(
        served.agent.start(
            caller=caller,
            conversation_id=chat.session_id,
            metadata=chat.metadata or {},
            messages=messages[:-1],
        )
    )
    completion = Completion(served.name)
    headers = reply_headers(conversation, chat)
    if chat.stream:
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        stream = EventStream(_events(conversation, messages[-1], completion, include_usage))
        stream.headers.update(headers)
        return stream
    try:
        result = await until_disconnected(request, run_turn(conversation.send(messages[-1])))
    except ClientGone:
        return JSONResponse({}, status_code=499)  # nobody is listening any more
    body = completion.body(ModelResponse(result.output, usage=result.usage))
    return JSONResponse(body, headers=headers)


async def _events(
    conversation: Conversation, message: Message, completion: Completion, include_usage: bool
) -> AsyncIterator[bytes]:
    yield completion.chunk({"role": "assistant", "content": ""})
    try:
        result: TurnResult | None = None
        async for event in conversation.stream(message):
            if isinstance(event, TextDelta):
                yield completion.chunk({"content": event.text})
            elif isinstance(event, TurnResult):
                result = event
        yield completion.chunk({}, "stop")
        if include_usage and result is not None:
            yield completion.usage_chunk(result.usage)
    except Exception as exc:
        error = runtime_error(exc)
        yield error_event(error.message, error.type, error.code)
    yield DONE


def _retry_headers(status: int, code: str | None) -> dict[str, str] | None:
    """Whether a client should send the request again, for the clients that retry by
    themselves (the official ones retry a 429 or a 5xx twice unless told not to)."""
    if status == 503:
        return {"Retry-After": "1"}  # a moment's shortage (connections, descriptors)
    if code == "session_limit":
        # A limit on what is kept: the same request would run the turn again and be refused
        # again, its model calls and tools paid each time.
        return {"X-Should-Retry": "false"}
    return None


def _install_error_handlers(app: FastAPI) -> None:
    def respond(
        status: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None
    ) -> JSONResponse:
        return JSONResponse(
            error_body(message, error_type(status), code),
            status_code=status,
            headers={**(_retry_headers(status, code) or {}), **(headers or {})},
        )

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return respond(exc.status, exc.message, exc.code)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return respond(404, f"there is nothing at {request.url.path}", "not_found")
        if exc.status_code == 405:
            allowed = allowed_methods(request)
            message = not_taken(request.url.path, request.method, allowed)
            return respond(405, message, "method_not_allowed", {"Allow": allowed})
        return respond(exc.status_code, str(exc.detail), None, exc.headers)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        return respond(400, "invalid request", "invalid_request")

    async def client_gone(request: Request, exc: Exception) -> JSONResponse:
        # Left while sending its body: nobody to answer, and nothing for the log (a slow
        # client that gives up would otherwise write a traceback per request).
        return JSONResponse({}, status_code=499)

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("request to %s failed", request.url.path, exc_info=exc)
        return respond(500, "internal server error", "internal_error")

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[JSONResponse]]] = {
        ApiError: api_error,
        StarletteHTTPException: http_error,
        RequestValidationError: validation_error,
        ClientDisconnect: client_gone,
        Exception: internal_error,
    }
    for kind, handler in handlers.items():
        app.add_exception_handler(kind, handler)


def allowed_methods(request: Request) -> str:
    """Every method some route at the request's path takes, for `Allow`: Starlette's 405
    names the first such route's alone (GET for `responses/{id}`, which DELETE takes too)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] is Match.PARTIAL:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, plus the Chat Completions and Responses bodies the endpoints read
    themselves."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (ChatRequest, ResponsesRequest):
        body = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(body.pop("$defs", {}))
        components[model.__name__] = body
    error = {
        "description": "an OpenAI-shaped error",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
    bodies = {"chat/completions": "ChatRequest", "responses": "ResponsesRequest"}
    for prefix, (route, name) in itertools.product(("/v1", "/agents/{name}"), bodies.items()):
        operation = schema["paths"][f"{prefix}/{route}"]["post"]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
        }
        statuses = (400, 401, 404, 409, 413, 429, 500, 502, 503, 507)
        operation["responses"].update({str(s): error for s in statuses})
    # A credential that no agent accepts is a 401 before any name is listed.
    schema["paths"]["/v1/models"]["get"]["responses"]["401"] = error
    app.openapi_schema = schema
    return schema
