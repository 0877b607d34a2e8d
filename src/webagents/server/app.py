"""The HTTP app of `webagents serve` and `webagents daemon`: OpenAI's Chat Completions.

Every request is answered for exactly one verified caller: the agent's verifier turns the
bearer credential into a `Caller` before the agent sees the request, and a credential that
fails is a 401 (A1). Errors are OpenAI-shaped; internals never reach the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import __version__
from .._loop import TurnResult
from ..access import CHANNEL_SENDER_HEADER, Unauthorized, VerifierUnavailable
from ..agent import Conversation
from ..caller import Caller
from ..errors import ModelError, TurnLimitError
from ..model import Message, ModelResponse, TextDelta
from ..openai_wire import DONE, Completion, error_body, error_event
from ..skills.session import SessionError, SessionLimitError, SessionLinkError
from .api_errors import ApiError, error_type
from .flood import FloodLog
from .hosting import AgentHost, ServedAgent
from .openai_api import (
    ChatRequest,
    conversation_messages,
    parse_json,
    requested_model,
    validate_request,
)
from .relay import relayed
from .reply_headers import reply_headers
from .streaming import BodyLimit, ClientGone, EventStream, until_disconnected

log = logging.getLogger("webagents.server")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
T = TypeVar("T")
_OUT_OF_FILES = FloodLog(
    "a turn failed for lack of file descriptors (%s): it was answered 503 server_busy, as are "
    "others until some close. Lower --max-connections or raise the file limit (ulimit -n)",
    "out of file descriptors: %d more turns answered 503 in the last %d s",
)


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

    app = FastAPI(title="webagents", version=__version__, lifespan=lifespan)
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
                for s in await _listed(host, request)
            ],
        }

    # The caller is verified before the request is checked: a failing credential is a 401
    # whatever else is wrong (only the agent's name is read first, to know who verifies).
    @app.post("/v1/chat/completions", response_model=None)
    async def completions(request: Request) -> Any:
        data = parse_json(await request.body())
        served = host.sole or await _agent(host, request, requested_model(data), by_model=True)
        caller = await _verify(served, request)
        requested_model(data)  # required, as OpenAI's is, also where it picks nothing
        return await _answer(request, served, caller, validate_request(data))

    @app.post("/agents/{name}/chat/completions", response_model=None)
    async def agent_completions(name: str, request: Request) -> Any:
        served = await _agent(host, request, name)
        caller = await _verify(served, request)
        data = parse_json(await request.body())
        data.setdefault("model", name)  # the path names the agent; `model` may be left out
        return await _answer(request, served, caller, validate_request(data))

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


async def _agent(
    host: AgentHost, request: Request, name: str, *, by_model: bool = False
) -> ServedAgent:
    """The agent named `name`; else a 404 naming only the agents this caller may call (and a
    401 first, for a credential that no agent accepts). `by_model`: the name came as `model`
    at /v1, where clients written for a provider send its model's name: the 404 says how
    to pick an agent."""
    served = host.get(name)
    if served is None and relayed(request.scope) is not None:
        raise ApiError(404, f"agent {name!r} is no longer served here", "model_not_found")
    if served is None:
        listed = ", ".join(s.name for s in await _listed(host, request)) or "none"
        pick = (
            " (send one's name as model, or post to /agents/<name>/chat/completions)"
            if by_model
            else ""
        )
        raise ApiError(
            404,
            f"no agent named {name!r} is served here; the agents you may call: {listed}{pick}",
            "model_not_found",
        )
    return served


async def _listed(host: AgentHost, request: Request) -> list[ServedAgent]:
    """The agents shown to this request's caller, as each agent's own verifier sees them."""
    listed: list[ServedAgent] = []
    refusals: list[ApiError] = []
    agents = host.all()  # one snapshot: a daemon may load or drop agents meanwhile
    for served in agents:
        try:
            caller = await _verify(served, request)
        except ApiError as exc:
            refusals.append(exc)
            continue
        if host.lists_for(served, caller):
            listed.append(served)
    if refusals and len(refusals) == len(agents):  # A1: refused, never a list
        if len({r.message for r in refusals}) == 1:
            raise refusals[0]
        raise ApiError(
            401, "the credential is not valid for any agent served here", "invalid_credential"
        )
    return listed


async def _verify(served: ServedAgent, request: Request) -> Caller:
    relay = relayed(request.scope)
    if relay is not None:  # from Portal Connect: the portal's assertion alone names the caller
        return await _checked(served.verifier.relayed_caller(relay.assertion))
    for header in ("authorization", "x-api-key", "api-key", CHANNEL_SENDER_HEADER):
        if len(request.headers.getlist(header)) > 1:
            # Two credentials would let whoever reads the other one disagree about the caller.
            raise ApiError(401, f"send one {header} header, not several", "invalid_credential")
    return await _checked(
        served.verifier.caller(request.headers.get("authorization"), request.headers)
    )


async def _checked(verifying: Awaitable[Caller]) -> Caller:
    try:
        return await verifying
    except Unauthorized as exc:
        raise ApiError(401, str(exc), "invalid_credential") from None
    except VerifierUnavailable as exc:
        raise ApiError(503, str(exc), "verifier_unavailable") from None


async def _answer(request: Request, served: ServedAgent, caller: Caller, chat: ChatRequest) -> Any:
    messages = conversation_messages(chat)
    conversation = await _run(
        served.agent.start(
            caller,
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
        result = await until_disconnected(request, _run(conversation.send(messages[-1])))
    except ClientGone:
        return JSONResponse({}, status_code=499)  # nobody is listening any more
    body = completion.body(ModelResponse(result.output, usage=result.usage))
    return JSONResponse(body, headers=headers)


async def _run(turn: Awaitable[T]) -> T:
    try:
        return await turn
    except Exception as exc:
        raise _runtime_error(exc) from exc


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
        error = _runtime_error(exc)
        yield error_event(error.message, error.type, error.code)
    yield DONE


def _runtime_error(exc: Exception) -> ApiError:
    """What the client is told when a turn fails: enough to act on, no internals."""
    if isinstance(exc, ApiError):
        return exc
    strerror = _out_of_descriptors(exc)
    if strerror is not None:  # the model client's, or the agent's files: a flood, not a bug
        _OUT_OF_FILES.event(strerror)
        return ApiError(
            503,
            "the server has too much to do at once to take this turn (it is out of open "
            "files); try again shortly",
            "server_busy",
        )
    if isinstance(exc, ModelError):
        log.error("the model failed: %s", exc)
        return ApiError(502, "the agent's model endpoint failed; try again later", "model_error")
    if isinstance(exc, SessionLimitError):
        return ApiError(429, str(exc), "session_limit")  # the store logged it for the owner
    if isinstance(exc, SessionLinkError):
        log.error("%s", exc)  # the path is for the log, not the client
        return ApiError(
            500,
            "this caller's kept conversations cannot be read or kept safely here (the agent's "
            "owner is told); send no metadata.session_id to be answered without keeping it",
            "session_unsafe",
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        log.error("the disk is full: %s", exc)
        return ApiError(
            507,
            "the agent's disk is full, so the conversation was not kept; try again later",
            "insufficient_storage",
        )
    if isinstance(exc, SessionError):
        log.error("%s", exc)  # the path is for the log, not the client
        return ApiError(
            409,
            "this session's kept conversation cannot be read or replaced (its file is "
            "damaged); continue under a new metadata.session_id",
            "session_unreadable",
        )
    if isinstance(exc, TurnLimitError):
        log.error("%s", exc)
        return ApiError(500, "the agent did not finish within its turn limit", "turn_limit")
    log.error("a turn failed", exc_info=exc)
    return ApiError(500, "the agent failed with an internal error", "internal_error")


def _out_of_descriptors(exc: BaseException) -> str | None:
    """The error text where `exc`, or what it was raised from (a ModelError hides the socket
    error it came from), is the process or the system running out of file descriptors."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EMFILE, errno.ENFILE):
            return current.strerror or str(current)
        current = current.__cause__ or current.__context__
    return None


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
    def respond(status: int, message: str, code: str | None = None) -> JSONResponse:
        return JSONResponse(
            error_body(message, error_type(status), code),
            status_code=status,
            headers=_retry_headers(status, code),
        )

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return respond(exc.status, exc.message, exc.code)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return respond(404, f"there is nothing at {request.url.path}", "not_found")
        return respond(exc.status_code, str(exc.detail))

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


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, plus the Chat Completions body the endpoints read themselves."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    body = ChatRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(body.pop("$defs", {}))
    components["ChatRequest"] = body
    error = {
        "description": "an OpenAI-shaped error",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
    for path in ("/v1/chat/completions", "/agents/{name}/chat/completions"):
        operation = schema["paths"][path]["post"]
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}
            },
        }
        statuses = (400, 401, 404, 409, 413, 429, 500, 502, 503, 507)
        operation["responses"].update({str(s): error for s in statuses})
    # A credential that no agent accepts is a 401 before any name is listed.
    schema["paths"]["/v1/models"]["get"]["responses"]["401"] = error
    app.openapi_schema = schema
    return schema
