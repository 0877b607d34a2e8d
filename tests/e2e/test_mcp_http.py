"""MCP over streamable HTTP at /mcp on a real `webagents serve`, driven by the official `mcp`
client (issue 24): each request's caller verified as for Chat Completions, each caller the
memory tools and kept conversations it has in a conversation (SPEC M2), a failing
credential a 401, and an MCP session bound to the caller that opened it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.openai_callers import caller
from webagents._loop import call_tool
from webagents.agent_file import load_agent
from webagents.caller import Caller
from webagents.context import Context
from webagents.model import ToolCall
from webagents.skills.memory.skill import MemorySkill
from webagents.testing import FunctionModel, ScriptedServer

from .conftest import child_env
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

KEYS = {"ALICE_KEY": "alice-key-123", "BOB_KEY": "bob-key-123", "OWNER_KEY": "owner-key-123"}
ALICE = Caller.verified("alice@example.com")
BOB = Caller.verified("bob@example.com")
AGENT = """---
name: keeper
model: openai/m
skills:
  - memory
  - session
access:
  owner: env:OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: env:BOB_KEY
---
Keep each caller's notes.
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Process, Path]]:
    """One `webagents serve` for the module's tests (a process costs more than most of them):
    each test uses callers, keys or conversation ids of its own, or compares the notes from
    before its refused call with those after it."""
    tmp_path = tmp_path_factory.mktemp("mcp-http")
    folder = tmp_path / "keeper"
    write(folder / "AGENT.md", AGENT)
    with ScriptedServer(FunctionModel(lambda request: "noted")) as model_server:
        env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url, **KEYS)
        with running(["serve", str(folder)], env) as process:
            yield process, folder


@asynccontextmanager
async def connected(
    process: Process, key: str | None, path: str = "/mcp"
) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(process.url + path, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def conversation_tools(folder: Path, caller: Caller) -> tuple[Context, dict[str, Any]]:
    """The memory tools `caller` has in a conversation with the agent in `folder`."""
    agent = load_agent(folder)
    memory = agent.skill(MemorySkill.name)
    assert isinstance(memory, MemorySkill)
    ctx = Context(agent=agent.info, caller=caller)
    return ctx, {tool.name: tool for tool in memory.tools(ctx)}


def notes_in(folder: Path) -> list[Path]:
    """Every note file the served agent keeps, for any caller."""
    return sorted((folder / ".webagents").rglob("*.md"))


def answer(result: types.CallToolResult) -> tuple[str, bool]:
    assert len(result.content) == 1
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text, result.is_error


@pytest.mark.parametrize(
    ("key", "caller"),
    [
        (KEYS["OWNER_KEY"], Caller.owner()),
        (KEYS["ALICE_KEY"], ALICE),
        (None, Caller.anonymous()),
    ],
    ids=["owner", "caller", "anonymous"],
)
async def test_mcp_http_lists_the_memory_tools_each_caller_has_in_a_conversation(
    served: tuple[Process, Path], key: str | None, caller: Caller, tmp_path: Path
) -> None:
    process, _ = served
    twin = tmp_path / "twin"
    write(twin / "AGENT.md", AGENT)
    _, tools = conversation_tools(twin, caller)
    async with connected(process, key) as session:
        listed = await session.list_tools()
    assert [(t.name, t.description, t.input_schema) for t in listed.tools] == [
        (tool.name, tool.description, tool.parameters) for tool in tools.values()
    ]
    every = ["memory_search", "memory_read", "memory_write", "memory_forget", "memory_list"]
    names = {
        "owner": every,
        "verified": every,
        "anonymous": ["memory_search", "memory_read", "memory_list"],
    }
    assert [t.name for t in listed.tools] == names[caller.kind.value]


async def test_mcp_http_keeps_two_callers_notes_apart_and_shows_the_owner_all(
    served: tuple[Process, Path],
) -> None:
    process, _ = served
    plan = {"key": "plan", "content": "Alice's plan.", "description": "the plan"}
    async with connected(process, KEYS["ALICE_KEY"]) as alice:
        written = answer(await alice.call_tool("memory_write", plan))
        mine = answer(await alice.call_tool("memory_read", {"key": "plan"}))
    async with connected(process, KEYS["BOB_KEY"]) as bob:
        bobs = answer(await bob.call_tool("memory_read", {"key": "plan"}))
        bobs_list = answer(await bob.call_tool("memory_list", {}))
    async with connected(process, KEYS["OWNER_KEY"]) as owner:
        owners = answer(
            await owner.call_tool(
                "memory_read", {"key": "plan", "namespace": "caller:alice@example.com"}
            )
        )
        shared = answer(
            await owner.call_tool(
                "memory_write", {"key": "hours", "content": "Open 9-5.", "namespace": "shared"}
            )
        )
    async with connected(process, None) as anonymous:
        hours = answer(await anonymous.call_tool("memory_read", {"key": "hours"}))
        not_alices = answer(await anonymous.call_tool("memory_read", {"key": "plan"}))

    assert written[1] is False and json.loads(written[0])["namespace"] == "caller:alice@example.com"
    assert mine[1] is False and json.loads(mine[0])["content"] == "Alice's plan."
    assert bobs == ("Error: there is no note 'plan'; memory_list shows the keys", True)
    assert bobs_list == ('{"notes":[]}', False)
    assert owners[1] is False and json.loads(owners[0])["content"] == "Alice's plan."
    assert shared[1] is False
    assert hours[1] is False and json.loads(hours[0])["content"] == "Open 9-5."
    assert not_alices == bobs


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("memory_read", {"key": "plan", "namespace": "caller:bob@example.com"}),
        ("memory_write", {"key": "x", "content": "mine", "namespace": "shared"}),
        ("memory_list", {"namespace": "owner"}),
        ("memory_read", {"key": "../bob@example.com/plan"}),
    ],
)
async def test_mcp_http_refuses_an_argument_that_widens_reach_as_a_conversation_does(
    served: tuple[Process, Path], tmp_path: Path, name: str, arguments: dict[str, Any]
) -> None:
    process, folder = served
    twin = tmp_path / "twin"
    write(twin / "AGENT.md", AGENT)
    ctx, tools = conversation_tools(twin, ALICE)
    refusal = await call_tool(tools, ctx, ToolCall("c1", name, json.dumps(arguments)))
    before = notes_in(folder)
    async with connected(process, KEYS["ALICE_KEY"]) as alice:
        refused = answer(await alice.call_tool(name, arguments))
    assert refused == refusal
    assert refused[1] is True
    assert notes_in(folder) == before
    assert not any(p.name == "x.md" for p in before)  # the write refused here, if made, shows


async def test_mcp_http_anonymous_caller_cannot_write(served: tuple[Process, Path]) -> None:
    process, folder = served
    before = notes_in(folder)
    async with connected(process, None) as anonymous:
        refused = answer(await anonymous.call_tool("memory_write", {"key": "anon", "content": "y"}))
    assert refused == (
        "Error: there is no tool named 'memory_write'; the tools are: memory_list, "
        "memory_read, memory_search",
        True,
    )
    assert notes_in(folder) == before
    assert not any(p.name == "anon.md" for p in before)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def test_mcp_http_refuses_a_forged_token_with_401(served: tuple[Process, Path]) -> None:
    process, _ = served
    for path in ("/mcp", "/agents/keeper/mcp"):
        answered = httpx.post(
            process.url + path,
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": "Bearer forged-key-123"},
        )
        assert answered.status_code == 401
        assert answered.json() == {
            "error": {
                "message": "the bearer token is not valid for this agent",
                "type": "authentication_error",
                "param": None,
                "code": "invalid_credential",
            }
        }


async def test_mcp_http_client_with_a_forged_token_is_refused(
    served: tuple[Process, Path],
) -> None:
    process, _ = served
    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's task groups wrap it
        async with connected(process, "forged-key-123"):
            pass
    assert [(type(e), e.code) for e in leaves(refused.value)] == [(MCPError, -32603)]


def leaves(group: BaseExceptionGroup[BaseException]) -> list[Any]:
    found: list[Any] = []
    for inner in group.exceptions:
        found.extend(leaves(inner) if isinstance(inner, BaseExceptionGroup) else [inner])
    return found


def test_mcp_http_session_answers_only_the_caller_that_opened_it(
    served: tuple[Process, Path],
) -> None:
    process, _ = served
    alice = {**MCP_HEADERS, "Authorization": f"Bearer {KEYS['ALICE_KEY']}"}
    opened = httpx.post(process.url + "/mcp", json=INITIALIZE, headers=alice)
    assert opened.status_code == 200
    session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    others = {
        "bob": {**MCP_HEADERS, **session, "Authorization": f"Bearer {KEYS['BOB_KEY']}"},
        "owner": {**MCP_HEADERS, **session, "Authorization": f"Bearer {KEYS['OWNER_KEY']}"},
        "anonymous": {**MCP_HEADERS, **session},
    }
    for headers in others.values():
        refused = httpx.post(process.url + "/mcp", json=listing, headers=headers)
        assert (refused.status_code, refused.json()["error"]["message"]) == (
            404,
            "Session not found",
        )
    own = httpx.post(process.url + "/mcp", json=listing, headers={**alice, **session})
    assert own.status_code == 200


async def test_mcp_http_lists_and_reads_only_the_callers_kept_conversations(
    served: tuple[Process, Path],
) -> None:
    process, _ = served
    for key, session_id in ((KEYS["ALICE_KEY"], "alice-1"), (KEYS["BOB_KEY"], "bob-1")):
        client = caller(f"{process.url}/v1", key, max_retries=0)
        client.chat.completions.create(
            model="keeper",
            messages=[{"role": "user", "content": f"hello from {session_id}"}],
            metadata={"session_id": session_id},
        )
    async with connected(process, KEYS["ALICE_KEY"], "/agents/keeper/mcp") as alice:
        listed = await alice.list_resources()
        read = await alice.read_resource("webagents://conversations/alice-1")
        with pytest.raises(MCPError) as bobs:
            await alice.read_resource("webagents://conversations/bob-1")
    async with connected(process, None) as anonymous:
        nothing = await anonymous.list_resources()
    assert [r.uri for r in listed.resources] == ["webagents://conversations/alice-1"]
    content = read.contents[0]
    assert isinstance(content, types.TextResourceContents)
    assert [m["content"] for m in json.loads(content.text)["messages"]][-2:] == [
        "hello from alice-1",
        "noted",
    ]
    assert (bobs.value.code, bobs.value.message) == (
        -32002,
        "there is no kept conversation 'bob-1': resources/list gives them",
    )
    assert nothing.resources == []


async def test_mcp_http_daemon_answers_each_agent_at_its_path_and_keeps_sessions_to_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "agents"
    for name in ("keeper", "other"):
        write(root / name / "AGENT.md", AGENT.replace("name: keeper", f"name: {name}"))
    env = child_env(tmp_path, **KEYS)
    alice = {**MCP_HEADERS, "Authorization": f"Bearer {KEYS['ALICE_KEY']}"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with running(["daemon", str(root), "--offline"], env) as process:
        async with httpx.AsyncClient(base_url=process.url) as http:
            ambiguous = await http.post("/mcp", json=INITIALIZE, headers=alice)
            opened = await http.post("/agents/keeper/mcp", json=INITIALIZE, headers=alice)
            session = {**alice, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            elsewhere = await http.post("/agents/other/mcp", json=listing, headers=session)
            own = await http.post("/agents/keeper/mcp", json=listing, headers=session)
        async with connected(process, KEYS["ALICE_KEY"], "/agents/other/mcp") as other:
            written = answer(await other.call_tool("memory_write", {"key": "k", "content": "c"}))
    assert (ambiguous.status_code, ambiguous.json()["error"]["message"]) == (
        404,
        "several agents are served here: connect to /agents/<name>/mcp (one of: keeper, other)",
    )
    assert opened.status_code == 200
    assert (elsewhere.status_code, elsewhere.json()["error"]["message"]) == (
        404,
        "Session not found",
    )
    assert own.status_code == 200
    assert [t["name"] for t in own.json()["result"]["tools"]] == [
        "memory_search",
        "memory_read",
        "memory_write",
        "memory_forget",
        "memory_list",
    ]
    assert written[1] is False
    assert (root / "other" / ".webagents" / "memory").exists()
    assert not (root / "keeper" / ".webagents" / "memory" / "callers").exists()
