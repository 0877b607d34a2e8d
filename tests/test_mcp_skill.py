"""The `mcp` skill (issue 24): MCP servers' tools as the agent's, `NAME__tool` with the
servers' own schemas, reached on stdio and over streamable HTTP; a server that cannot start
reported at load; one that dies mid-conversation a tool error, then started again; offered
to the owner alone unless `callers: true`, and never to an anonymous caller (rights.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from webagents.agent import Agent
from webagents.agent_file import load_agent
from webagents.caller import Caller
from webagents.context import Context
from webagents.errors import ConfigError, SkillSettingsError
from webagents.rights import offered_agent_credentials
from webagents.skills.mcp import McpSkill, connection
from webagents.testing import ScriptedModel, call, call_unoffered, reply

from .conftest import write_agent

SERVER = """
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tickets")


@server.tool()
def add(a: int, b: int) -> str:
    \"\"\"Add two numbers.\"\"\"
    return str(a + b)


@server.tool()
def pid() -> str:
    \"\"\"The server's process id.\"\"\"
    return str(os.getpid())


@server.tool()
def die() -> str:
    \"\"\"Stop the server in the middle of the call.\"\"\"
    os._exit(3)


@server.tool()
def hang() -> str:
    \"\"\"Never answers: a server stuck in a call.\"\"\"
    time.sleep(3600)
    return "woke"


@server.tool()
def token() -> str:
    \"\"\"The token the server was given.\"\"\"
    return os.environ.get("TICKETS_TOKEN", "unset")


@server.tool()
def refuse() -> str:
    \"\"\"Always refuses.\"\"\"
    raise ToolError("no tickets today")


if sys.argv[1:] == ["http"]:
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until uvicorn takes them
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app()
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
else:
    server.run()
"""
NAMES = [
    "tickets__add",
    "tickets__pid",
    "tickets__die",
    "tickets__hang",
    "tickets__token",
    "tickets__refuse",
]
ALICE = Caller.verified("alice@example.com")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "tickets.py"
    path.write_text(SERVER, encoding="utf-8")
    return path


def desk(tmp_path: Path, server: dict[str, Any], model: ScriptedModel | None = None) -> Agent:
    """The agent `desk` with one MCP server, `tickets` (JSON is YAML's flow style)."""
    settings = json.dumps({"servers": {"tickets": server}})
    folder = write_agent(
        tmp_path / "desk", f"name: desk\nmodel: openai/m\nskills:\n  - mcp: {settings}"
    )
    return load_agent(folder, model=model or ScriptedModel())


def stdio_agent(
    tmp_path: Path, script: Path, model: ScriptedModel | None = None, **extra: Any
) -> Agent:
    return desk(tmp_path, {"command": [sys.executable, str(script)], **extra}, model)


@pytest.fixture
def http_server(script: Path) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(script), "http"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=15)
        if process.stdout is not None:
            process.stdout.close()


@asynccontextmanager
async def direct(script: Path) -> AsyncIterator[ClientSession]:
    """The test server reached by the official client, without the agent."""
    params = StdioServerParameters(command=sys.executable, args=[str(script)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def tools_of(agent: Agent, caller: Caller) -> list[str]:
    skill = agent.skill(McpSkill.name)
    assert skill is not None
    return [tool.name for tool in skill.tools(Context(agent=agent.info, caller=caller))]


def tool_messages(model: ScriptedModel) -> list[str]:
    """What each tool call of the conversation answered the model with."""
    return [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]


async def test_mcp_skill_offers_the_servers_tools_as_name__tool_with_their_schemas(
    tmp_path: Path, script: Path
) -> None:
    agent = stdio_agent(tmp_path, script)
    skill = agent.skill(McpSkill.name)
    assert skill is not None
    offered = skill.tools(Context(agent=agent.info, caller=Caller.owner()))
    async with direct(script) as session:
        listed = (await session.list_tools()).tools
    assert [(t.name, t.description, t.parameters) for t in offered] == [
        (f"tickets__{t.name}", t.description, t.input_schema) for t in listed
    ]
    assert [t.name for t in offered] == NAMES


async def test_mcp_skill_tool_call_through_a_conversation_on_stdio(
    tmp_path: Path, script: Path
) -> None:
    model = ScriptedModel(
        [
            reply(None, call("tickets__add", a=2, b=3), call("tickets__refuse")),
            "Five, and no tickets.",
        ]
    )
    agent = stdio_agent(tmp_path, script, model)
    conversation = await agent.start(caller=Caller.owner())
    result = await conversation.send("add 2 and 3")
    await agent.aclose()
    assert result.output == "Five, and no tickets."
    assert tool_messages(model) == ["5", "Error: Error executing tool refuse: no tickets today"]
    assert [t["function"]["name"] for t in model.requests[0].tools] == NAMES


async def test_mcp_skill_tool_call_through_a_conversation_over_http(
    tmp_path: Path, http_server: str
) -> None:
    model = ScriptedModel([call("tickets__add", a=40, b=2), "42."])
    agent = desk(tmp_path, {"url": http_server}, model)
    conversation = await agent.start(caller=Caller.owner())
    result = await conversation.send("add")
    assert (result.output, tool_messages(model)) == ("42.", ["42"])


async def test_mcp_skill_passes_env_secrets_to_its_servers_and_reports_a_missing_one(
    tmp_path: Path, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"TICKETS_TOKEN": "env:DESK_TICKETS"}
    with pytest.raises(ConfigError) as missing:
        stdio_agent(tmp_path, script, env=env)
    assert str(missing.value) == (
        "skill 'mcp': server 'tickets': env TICKETS_TOKEN is env:DESK_TICKETS, but the "
        "environment variable DESK_TICKETS is not set"
    )
    monkeypatch.setenv("DESK_TICKETS", "t-123")
    model = ScriptedModel([call("tickets__token"), "ok"])
    agent = stdio_agent(tmp_path, script, model, env=env)
    await (await agent.start(caller=Caller.owner())).send("token?")
    assert tool_messages(model) == ["t-123"]


def test_mcp_skill_reports_a_server_that_does_not_start_at_load(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-server"
    with pytest.raises(ConfigError) as refused:
        desk(tmp_path, {"command": [str(missing)]})
    assert str(refused.value) == (
        f"skill 'mcp': the server 'tickets' ({missing}) did not start or answer: "
        f"FileNotFoundError: [Errno 2] No such file or directory: '{missing}'; check that "
        "the command runs and speaks MCP on stdio"
    )


def test_mcp_skill_reports_a_url_that_does_not_answer_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        desk(tmp_path, {"url": "http://127.0.0.1:9/mcp"})
    assert str(refused.value) == (
        "skill 'mcp': the server 'tickets' (http://127.0.0.1:9/mcp) did not start or answer: "
        "ConnectError: All connection attempts failed; check the URL, that the server is up, "
        "and its headers"
    )


def test_mcp_skill_reports_a_server_that_does_not_answer_at_load(tmp_path: Path) -> None:
    silent = tmp_path / "silent.py"
    silent.write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        desk(tmp_path, {"command": [sys.executable, str(silent)]})
    print("SILENT", refused.value)
    assert str(refused.value).startswith(
        f"skill 'mcp': the server 'tickets' ({sys.executable} {silent}) did not start or answer: "
    )
    assert str(refused.value).endswith("; check that the command runs and speaks MCP on stdio")


async def test_mcp_skill_server_killed_mid_conversation_is_a_tool_error_then_restarted(
    tmp_path: Path, script: Path
) -> None:
    model = ScriptedModel([call("tickets__pid"), call("tickets__die"), call("tickets__pid"), "ok"])
    agent = stdio_agent(tmp_path, script, model)
    await (await agent.start(caller=Caller.owner())).send("go")
    first, died, second = tool_messages(model)
    assert died == (
        "Error: the MCP server 'tickets' failed (MCPError: Connection closed); it is started "
        "again for the next call"
    )
    assert first.isdigit() and second.isdigit() and first != second


async def test_mcp_skill_call_past_timeout_seconds_is_a_tool_error_and_the_server_restarted(
    tmp_path: Path, script: Path
) -> None:
    """Was: no limit on a call; a server stuck in one held the turn for as long as it hung."""
    model = ScriptedModel([call("tickets__pid"), call("tickets__hang"), call("tickets__pid"), "ok"])
    agent = stdio_agent(tmp_path, script, model, timeout_seconds=3)
    result = await (await agent.start(caller=Caller.owner())).send("go")
    await agent.aclose()
    first, hung, second = tool_messages(model)
    assert result.output == "ok"
    assert hung == (
        "Error: the MCP server 'tickets' did not answer the call of 'hang' within its limit of "
        "3 s (timeout_seconds); it was stopped, and is started again for the next call"
    )
    assert first.isdigit() and second.isdigit() and first != second
    with pytest.raises(ProcessLookupError):  # the stuck server was stopped, not left behind
        os.kill(int(first), 0)


async def test_mcp_skill_server_that_hangs_starting_again_is_a_tool_error_and_stopped(
    tmp_path: Path, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: a start past its limit left the server's process running, unowned."""
    starts = tmp_path / "starts"
    hanging = tmp_path / "hanging.py"
    hanging.write_text(
        "import os, pathlib, runpy, sys, time\n"
        f"starts = pathlib.Path({str(starts)!r})\n"
        "with starts.open('a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        "if len(starts.read_text().split()) > 1:\n"
        "    time.sleep(3600)  # the second start never speaks MCP\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    model = ScriptedModel([call("tickets__pid"), "ok"])
    agent = desk(tmp_path, {"command": [sys.executable, str(hanging)]}, model)
    monkeypatch.setattr(connection, "STARTUP_SECONDS", 2.0)  # after the load's own start
    await (await agent.start(caller=Caller.owner())).send("go")
    await agent.aclose()
    assert tool_messages(model) == [
        "Error: the MCP server 'tickets' failed (TimeoutError: no answer within 2 s of "
        "starting); it is started again for the next call"
    ]
    loaded, hung = (int(pid) for pid in starts.read_text().split())
    for pid in (loaded, hung):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


MUTE_SERVER = """
import json
import sys

for line in sys.stdin:  # answers initialize, then nothing: a server stuck listing its tools
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mute", "version": "1"},
        }
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


def test_mcp_skill_reports_a_server_that_does_not_list_its_tools_within_its_limit(
    tmp_path: Path,
) -> None:
    """Was: the load waited for the list for ever."""
    mute = tmp_path / "mute.py"
    mute.write_text(MUTE_SERVER, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        desk(tmp_path, {"command": [sys.executable, str(mute)], "timeout_seconds": 1})
    assert str(refused.value) == (
        f"skill 'mcp': the server 'tickets' ({sys.executable} {mute}) did not start or answer: "
        "no list of tools within 1 s (timeout_seconds); check that the command runs and speaks "
        "MCP on stdio"
    )


def test_mcp_skill_timeout_seconds_is_60_unless_given() -> None:
    skill = McpSkill.from_settings({"servers": {"a": {"command": ["x"]}, "b": {"url": "http://h"}}})
    given = McpSkill.from_settings({"servers": {"a": {"command": ["x"], "timeout_seconds": 2.5}}})
    assert [s.timeout_seconds for s in skill.settings.servers.values()] == [60.0, 60.0]
    assert given.settings.servers["a"].timeout_seconds == 2.5


async def test_mcp_skill_closing_the_agent_stops_its_servers(tmp_path: Path, script: Path) -> None:
    model = ScriptedModel([call("tickets__pid"), "ok"])
    agent = stdio_agent(tmp_path, script, model)
    await (await agent.start(caller=Caller.owner())).send("pid?")
    (pid,) = tool_messages(model)
    await agent.aclose()  # a daemon retiring a reloaded agent: its servers must not linger
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)


@pytest.mark.parametrize(
    ("extra", "offered"),
    [
        ({}, {"owner": NAMES, "verified": [], "anonymous": []}),
        ({"callers": True}, {"owner": NAMES, "verified": NAMES, "anonymous": []}),
    ],
    ids=["owner-only-by-default", "callers-true"],
)
def test_mcp_skill_offers_its_tools_to_the_owner_and_verified_callers_only_when_told(
    tmp_path: Path, script: Path, extra: dict[str, Any], offered: dict[str, list[str]]
) -> None:
    agent = stdio_agent(tmp_path, script, **extra)
    callers = {"owner": Caller.owner(), "verified": ALICE, "anonymous": Caller.anonymous()}
    assert {kind: tools_of(agent, caller) for kind, caller in callers.items()} == offered


async def test_mcp_skill_refuses_a_callers_call_to_an_owner_only_tool(
    tmp_path: Path, script: Path
) -> None:
    model = ScriptedModel([call_unoffered("tickets__add", {"a": 1, "b": 1}), "no"])
    agent = stdio_agent(tmp_path, script, model)
    await (await agent.start(caller=ALICE)).send("add")
    assert tool_messages(model) == [
        "Error: there is no tool named 'tickets__add'; the tools are: none"
    ]
    assert model.requests[0].tools == []


@pytest.mark.parametrize(
    ("caller", "to_callers", "offered"),
    [
        (Caller.owner(), False, True),
        (ALICE, False, False),
        (ALICE, True, True),
        (Caller.anonymous(), True, False),
        (Caller.verified("jwt:x#y"), True, False),  # names no namespace: not verified enough
        (Caller.channel("slack", "U1"), True, True),
    ],
)
def test_rights_offer_agent_credentials_to_the_owner_and_named_callers_when_told(
    caller: Caller, to_callers: bool, offered: bool
) -> None:
    assert offered_agent_credentials(caller, to_callers=to_callers) is offered


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (
            {"servers": {"t": {"command": ["x"], "url": "http://h/mcp"}}},
            "give either command: [program, args...] or url: (not both)",
        ),
        ({"servers": {"t": {}}}, "give either command: [program, args...] or url: (not both)"),
        (
            {"servers": {"t": {"url": "http://h/mcp", "env": {"A": "b"}}}},
            "env: is for a command's server; a url's takes headers:",
        ),
        (
            {"servers": {"a__b": {"command": ["x"]}}},
            "server name 'a__b': letters, digits, - and single _ only (it prefixes the "
            "server's tools as NAME__tool)",
        ),
        ({"servers": {"t": {"url": "ftp://h"}}}, "url must be an http:// or https:// address"),
        (
            {"servers": {"t": {"command": ["x"], "timeout_seconds": 0}}},
            "setting 'servers.t.timeout_seconds': Input should be greater than 0",
        ),
    ],
)
def test_mcp_skill_settings_refuse_what_cannot_name_one_server(
    settings: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SkillSettingsError) as refused:
        McpSkill.from_settings(settings)
    assert problem in str(refused.value)
