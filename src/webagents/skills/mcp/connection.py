"""One MCP server as an agent's tools see it: connected on first use, held open between
calls, and connected again after it died.

The MCP client's transports are context managers that must be entered and left by one
task, so a connection is held by a task of its own (`_hold`) while tool calls, from any
conversation's task in the same event loop, go through the session it opened. A server
that dies ends that task; the call that was waiting fails (a tool error the model sees) and
the next call opens a new connection. A connection belongs to the loop that opened it: in
another loop (a second `asyncio.run`) a new one is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from .settings import ServerSettings, resolved

log = logging.getLogger("webagents.skills.mcp")

STARTUP_SECONDS = 30.0
"""How long a server may take to start and answer `initialize` before it is reported."""


class CallTimeout(TimeoutError):
    """A call got no answer within the server's `timeout_seconds`."""


class McpConnection:
    def __init__(self, name: str, settings: ServerSettings) -> None:
        self.name = name
        self.settings = settings
        # Read now, when the agent is loaded: a variable that is not set is reported then.
        self._env = resolved(name, "env", settings.env)
        self._headers = resolved(name, "header", settings.headers)
        self._session: ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._opened: asyncio.Future[ClientSession] | None = None
        self._opening = asyncio.Lock()

    async def list_tools(self) -> list[types.Tool]:
        session = await self._open()
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                async with asyncio.timeout(self.settings.timeout_seconds):
                    page = await session.list_tools(params=params)
            except TimeoutError:
                limit = f"{self.settings.timeout_seconds:g} s (timeout_seconds)"
                raise TimeoutError(f"no list of tools within {limit}") from None
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """The tool's result; TimeoutError past the server's `timeout_seconds`. Whatever fails
        (a timeout, the server's death), the server is stopped (a hung one killed, by the SDK's
        stdio shutdown) before this returns, and the next call starts it afresh."""
        session = await self._open()
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                return await session.call_tool(tool, arguments)
        except TimeoutError:
            await self.aclose()
            raise CallTimeout from None
        except Exception:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        holder, stop, opened = self._holder, self._stop, self._opened
        self._session = self._holder = self._stop = self._opened = None
        if holder is None or stop is None or holder.get_loop() is not _running_loop():
            return
        if opened is not None and not opened.done():
            holder.cancel()  # still starting, so not yet waiting for `stop`: the SDK's
            # shielded shutdown then stops the process all the same
        stop.set()
        with contextlib.suppress(BaseException):
            await holder
        if opened is not None and not opened.cancelled():
            opened.exception()  # seen: no "exception never retrieved" when it is collected

    async def _open(self) -> ClientSession:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a lock and a session serve one loop only
            self._loop, self._opening, self._session = loop, asyncio.Lock(), None
        async with self._opening:
            if self._session is not None and self._holder is not None and not self._holder.done():
                return self._session
            opened: asyncio.Future[ClientSession] = loop.create_future()
            self._opened = opened
            self._stop = asyncio.Event()
            self._holder = loop.create_task(
                self._hold(opened, self._stop), name=f"mcp-server-{self.name}"
            )
            try:
                session = await asyncio.wait_for(asyncio.shield(opened), STARTUP_SECONDS)
            except BaseException as exc:
                await self.aclose()  # a server still starting is not left running
                if isinstance(exc, TimeoutError):
                    limit = f"{STARTUP_SECONDS:g} s"
                    raise TimeoutError(f"no answer within {limit} of starting") from None
                raise
            self._session = session
            return session

    async def _hold(self, opened: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        try:
            async with self._transport() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                opened.set_result(session)
                await stop.wait()
        except Exception as exc:
            if opened.done():
                log.warning("the MCP server %r stopped: %s", self.name, reason(exc))
            else:
                opened.set_exception(exc)
        finally:
            if not opened.done():  # cancelled while starting: the waiting call is told so
                opened.set_exception(ConnectionError("the connection was closed while opening"))

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        if self.settings.command is not None:
            program, *args = self.settings.command
            params = StdioServerParameters(command=program, args=args, env=self._env or None)
            async with stdio_client(params) as streams:
                yield streams
        else:
            assert self.settings.url is not None
            async with (
                httpx2.AsyncClient(headers=self._headers) as http,
                streamable_http_client(self.settings.url, http_client=http) as streams,
            ):
                yield streams


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def reason(exc: BaseException) -> str:
    """What went wrong, in words: the innermost errors of the SDK's task groups."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(reason(inner) for inner in exc.exceptions))
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
