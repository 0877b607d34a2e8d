"""The MCP SDK's side of /mcp (mcp_http.py): the streamable HTTP session manager and the
agent's memory for each verified request, loaded by mcp_http.py at the first MCP request, so
that a `webagents serve` that no MCP client calls never loads the SDK (issue 22: each
process paid some 0.3 s of CPU for it).

An MCP session is bound to the caller (and agent) of the request that opened it: the
session manager compares the principal of every later request of the session with the one
that opened it and answers another credential's request 404, as if the session did not
exist, so a session id that leaks lends nobody else's rights.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from ..caller import Caller
from ..mcp_server import AgentMemory, mcp_server
from ..mcp_server import Request as McpRequest
from ..mcp_server import Scope as Answered
from .hosting import ServedAgent

ANSWERED_FOR = "webagents.mcp"
"""The ASGI scope key that carries a verified request's `Answered` to the MCP handlers."""
INSTRUCTIONS = (
    "The memory of a webagents agent, as your credential allows: its notes (the memory_* "
    "tools: your own namespace and shared; the owner every one) and your kept "
    "conversations (resources, read-only)."
)


class McpSessions:
    """The MCP sessions of one serving run: `run()` holds them, `handle` answers a request
    whose caller is verified."""

    def __init__(self) -> None:
        self._memories: dict[str, AgentMemory] = {}
        # JSON answers, not an SSE stream per request: the tools send no progress, and a
        # stream's set-up is most of a call's time (bench/mcp_calls.py).
        server = mcp_server("webagents", INSTRUCTIONS, _scope)
        self._manager = StreamableHTTPSessionManager(server, json_response=True)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The sessions held until the context ends (a manager runs once)."""
        try:
            async with self._manager.run():
                yield
        finally:
            self._memories.clear()

    async def handle(
        self, served: ServedAgent, caller: Caller, scope: Scope, receive: Receive, send: Send
    ) -> None:
        scoped = dict(scope)
        scoped[ANSWERED_FOR] = Answered(self._memory(served), caller)
        scoped["user"] = AuthenticatedUser(_principal(served, caller))
        await self._manager.handle_request(scoped, receive, send)

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
