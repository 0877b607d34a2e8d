"""The added time of a memory tool call over MCP, beside the same `memory_read` called
directly, measured in the same run (issue 24).

    .venv/bin/python bench/mcp_calls.py [--calls 300]

Three rows, each the median of `--calls` calls of `memory_read` for one note: the tool
called in-process as a conversation calls it (`call_tool`, no transport), through
`webagents mcp` on stdio (the official `mcp` client, one session), and through
`webagents serve` at /mcp over streamable HTTP (the owner's key verified on every request,
one MCP session). The differences are what MCP's framing, the transport and, over HTTP, the
caller's verification add.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from _timing import amedian_ms
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from serve import start

from webagents._loop import call_tool
from webagents.agent_file import load_agent
from webagents.caller import Caller
from webagents.context import Context
from webagents.model import ToolCall
from webagents.skills.memory.skill import MemorySkill

OWNER_KEY = "bench-owner-key"
READ = {"key": "plan"}


async def direct(agent_folder: Path, calls: int) -> float:
    agent = load_agent(agent_folder)
    memory = agent.skill(MemorySkill.name)
    assert isinstance(memory, MemorySkill)
    ctx = Context(agent=agent.info, caller=Caller.owner())
    tools = {tool.name: tool for tool in memory.tools(ctx)}
    call = ToolCall("c", "memory_read", json.dumps(READ))

    async def once() -> None:
        text, failed = await call_tool(tools, ctx, call)
        assert not failed, text

    await once()
    return await amedian_ms(once, calls)


async def over(session: ClientSession, calls: int) -> float:
    async def once() -> None:
        result = await session.call_tool("memory_read", READ)
        assert not result.is_error, result

    for _ in range(10):  # warm up
        await once()
    return await amedian_ms(once, calls)


async def stdio(agent_folder: Path, env: dict[str, str], calls: int) -> float:
    webagents = str(Path(sys.executable).parent / "webagents")
    params = StdioServerParameters(command=webagents, args=["mcp", str(agent_folder)], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await over(session, calls)


async def http(url: str, calls: int) -> tuple[float, float]:
    """The MCP call's median, and a bare GET /health's on the same connection settings."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {OWNER_KEY}"},
            # TCP_NODELAY, as bench/serve.py: else a delayed ACK (40 ms) is what is measured.
            transport=httpx2.AsyncHTTPTransport(
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
            ),
        ) as client,
        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        called = await over(session, calls)

        async def health() -> None:
            (await client.get(f"{url}/health")).raise_for_status()

        return called, await amedian_ms(health, calls)


async def write_note(agent_folder: Path) -> None:
    agent = load_agent(agent_folder)
    memory = agent.skill(MemorySkill.name)
    assert isinstance(memory, MemorySkill)
    ctx = Context(agent=agent.info, caller=Caller.owner())
    await memory.write(ctx, "plan", "Launch on the first of March.", "when we launch")
    memory.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WEBAGENTS_"))}
    with tempfile.TemporaryDirectory() as tmp:
        env.update(WEBAGENTS_HOME=str(Path(tmp) / "home"), BENCH_OWNER_KEY=OWNER_KEY)
        os.environ.update(WEBAGENTS_HOME=env["WEBAGENTS_HOME"])
        agent = Path(tmp) / "bench"
        agent.mkdir()
        (agent / "AGENT.md").write_text(
            "---\nname: bench\nmodel: openai/scripted\nskills:\n  - memory\naccess:\n"
            "  owner: env:BENCH_OWNER_KEY\n---\nAnswer briefly.\n",
            encoding="utf-8",
        )
        asyncio.run(write_note(agent))
        webagents = str(Path(sys.executable).parent / "webagents")
        served, url = start(
            [webagents, "serve", str(agent), "--offline", "--port", "0"],
            env,
            "webagents: serving at ",
            Path(tmp) / "serve.log",
        )
        try:
            in_process = asyncio.run(direct(agent, options.calls))
            on_stdio = asyncio.run(stdio(agent, env, options.calls))
            on_http, round_trip = asyncio.run(http(url, options.calls))
        finally:
            served.terminate()
            served.wait(timeout=15)

    print(
        f"# bench/mcp_calls.py, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"Python {platform.python_version()}, {options.calls} calls per row\n"
    )
    print("| memory_read | p50 ms | added p50 ms |")
    print("|---|---:|---:|")
    print(f"| in-process, as a conversation calls it | {in_process:.2f} | |")
    print(f"| `webagents mcp` on stdio | {on_stdio:.2f} | {on_stdio - in_process:.2f} |")
    print(f"| `webagents serve` at /mcp (HTTP) | {on_http:.2f} | {on_http - in_process:.2f} |")
    print(f"| (a bare GET /health on the same server) | {round_trip:.2f} | |")


if __name__ == "__main__":
    main()
