"""MCP over streamable HTTP at /mcp and /agents/<name>/mcp: the agent's memory for the
verified caller of each request (mcp_server.py, the same tools and resources as on stdio).

Every HTTP request is verified here, before the MCP SDK sees it, exactly as a Chat
Completions request is (`verify`: owner key, caller keys, JWTs, Portal Connect's assertion):
a credential that fails is a 401, never anonymous (A1). The verified caller travels in the
ASGI scope to the MCP handlers, which answer for it alone.

The MCP SDK (mcp_sessions.py: its session manager, and the memory for each request) is
loaded and started at the first MCP request, in a worker thread, not when the server
starts: most served agents are never asked over MCP, and the SDK is half of what a
`webagents serve` process imports. Its sessions live until the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeVar

from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .api_errors import ApiError
from .hosting import AgentHost, ServedAgent
from .verified import agent_named, verify

if TYPE_CHECKING:
    from .mcp_sessions import McpSessions

log = logging.getLogger("webagents.server")

App = TypeVar("App")
Lifespan = Callable[[App], AbstractAsyncContextManager[None]]


class McpEndpoint:
    """The ASGI app behind both paths; `run()` holds the MCP sessions while serving."""

    def __init__(self, host: AgentHost) -> None:
        self._host = host
        self._serving = False  # within `run()`
        self._stop = asyncio.Event()
        self._starting = asyncio.Lock()
        self._sessions: McpSessions | None = None
        self._held: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """While serving: the MCP sessions, once started, are held until it ends."""
        self._serving, self._stop = True, asyncio.Event()
        try:
            yield
        finally:
            self._serving = False
            self._stop.set()
            held, self._held = self._held, None
            if held is not None:
                (ended,) = await asyncio.gather(held, return_exceptions=True)
                if isinstance(ended, Exception):
                    log.error("MCP sessions ended with an error: %r", ended)

    async def _started(self) -> McpSessions:
        """The MCP sessions, loaded and started by the first request that needs them."""
        async with self._starting:
            if self._sessions is not None:
                return self._sessions
            if not self._serving:
                raise ApiError(503, "the server is starting or stopping: try again", "unavailable")
            # The SDK's import (some 0.3 s of CPU) off the event loop, which goes on serving.
            await asyncio.to_thread(importlib.import_module, f"{__package__}.mcp_sessions")
            from .mcp_sessions import McpSessions

            sessions = McpSessions()
            ready = asyncio.get_running_loop().create_future()
            self._held = asyncio.create_task(self._hold(sessions, ready), name="mcp-sessions")
            await ready
            self._sessions = sessions
            return sessions

    async def _hold(self, sessions: McpSessions, ready: asyncio.Future[None]) -> None:
        """Run `sessions` (a manager runs in the task that started it) until serving ends."""
        try:
            async with sessions.run():
                ready.set_result(None)
                await self._stop.wait()
        except Exception as error:
            if not ready.done():
                ready.set_exception(error)  # the request that started it fails with it
            raise
        finally:
            if not ready.done():
                ready.cancel()
            self._sessions = None  # a later request, if still serving, starts anew

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
        sessions = await self._started()
        await sessions.handle(served, caller, scope, receive, send)

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
