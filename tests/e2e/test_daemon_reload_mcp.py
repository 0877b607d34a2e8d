"""`webagents daemon` goes on answering while it reloads an agent whose MCP servers are slow to
start (issue 24): loading is synchronous (the `mcp` skill starts each server and asks it for
its tools), so it runs on a worker thread, not on the event loop that answers requests. Was:
the whole daemon, /health included, stopped answering until the servers had started."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from webagents.testing import ScriptedModel, ScriptedServer

from .conftest import child_env
from .serving import running, write

pytestmark = pytest.mark.e2e

SLOW_SERVER = """
import pathlib
import sys
import time

from mcp.server.mcpserver import MCPServer

marks = pathlib.Path(sys.argv[1])
(marks / "started").write_text("yes")
while not (marks / "release").exists():  # the test says when start-up may finish
    time.sleep(0.05)

server = MCPServer("slow")


@server.tool()
def ping() -> str:
    \"\"\"Answers pong.\"\"\"
    return "pong"


server.run()
"""


def _agent(name: str, skills: str = "") -> str:
    return f"---\nname: {name}\nmodel: openai/m\n{skills}---\nI am {name}.\n"


def test_daemon_answers_health_while_an_agents_mcp_server_starts(tmp_path: Path) -> None:
    root, marks = tmp_path / "agents", tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "slow_server.py"
    script.write_text(SLOW_SERVER, encoding="utf-8")
    servers = {"slow": {"command": [sys.executable, str(script), str(marks)]}}
    write(root / "alpha" / "AGENT.md", _agent("alpha"))
    with ScriptedServer(ScriptedModel()) as model:
        env = child_env(tmp_path, OPENAI_BASE_URL=model.base_url)
        with running(["daemon", str(root)], env) as process:
            mcp = f"skills:\n  - mcp: {json.dumps({'servers': servers})}\n"
            write(root / "beta" / "AGENT.md", _agent("beta", mcp))
            process.wait_until(lambda: (marks / "started").exists())

            # The server is held in its start-up: the daemon answers all the same.
            health = httpx.get(f"{process.url}/health", timeout=20)
            listed = httpx.get(f"{process.url}/v1/models", timeout=20).json()["data"]
            assert (health.status_code, health.json()) == (200, {"status": "ok", "agents": 1})
            assert [m["id"] for m in listed] == ["alpha"]

            (marks / "release").write_text("go")
            process.wait_until(
                lambda: (
                    [m["id"] for m in httpx.get(f"{process.url}/v1/models").json()["data"]]
                    == ["alpha", "beta"]
                )
            )
    assert "serving agent 'beta'" in process.output
