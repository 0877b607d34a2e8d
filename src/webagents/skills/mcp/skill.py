"""The `mcp` skill: MCP servers' tools as the agent's own, `NAME__tool`, with the schemas
the servers give.

Every server is started (or reached) when the agent is loaded and asked for its tools, so a
server that cannot start or answer is reported then, with its name and what to check,
not at a conversation's first call. In conversations each server's connection is opened on
first use and kept (connection.py); one that died, or did not answer a call within its
`timeout_seconds`, is a tool error the model sees, and is started again for the next call.

The servers act with the agent's own credentials (its environment, its tokens), so whom
their tools are offered to is asked of `rights` (`offered_agent_credentials`): the owner,
and verified callers only for a server with `callers: true`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import mcp_types as types

from ...context import AgentInfo, Context
from ...errors import ConfigError, ToolError
from ...rights import offered_agent_credentials
from ..base import _TOOL_NAME, Skill, Tool
from .connection import CallTimeout, McpConnection, reason
from .settings import McpSettings

log = logging.getLogger("webagents.skills.mcp")

SEPARATOR = "__"


class McpSkill(Skill[McpSettings]):
    """Tools from MCP servers (stdio commands or streamable HTTP URLs)."""

    name = "mcp"
    Settings = McpSettings

    def __init__(self, settings: McpSettings | None = None, /, **values: Any) -> None:
        super().__init__(settings, **values)
        self._connections: dict[str, McpConnection] = {}
        self._server_tools: list[Tool] = []
        self._offered_to_callers: set[str] = set()

    def bind(self, agent: AgentInfo) -> None:
        self._connections = {
            name: McpConnection(name, server) for name, server in self.settings.servers.items()
        }
        # Loading is synchronous and may happen inside a running loop (a daemon's reload):
        # the servers are asked in a loop of their own, on a thread.
        with ThreadPoolExecutor(1, thread_name_prefix="mcp-load") as pool:
            listed = pool.submit(asyncio.run, self._list_all()).result()
        self._server_tools = []
        for name, tools in listed.items():
            for tool in tools:
                made = self._tool(name, tool)
                if made is not None:
                    self._server_tools.append(made)
                    if self.settings.servers[name].callers:
                        self._offered_to_callers.add(made.name)

    async def _list_all(self) -> dict[str, list[types.Tool]]:
        listed: dict[str, list[types.Tool]] = {}
        for name, connection in self._connections.items():
            try:
                listed[name] = await connection.list_tools()
            except Exception as exc:
                raise ConfigError(_unreachable(connection, exc)) from None
            finally:
                await connection.aclose()  # this loop ends now; conversations open their own
        return listed

    def _tool(self, server: str, tool: types.Tool) -> Tool | None:
        name = f"{server}{SEPARATOR}{tool.name}"
        if not _TOOL_NAME.fullmatch(name):
            log.warning(
                "skill 'mcp': server %r: the tool %r is not offered: %r is not a tool name a "
                "model takes (1-64 characters of a-z A-Z 0-9 _ -)",
                server,
                tool.name,
                name,
            )
            return None
        connection = self._connections[server]

        async def call(ctx: Context, arguments: dict[str, Any]) -> str:
            try:
                result = await connection.call(tool.name, arguments)
            except CallTimeout:
                raise ToolError(
                    f"the MCP server {server!r} did not answer the call of {tool.name!r} "
                    f"within its limit of {connection.settings.timeout_seconds:g} s "
                    "(timeout_seconds); it was stopped, and is started again for the next call"
                ) from None
            except Exception as exc:
                raise ToolError(
                    f"the MCP server {server!r} failed ({reason(exc)}); it is started again "
                    "for the next call"
                ) from None
            text = _text(result)
            if result.is_error:
                raise ToolError(text)
            return text

        return Tool(name, tool.description or name, dict(tool.input_schema), call)

    async def aclose(self) -> None:
        for connection in self._connections.values():
            await connection.aclose()

    def tools(self, ctx: Context) -> Sequence[Tool]:
        return [
            tool
            for tool in self._server_tools
            if offered_agent_credentials(
                ctx.caller, to_callers=tool.name in self._offered_to_callers
            )
        ]


def _unreachable(connection: McpConnection, exc: BaseException) -> str:
    server = connection.settings
    check = (
        "check that the command runs and speaks MCP on stdio"
        if server.command is not None
        else "check the URL, that the server is up, and its headers"
    )
    # A time limit (starting, or the list of tools) is named in the error's own words.
    why = str(exc) if isinstance(exc, TimeoutError) else reason(exc)
    return (
        f"skill 'mcp': the server {connection.name!r} ({server.where}) did not start or "
        f"answer: {why}; {check}"
    )


def _text(result: types.CallToolResult) -> str:
    """What the model reads of a tool's result: its text, and what else came, named."""
    parts: list[str] = []
    for content in result.content:
        if isinstance(content, types.TextContent):
            parts.append(content.text)
        else:
            parts.append(f"[{content.type} content not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
