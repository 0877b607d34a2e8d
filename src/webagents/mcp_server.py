"""The agent's memory as an MCP server: its memory tools and kept conversations, for one
verified caller at a time.

One implementation for both transports: `webagents mcp PATH` serves it on stdio, where the
only identity is the owner (the server is the owner's own process, started by the owner's
own MCP client, exactly as the terminal chat is), and `webagents serve` at /mcp over
streamable HTTP (server/mcp_http.py), where each request's caller is verified as for Chat
Completions. What a caller may do is asked of `rights`, never decided here.

Tools: the memory skill's tools as that caller sees them in a conversation, the same objects
(names, schemas, descriptions), called through the conversation's own `call_tool`: a client
gets the very text the model would, errors and refusals included. Resources: the caller's
kept conversations (the session store's), read-only, one JSON document each.

stdout is MCP's channel on stdio: `stdio_server` points fd 1 at stderr while it serves, so a
stray print cannot corrupt it; logging goes to stderr (the CLI's `basicConfig`).
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Callable
from dataclasses import dataclass
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

Request = ServerRequestContext[Any, Any]


class AgentMemory:
    """One agent's memory tools and kept conversations, as each caller may have them."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        memory = agent.skill(MemorySkill.name)
        self._memory = memory if isinstance(memory, MemorySkill) else None
        sessions = agent.skill(SessionSkill.name)
        self._sessions: LocalSessionStore | None = (
            sessions.store if isinstance(sessions, SessionSkill) else None
        )

    def require_memory(self) -> None:
        """Refuse to serve an agent that has no notes at all (stdio's only purpose)."""
        if self._memory is None:
            raise ConfigError(
                f"the agent {self.agent.name!r} has no memory skill to serve: add `- memory` "
                "to the skills in its AGENT.md"
            )

    def context(self, caller: Caller) -> Context:
        return Context(agent=self.agent.info, caller=caller)

    def tools(self, ctx: Context) -> dict[str, Tool]:
        """The memory tools `ctx`'s caller has in a conversation (SPEC M2), by name."""
        if self._memory is None:
            return {}
        return {tool.name: tool for tool in self._memory.tools(ctx)}

    # -- tools --------------------------------------------------------------------------------

    def list_tools(self, caller: Caller) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name, description=tool.description, input_schema=tool.parameters
                )
                for tool in self.tools(self.context(caller)).values()
            ]
        )

    async def call_tool(
        self, caller: Caller, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # Through the conversation's own JSON text: the same parsing, validation and refusals;
        # a tool this caller does not have is refused as an unknown one, as for the model.
        ctx = self.context(caller)
        call = ToolCall("mcp", params.name, json.dumps(params.arguments or {}))
        text, failed = await call_tool(self.tools(ctx), ctx, call)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=failed)

    # -- resources ----------------------------------------------------------------------------

    def list_resources(self, caller: Caller) -> types.ListResourcesResult:
        namespace = rights_of(caller).conversations
        if self._sessions is None or namespace is None:
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
                for kept in self._sessions.recent(namespace, limit=MAX_LISTED)
            ]
        )

    def read_resource(
        self, caller: Caller, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        session_id = uri.removeprefix(CONVERSATIONS)
        if session_id == uri or not is_conversation_id(session_id):
            raise MCPError(
                INVALID_PARAMS,
                f"{uri!r} names no kept conversation: resources/list gives their URIs "
                f"({CONVERSATIONS}<id>)",
            )
        # Only the caller's own namespace is looked in: another caller's conversation is
        # answered exactly as one that does not exist.
        namespace = rights_of(caller).conversations
        kept = None
        if self._sessions is not None and namespace is not None:
            kept = self._sessions.load(namespace, session_id)
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


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose request an MCP message is: the agent's memory and the verified caller."""

    memory: AgentMemory
    caller: Caller


def mcp_server(name: str, instructions: str, scope_of: Callable[[Request], Scope]) -> Server[Any]:
    """An MCP server whose every message is answered for the caller `scope_of` names."""

    async def list_tools(
        request: Request, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        scope = scope_of(request)
        return scope.memory.list_tools(scope.caller)

    async def call_tool(
        request: Request, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        scope = scope_of(request)
        return await scope.memory.call_tool(scope.caller, params)

    async def list_resources(
        request: Request, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        scope = scope_of(request)
        return scope.memory.list_resources(scope.caller)

    async def read_resource(
        request: Request, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        scope = scope_of(request)
        return scope.memory.read_resource(scope.caller, params)

    return Server(
        name,
        version=importlib.metadata.version("webagents"),
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


async def serve_stdio(memory: AgentMemory) -> None:
    """Serve `memory` on stdio to its owner, the only identity there is."""
    owner = Scope(memory, Caller.owner())
    server = mcp_server(
        f"webagents-{memory.agent.name}",
        f"The memory of the agent {memory.agent.name!r}: its notes (the memory_* tools, "
        "as its owner) and the owner's kept conversations (resources, read-only).",
        lambda request: owner,
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
