"""`webagents mcp PATH` as a process, driven by the official `mcp` client (issue 24).

On stdio the owner is the only identity: the tools are the memory tools as the owner has
them in a conversation (the same schemas, the same answers and refusals), and the owner's
kept conversations are read-only resources. A broken agent file is refused before serving.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from webagents._loop import call_tool
from webagents.agent_file import load_agent
from webagents.caller import Caller
from webagents.context import Context
from webagents.model import ToolCall
from webagents.notes.layout import KEY_RULE
from webagents.sessions import new_session
from webagents.sessions.store import LocalSessionStore
from webagents.skills.memory.skill import MemorySkill

from ..conftest import write_agent
from .conftest import REPO, child_env, webagents_command

pytestmark = pytest.mark.e2e

BOB = "caller:bob@example.com"


def example(tmp_path: Path, name: str = "assistant") -> Path:
    """A copy of examples/assistant (memory and session skills), so no test writes the repo."""
    folder = tmp_path / name
    shutil.copytree(REPO / "examples" / "assistant", folder, ignore=shutil.ignore_patterns(".*"))
    return folder


@asynccontextmanager
async def connected(tmp_path: Path, folder: Path) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(
        command=webagents_command(),
        args=["mcp", str(folder)],
        env=child_env(tmp_path),
        cwd=str(tmp_path),
    )
    with (tmp_path / "server.log").open("w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def owner_tools(folder: Path) -> tuple[Context, dict[str, Any]]:
    """The memory tools the owner has in a conversation with the agent in `folder`."""
    agent = load_agent(folder)
    memory = agent.skill(MemorySkill.name)
    assert isinstance(memory, MemorySkill)
    ctx = Context(agent=agent.info, caller=Caller.owner())
    return ctx, {tool.name: tool for tool in memory.tools(ctx)}


async def in_conversation(folder: Path, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """What the model is answered when it calls `name` with `arguments` as the owner."""
    ctx, tools = owner_tools(folder)
    return await call_tool(tools, ctx, ToolCall("c1", name, json.dumps(arguments)))


def answer(result: types.CallToolResult) -> tuple[str, bool]:
    assert len(result.content) == 1
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text, result.is_error


async def test_mcp_stdio_lists_the_owners_memory_tools_as_a_conversation_declares_them(
    tmp_path: Path,
) -> None:
    folder = example(tmp_path)
    _, tools = owner_tools(folder)
    async with connected(tmp_path, folder) as session:
        listed = await session.list_tools()
    assert [(t.name, t.description, t.input_schema) for t in listed.tools] == [
        (tool.name, tool.description, tool.parameters) for tool in tools.values()
    ]
    assert [t.name for t in listed.tools] == [
        "memory_search",
        "memory_read",
        "memory_write",
        "memory_forget",
        "memory_list",
    ]


async def test_mcp_stdio_writes_reads_searches_and_forgets_an_owner_note(tmp_path: Path) -> None:
    folder = example(tmp_path)
    async with connected(tmp_path, folder) as session:
        written = answer(
            await session.call_tool(
                "memory_write",
                {
                    "key": "launch-plan",
                    "content": "Launch on the first of March.",
                    "description": "when we launch",
                },
            )
        )
        saved = json.loads(written[0])
        assert written[1] is False
        assert saved == {"saved": "launch-plan", "namespace": "owner", "updated": saved["updated"]}
        note = folder / ".webagents" / "memory" / "owner" / "launch-plan.md"
        assert stat.S_IMODE(note.stat().st_mode) == 0o600
        assert stat.S_IMODE(note.parent.stat().st_mode) == 0o700

        read = answer(await session.call_tool("memory_read", {"key": "launch-plan"}))
        assert (json.loads(read[0]), read[1]) == (
            {
                "key": "launch-plan",
                "namespace": "owner",
                "description": "when we launch",
                "updated": saved["updated"],
                "content": "Launch on the first of March.",
            },
            False,
        )

        found = answer(await session.call_tool("memory_search", {"query": "launch march"}))
        hits = json.loads(found[0])
        assert found[1] is False
        assert [(h["key"], h["namespace"], h["description"], h["updated"]) for h in hits] == [
            ("launch-plan", "owner", "when we launch", saved["updated"])
        ]
        listed = answer(await session.call_tool("memory_list", {}))
        assert (json.loads(listed[0]), listed[1]) == (
            {
                "notes": [
                    {
                        "key": "launch-plan",
                        "namespace": "owner",
                        "description": "when we launch",
                        "updated": saved["updated"],
                    }
                ]
            },
            False,
        )

        forgot = answer(await session.call_tool("memory_forget", {"key": "launch-plan"}))
        assert (json.loads(forgot[0]), forgot[1]) == (
            {"forgot": "launch-plan", "namespace": "owner"},
            False,
        )
        assert not note.exists()
        gone = answer(await session.call_tool("memory_read", {"key": "launch-plan"}))
    assert gone == ("Error: there is no note 'launch-plan'; memory_list shows the keys", True)


ONLY_OWNER_OR_SHARED = "Error: invalid arguments: namespace: Input should be 'owner' or 'shared'"


def not_a_key(key: str) -> str:
    return f"Error: {key!r} is not a valid key: {KEY_RULE}"


@pytest.mark.parametrize(
    ("name", "arguments", "refusal"),
    [
        (
            "memory_write",
            {"key": "x", "content": "mine now", "namespace": BOB},
            ONLY_OWNER_OR_SHARED,
        ),
        ("memory_forget", {"key": "x", "namespace": BOB}, ONLY_OWNER_OR_SHARED),
        ("memory_read", {"key": "../shared/x"}, not_a_key("../shared/x")),
        ("memory_write", {"key": "../../escape", "content": "out"}, not_a_key("../../escape")),
        (
            "memory_list",
            {"namespace": "../owner"},
            "Error: you cannot read the namespace '../owner'",
        ),
        (
            "memory_read",
            {"key": "x", "unknown": 1},
            "Error: invalid arguments: unknown: this tool takes no such argument",
        ),
        (
            "memory_delete_all",
            {},
            "Error: there is no tool named 'memory_delete_all'; the tools are: memory_forget, "
            "memory_list, memory_read, memory_search, memory_write",
        ),
    ],
)
async def test_mcp_stdio_refuses_a_widening_argument_as_a_conversation_does(
    tmp_path: Path, name: str, arguments: dict[str, Any], refusal: str
) -> None:
    served, twin = example(tmp_path), example(tmp_path, "twin")
    assert await in_conversation(twin, name, arguments) == (refusal, True)
    async with connected(tmp_path, served) as session:
        refused = answer(await session.call_tool(name, arguments))
    assert refused == (refusal, True)
    memory = served / ".webagents" / "memory"
    assert sorted(p.name for p in memory.rglob("*.md")) == []
    assert not (memory / "callers").exists()


async def test_mcp_stdio_lists_and_reads_the_owners_kept_conversations(tmp_path: Path) -> None:
    folder = example(tmp_path)
    store = LocalSessionStore(folder, "assistant")
    messages = [
        {"role": "user", "content": "what did we plan?"},
        {"role": "assistant", "content": "A launch in March."},
    ]
    store.save("owner", new_session("plan-1", "assistant", messages))
    store.save(BOB, new_session("bob-1", "assistant", [{"role": "user", "content": "Bob's"}]))
    kept = store.load("owner", "plan-1")
    assert kept is not None
    async with connected(tmp_path, folder) as session:
        listed = await session.list_resources()
        read = await session.read_resource("webagents://conversations/plan-1")
        with pytest.raises(MCPError) as bobs:
            await session.read_resource("webagents://conversations/bob-1")
        with pytest.raises(MCPError) as escaping:
            await session.read_resource("webagents://conversations/../callers/bob-1")
    assert [(r.uri, r.name, r.title, r.mime_type) for r in listed.resources] == [
        ("webagents://conversations/plan-1", "plan-1", kept["title"], "application/json")
    ]
    assert len(read.contents) == 1
    content = read.contents[0]
    assert isinstance(content, types.TextResourceContents)
    assert (content.uri, content.mime_type) == (
        "webagents://conversations/plan-1",
        "application/json",
    )
    assert json.loads(content.text) == kept
    assert (bobs.value.code, bobs.value.message) == (
        -32002,
        "there is no kept conversation 'bob-1': resources/list gives them",
    )
    assert escaping.value.code == -32602
    assert "names no kept conversation" in escaping.value.message


def started(tmp_path: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """`webagents mcp FOLDER` run to its end (a refused one ends before serving)."""
    return subprocess.run(
        [webagents_command(), "mcp", str(folder)],
        env=child_env(tmp_path),
        cwd=str(tmp_path),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_mcp_stdio_refuses_a_broken_agent_file_before_serving(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "broken", "name: broken\nskills:\n  - memory\n  - [oops")
    done = started(tmp_path, folder)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: {folder / 'AGENT.md'}:6: YAML error in the front matter: expected ',' or "
        "']', but got '<stream end>'\n",
    )


def test_mcp_stdio_refuses_an_agent_without_memory(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "plain", "name: plain\nmodel: openai/gpt-4o-mini")
    done = started(tmp_path, folder)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "error: the agent 'plain' has no memory skill to serve: add `- memory` to the skills "
        "in its AGENT.md\n",
    )
