"""MCP over streamable HTTP at /mcp and /agents/<name>/mcp: the agent's memory for the
verified caller of each request (mcp_server.py, the same tools and resources as on stdio).

Every HTTP request is verified here, before the MCP SDK sees it, exactly as a Chat
Completions request is (`verify`: owner key, caller keys, JWTs, Portal Connect's assertion):
a credential that fails is a 401, never anonymous (A1). The verified caller travels in the
ASGI scope to the MCP handlers, which answer for it alone.

An MCP session is bound to the caller (and agent) of the request that opened it: the
session manager compares the principal of every later request of the session with the one
that opened it and answers another credential's request 404, as if the session did not
exist, so a session id that leaks lends nobody else's rights.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..caller import Caller
from ..mcp_server import AgentMemory, mcp_server
from ..mcp_server import Request as McpRequest
from ..mcp_server import Scope as Answered
from .api_errors import ApiError
from .hosting import AgentHost, ServedAgent
from .verified import agent_named, verify

App = TypeVar("App")
Lifespan = Callable[[App], AbstractAsyncContextManager[None]]

ANSWERED_FOR = "webagents.mcp"
"""The ASGI scope key that carries a verified request's `Answered` to the MCP handlers."""
INSTRUCTIONS = (
    "The memory of a webagents agent, as your credential allows: its notes (the memory_* "
    "tools: your own namespace and shared; the owner every one) and your kept "
    "conversations (resources, read-only)."
)


class McpEndpoint:
    """The ASGI app behind both paths; `run()` holds the MCP sessions while serving."""

    def __init__(self, host: AgentHost) -> None:
        self._host = host
        self._memories: dict[str, AgentMemory] = {}
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        # A manager runs once: each time the app starts serving it gets a new one.
        # JSON answers, not an SSE stream per request: the tools send no progress, and a
        # stream's set-up is most of a call's time (bench/mcp_calls.py).
        server = mcp_server("webagents", INSTRUCTIONS, _scope)
        self._manager = StreamableHTTPSessionManager(server, json_response=True)
        try:
            async with self._manager.run():
                yield
        finally:
            self._manager = None
            self._memories.clear()

    def routes(self) -> list[Route]:
        """/mcp for the one agent served, /agents/<name>/mcp for any (a daemon's)."""
        return [
            Route(path, self, methods=["GET", "POST", "DELETE"], include_in_schema=False)
            for path in ("/mcp", "/agents/{name}/mcp")
        ]

    def around(self, lifespan: Lifespan[App]) -> Lifespan[App]:
        """`lifespan` with the MCP sessions held while it runs."""

        @contextlib.asynccontextmanager
        async def both(app: App) -> AsyncIterator[None]:
            async with self.run(), lifespan(app):
                yield

        return both

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)  # headers and path only: the body is the SDK's
        served = await self._agent(request)
        caller = await verify(served, request)
        if self._manager is None:
            raise ApiError(503, "the server is starting or stopping: try again", "unavailable")
        scoped = dict(scope)
        scoped[ANSWERED_FOR] = Answered(self._memory(served), caller)
        scoped["user"] = AuthenticatedUser(_principal(served, caller))
        await self._manager.handle_request(scoped, receive, send)

    async def _agent(self, request: Request) -> ServedAgent:
        name = request.path_params.get("name")
        if name is not None:
            return await agent_named(self._host, request, name)
        sole = self._host.sole
        if sole is None:
            raise ApiError(
                404,
                "several agents are served here: connect to /agents/<name>/mcp "
                f"(one of: {', '.join(self._host.names()) or 'none'})",
                "model_not_found",
            )
        return sole

    def _memory(self, served: ServedAgent) -> AgentMemory:
        # Checked by the agent object: a daemon that reloads an agent serves its new version.
        memory = self._memories.get(served.name)
        if memory is None or memory.agent is not served.agent:
            memory = self._memories[served.name] = AgentMemory(served.agent)
        return memory


def _principal(served: ServedAgent, caller: Caller) -> AccessToken:
    """Who opened an MCP session, for the SDK to compare every later request of it with:
    the agent and the whole verified caller (its kind, identities and issuer)."""
    return AccessToken(token="", client_id=served.name, scopes=[], subject=repr(caller))


def _scope(request: McpRequest) -> Answered:
    http: Any = request.request
    answered = http.scope.get(ANSWERED_FOR) if isinstance(http, Request) else None
    if not isinstance(answered, Answered):  # only McpEndpoint hands requests to the SDK
        raise RuntimeError("an MCP request reached the server without a verified caller")
    return answered
