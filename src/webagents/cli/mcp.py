"""`webagents mcp PATH`: the agent's memory as an MCP server over stdio, for its owner.

The agent is loaded as the other owner's commands load it (no model: the tools call none),
and a broken AGENT.md is reported on stderr, with its line, before anything is served.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .exit_codes import run_or_exit
from .owner import owner_agent
from .profile_option import current_profile, profile_option

if TYPE_CHECKING:  # imported when served: the mcp package is not needed to start the CLI
    from ..mcp_server import AgentMemory


@click.command()
@click.argument("path", default=".", type=click.Path(path_type=Path))
@profile_option
@click.pass_context
def mcp(ctx: click.Context, path: Path, profile: str | None) -> None:
    """Serve the memory of the agent in PATH over MCP on stdio, as its owner: the memory
    tools and the kept conversations, for Claude Code, Claude Desktop or Cursor (docs/mcp.md).
    """
    run_or_exit(serve_mcp, path, current_profile(ctx, profile))


def serve_mcp(path: Path, profile: str | None) -> None:
    from ..mcp_server import AgentMemory

    agent = owner_agent(path, profile)
    memory = AgentMemory(agent)
    memory.require_memory()  # said before anything is served
    asyncio.run(_serve(memory))


async def _serve(memory: AgentMemory) -> None:
    from ..mcp_server import serve_stdio
    from .run import push_memory

    try:
        await serve_stdio(memory)
    finally:
        try:
            await push_memory(memory.agent)
        finally:
            await memory.agent.aclose()
