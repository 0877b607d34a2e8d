"""The agent's memory as an MCP server over stdio, for its owner (`webagents mcp PATH`).

On stdio the only identity is the owner: the server is the owner's own process, started by
the owner's own MCP client (Claude Code, Claude Desktop, Cursor), exactly as the terminal
chat is. So every request is the owner's, and what the owner may do is asked of `rights`.

Tools: the memory skill's tools as the owner sees them in a conversation, the same objects
(names, schemas, descriptions), called through the conversation's own `call_tool`: a client
gets the very text the model would, errors included. Resources: the owner's kept
conversations (the session store's), read-only, one JSON document each.

stdout is MCP's channel: `stdio_server` points fd 1 at stderr while it serves, so a stray
print cannot corrupt it; logging goes to stderr (the CLI's `basicConfig`).
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from ._loop import call_tool
from .agent import Agent
from .caller import Caller
from .context import Context, is_conversation_id
from .errors import ConfigError
from .model import ToolCall
from .rights import rights_of
from .sessions.store import LocalSessionStore
from .skills.base import Tool
from .skills.memory.skill import MemorySkill
from .skills.session import SessionSkill

CONVERSATIONS = "webagents://conversations/"
"""The URI of a kept conversation is this and its id."""
MAX_LISTED = 200
"""Kept conversations listed as resources, the newest first."""
RESOURCE_NOT_FOUND = -32002
"""MCP's code for a resource that does not exist (its specification's, not JSON-RPC's)."""

_Request = ServerRequestContext[Any, Any]


class MemoryServer:
    """One agent's memory tools and kept conversations, served to its owner."""

    def __init__(self, agent: Agent) -> None:
        memory = agent.skill(MemorySkill.name)
        if not isinstance(memory, MemorySkill):
            raise ConfigError(
                f"the agent {agent.name!r} has no memory skill to serve: add `- memory` to "
                "the skills in its AGENT.md"
            )
        self.agent = agent
        self.ctx = Context(agent=agent.info, caller=Caller.owner())
        self.tools: dict[str, Tool] = {tool.name: tool for tool in memory.tools(self.ctx)}
        sessions = agent.skill(SessionSkill.name)
        self._sessions: LocalSessionStore | None = (
            sessions.store if isinstance(sessions, SessionSkill) else None
        )
        self._namespace = rights_of(self.ctx.caller).conversations

    def server(self) -> Server[Any]:
        return Server(
            f"webagents-{self.agent.name}",
            version=importlib.metadata.version("webagents"),
            instructions=(
                f"The memory of the agent {self.agent.name!r}: its notes (the memory_* tools, "
                "as its owner) and the owner's kept conversations (resources, read-only)."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )

    async def serve_stdio(self) -> None:
        server = self.server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    # -- tools --------------------------------------------------------------------------------

    async def _list_tools(
        self, request: _Request, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name, description=tool.description, input_schema=tool.parameters
                )
                for tool in self.tools.values()
            ]
        )

    async def _call_tool(
        self, request: _Request, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # Through the conversation's own JSON text: the same parsing, validation and refusals.
        call = ToolCall("mcp", params.name, json.dumps(params.arguments or {}))
        text, failed = await call_tool(self.tools, self.ctx, call)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=failed)

    # -- resources ----------------------------------------------------------------------------

    async def _list_resources(
        self, request: _Request, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        if self._sessions is None or self._namespace is None:
            return types.ListResourcesResult(resources=[])
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=CONVERSATIONS + kept.id,
                    name=kept.id,
                    title=kept.title,
                    description=f"updated {kept.updated}, {kept.turns} turns",
                    mime_type="application/json",
                )
                for kept in self._sessions.recent(self._namespace, limit=MAX_LISTED)
            ]
        )

    async def _read_resource(
        self, request: _Request, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        session_id = uri.removeprefix(CONVERSATIONS)
        if session_id == uri or not is_conversation_id(session_id):
            raise MCPError(
                INVALID_PARAMS,
                f"{uri!r} names no kept conversation: resources/list gives their URIs "
                f"({CONVERSATIONS}<id>)",
            )
        kept = None
        if self._sessions is not None and self._namespace is not None:
            kept = self._sessions.load(self._namespace, session_id)
        if kept is None:
            raise MCPError(
                RESOURCE_NOT_FOUND,
                f"there is no kept conversation {session_id!r}: resources/list gives them",
            )
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri,
                    mime_type="application/json",
                    text=json.dumps(kept, ensure_ascii=False, indent=2),
                )
            ]
        )
