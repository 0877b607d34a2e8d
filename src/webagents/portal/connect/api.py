"""Portal Connect over HTTP: the agents' WebSocket `/ws`, and the public endpoint that
relays portal users to an agent: `POST /agents/<name>/chat/completions`, and the Responses
API's and Conversations' paths under `/agents/<name>/` (RELAYED). A method one of those paths
does not take is a 405 with `Allow`, and any other path below an agent's name a 404, both
OpenAI-shaped.

The WebSocket is authenticated with the agent's key before the upgrade (a 401, or close
code 4401 where the server cannot answer before it); it opens no database session for its
lifetime, only short ones to look the key up and to say who holds the agent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from ...openai_wire import error_body
from ...portal_wire.connect import PONG
from ...server.api_errors import error_type, not_taken
from .. import json_body
from ..accounts.auth import agent_and_key, bearer_scope
from ..errors import BadInput, Unauthorized
from ..scope import AgentScope
from ..settings import PortalSettings
from ..tokens.service import issuer_of
from . import protocol, service
from .live import LiveConnection, RelayError, Reply
from .protocol import Call
from .relay import Relay

log = logging.getLogger("webagents.portal.connect")

router = APIRouter()

# Reply headers passed on to the caller: the agent's own, where they are a header at all. The
# agent's words go into the portal's answer: a line break there ended the caller's connection
# when the server wrote it (or, in a laxer server, would start a header of the agent's choice).
_PASSED_NAME = re.compile(r"x-webagents-[a-z0-9-]{1,64}")
_PASSED_VALUE = re.compile(r"[\x20-\x7e]{0,1024}")


RELAYED: tuple[tuple[str, str], ...] = (
    ("POST", "chat/completions"),
    ("POST", "responses"),
    ("GET", "responses/{response}"),
    ("DELETE", "responses/{response}"),
    ("GET", "responses/{response}/input_items"),
    ("POST", "conversations"),
    ("GET", "conversations/{conversation}"),
    ("DELETE", "conversations/{conversation}"),
    ("GET", "conversations/{conversation}/items"),
)
"""The public endpoint's calls: a method and a path below `/agents/<name>/`, relayed as they
are to the agent, which routes them as its own server does."""

# Any text where a name or an id goes, slashes too: a path that names none of them well (an
# encoded slash, `..`) is still this endpoint's, answered in its shape, not a page's.
_PATTERNS = (re.sub(r"\\{\w+\\}", ".+", re.escape(path)) for _, path in RELAYED)
_RELAYED_PATH = re.compile(r"/agents/.+/(?:" + "|".join(_PATTERNS) + ")")

# What a POST's body must be, said to a caller who sent something else.
_BODY_HINTS = {
    "chat/completions": "a chat completions request: a JSON object with messages "
    '(like {"messages": [{"role": "user", "content": "Hi"}]})',
    "responses": 'a Responses request: a JSON object with input (like {"input": "Hi"})',
    "conversations": "a new conversation: a JSON object "
    '(like {} or {"items": [{"type": "message", "role": "user", "content": "Hi"}]})',
}


# Below an agent's id are the owner's pages (/agents/<uuid>/chats); below its name, the public
# endpoint. A path below a name that no route takes is still the endpoint's: a 404 in its shape.
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class _AgentName(Convertor[str]):
    """A path segment that is not an agent's id."""

    regex = rf"(?!{_UUID}(?:/|$))[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("agent_name", _AgentName())


def is_relayed_path(path: str) -> bool:
    """Whether `path` is one of the public endpoint's (OpenAI-shaped answers, as the API's)."""
    return _RELAYED_PATH.fullmatch(path) is not None


def public_url(issuer: str, agent_name: str) -> str:
    return f"{issuer}/agents/{agent_name}/chat/completions"


@router.websocket("/ws")
async def agent_socket(websocket: WebSocket) -> None:
    relay: Relay = websocket.app.state.relay
    sessions: sessionmaker[Session] = websocket.app.state.sessions
    try:
        agent, key_id = await run_in_threadpool(
            _agent_of, sessions, websocket.headers.get("authorization")
        )
    except Unauthorized as exc:
        await _refuse(websocket, exc)
        return
    settings: PortalSettings = websocket.app.state.settings
    if await _held(relay, agent.agent_id) >= settings.max_connections_per_agent:
        await websocket.accept()
        await websocket.close(
            protocol.CLOSE_TOO_MANY,
            f"this agent holds {settings.max_connections_per_agent} connections already: close one",
        )
        return
    connection = LiveConnection(uuid.uuid4(), agent.agent_id, agent.agent_name, key_id)
    connection.end = lambda: _end(websocket)
    await websocket.accept()
    await relay.connected(connection)
    writer = asyncio.create_task(_write(websocket, connection))
    try:
        connection.post(
            protocol.hello(
                agent.agent_id,
                agent.agent_name,
                public_url(issuer_of(settings), agent.agent_name),
                connection.id,
            )
        )
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            frame = protocol.parse(message.get("text") or "")
            if frame is None:
                continue  # not a frame of the contract: nothing to answer
            if frame["type"] == "ping":
                connection.post(PONG)
            elif frame["type"] in protocol.REPLY_TYPES:
                connection.deliver(frame)
    except Exception as exc:  # the socket broke: the same as a close
        log.info("connect: the connection of %s ended (%s)", agent.agent_name, exc)
    finally:
        writer.cancel()
        await relay.disconnected(connection)


async def _held(relay: Relay, agent_id: uuid.UUID) -> int:
    """The agent's live connections, in this process and (PostgreSQL) in the others."""
    here = relay.registry.count(agent_id)
    if not relay.spans_processes:
        return here
    return here + len(await asyncio.to_thread(relay.directory.holders, agent_id))


def _agent_of(
    sessions: sessionmaker[Session], authorization: str | None
) -> tuple[AgentScope, uuid.UUID]:
    with sessions.begin() as db:  # committed: the key's use is noted (its last use)
        agent, key = agent_and_key(db, authorization)
        return agent, key.id


KEY_REVOKED = "this machine's key was revoked: run webagents publish to get a new one"


def _end(websocket: WebSocket) -> None:
    """End a connection whose key was revoked (the relay's heartbeat found it): the agent
    is told why, and its reader then sees the close and lets the connection go."""

    async def close() -> None:
        with contextlib.suppress(Exception):  # already closing: it ends all the same
            await websocket.close(protocol.CLOSE_UNAUTHORIZED, KEY_REVOKED)

    _closing.add(task := asyncio.ensure_future(close()))
    task.add_done_callback(_closing.discard)


_closing: set[asyncio.Future[None]] = set()
"""The closes under way: held until done, so that none is collected half-way."""


async def _refuse(websocket: WebSocket, exc: Unauthorized) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse(
                error_body(exc.message, error_type(401), exc.code),
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        )
        return
    await websocket.accept()
    await websocket.close(protocol.CLOSE_UNAUTHORIZED, exc.message[:120])


async def _write(websocket: WebSocket, connection: LiveConnection) -> None:
    try:
        while True:
            await websocket.send_text(await connection.next_frame())
    except Exception:  # closed: the reader sees it too and ends the connection
        return


def _relaying(method: str, path: str) -> Callable[..., Awaitable[Response]]:
    async def endpoint(request: Request, name: str) -> Response:
        call = Call(method, path.format(**request.path_params), request.url.query)
        return await _relayed(request, name, call)

    words = re.sub(r"\W+", "_", path)
    endpoint.__name__ = f"relay_{method.lower()}_{words}"  # the schema's operation ids
    return endpoint


for _method, _path in RELAYED:
    router.add_api_route(f"/agents/{{name}}/{_path}", _relaying(_method, _path), methods=[_method])


def _not_taken(taken: list[str]) -> Callable[..., Awaitable[Response]]:
    allowed = ", ".join(sorted(taken))

    async def endpoint(request: Request, name: str) -> Response:
        message = not_taken(request.url.path, request.method, allowed)
        return _refused(405, message, "method_not_allowed", {"Allow": allowed})

    return endpoint


for _path in dict.fromkeys(path for _, path in RELAYED):
    _taken = [method for method, path in RELAYED if path == _path]
    router.add_api_route(
        f"/agents/{{name}}/{_path}",
        _not_taken(_taken),
        methods=[m for m in _METHODS if m not in _taken],
        include_in_schema=False,
    )


@router.api_route(
    "/agents/{name:agent_name}/{rest:path}", methods=list(_METHODS), include_in_schema=False
)
async def _nothing(request: Request, name: str, rest: str) -> Response:
    """A path below an agent's name that is none of the endpoint's calls (MCP's `/mcp` among
    them: not relayed, docs/portal.md)."""
    calls = ", ".join(dict.fromkeys(path for _, path in RELAYED))
    message = f"there is nothing at {request.url.path}: an agent's paths here are {calls}"
    return _refused(404, message, "not_found")


def _refused(
    status: int, message: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        error_body(message, error_type(status), code), status_code=status, headers=headers
    )


async def _relayed(request: Request, name: str, call: Call) -> Response:
    """One call of the public endpoint, answered by the agent over its connection.

    No request session: the caller, the agent and the assertion come from one short one,
    closed before the agent is awaited (on SQLite a session holds the write lock, and a
    relay held it for as long as the agent took)."""
    raw = await request.body() if call.method == "POST" else None
    relayed, body = await run_in_threadpool(_cleared, request, name, raw, call.path)
    relay: Relay = request.app.state.relay
    reply = await relay.send(relayed.agent_id, relayed.agent_name, relayed.assertion, body, call)
    try:
        status, headers = await reply.start(relay.first_frame_timeout)
    except RelayError as exc:
        return relay_error(exc)
    # The body's type is the portal's, not the agent's: a caller's browser never sniffs or
    # renders what an agent chose to call text/html.
    passed = {
        name: value
        for name, value in headers.items()
        if _PASSED_NAME.fullmatch(name) and _PASSED_VALUE.fullmatch(value)
    }
    passed["X-Content-Type-Options"] = "nosniff"
    if body is not None and body.get("stream") is True:
        passed["content-type"] = "text/event-stream"
        return StreamingResponse(
            _streamed(reply, relay.idle_timeout), status_code=status, headers=passed
        )
    try:
        whole = await _whole(request, reply, relay.idle_timeout)
    except RelayError as exc:
        return relay_error(exc)
    if whole is None:  # the caller went away; the agent was told to stop
        return Response(status_code=499)
    return Response(whole, status_code=status, headers=passed, media_type="application/json")


def _cleared(
    request: Request, name: str, raw: bytes | None, path: str
) -> tuple[service.Relayed, dict[str, Any] | None]:
    """Who calls (401 first, as for every API call), the body (a POST's), then the agent and
    the assertion, in one short session."""
    settings: PortalSettings = request.app.state.settings
    sessions: sessionmaker[Session] = request.app.state.sessions
    issuer = issuer_of(settings)
    with sessions.begin() as db:
        scope = bearer_scope(db, settings, request.headers.get("authorization"), issuer=issuer)
        body = None if raw is None else _json_object(raw, _BODY_HINTS[path])
        return service.for_caller(db, scope, name, issuer), body


def relay_error(exc: RelayError) -> JSONResponse:
    return _refused(exc.status, exc.message, exc.code)


def _json_object(raw: bytes, hint: str) -> dict[str, Any]:
    # BodyLimit checks every body but a form's (routes read those as forms), and this route
    # reads JSON whatever the type says: checked here whatever the type (a second linear pass
    # for the others), or a form nested 5,000 deep was a RecursionError, a 500.
    problem = json_body.problem(raw)
    if problem is not None:
        raise BadInput(problem, code="bad_json")
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise BadInput(f"send {hint}")
    return body


async def _streamed(reply: Reply, idle: float) -> AsyncIterator[str]:
    try:
        async for chunk in reply.chunks(idle):
            yield chunk
    except RelayError as exc:
        event = error_body(exc.message, error_type(exc.status), exc.code)
        yield f"data: {json.dumps(event)}\n\n"
    finally:
        reply.cancel()  # the caller went away (or it ended: then nothing is sent)


async def _whole(request: Request, reply: Reply, idle: float) -> str | None:
    """The whole body, or None when the caller disconnects first (the agent is cancelled)."""

    collect = asyncio.ensure_future(reply.whole(idle))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        collect.cancel()
        gone.cancel()
        reply.cancel()
        raise
    gone.cancel()
    if collect in done:
        return collect.result()
    collect.cancel()
    reply.cancel()
    return None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
