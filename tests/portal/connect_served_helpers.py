"""An agent published with the real CLI, its key, its readiness and a client of the portal's
endpoint for it, for Portal Connect's served tests."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai

from tests.conftest import write_agent
from tests.e2e.serving import Process
from tests.openai_callers import caller

from .account_helpers import new_user_key
from .processes import Served
from .publish_helpers import _signed_in, webagents

CONNECTED = "callers reach it at"


def _key(tmp_path: Path, database: str, username: str) -> str:
    """A new portal user's API key (rok_...)."""
    return new_user_key(database, username)


def _ready(agent: Process, served: Served) -> None:
    """The agent connected, and holding the portal's keys (it fetches them on connecting: on
    SQLite the portal answers no other request while it relays one, so a first call racing
    that fetch would find the agent unable to verify it; reported to the portal's side)."""
    agent.wait_until(lambda: CONNECTED in agent.output)
    agent.wait_until(lambda: '"GET /.well-known/jwks.json HTTP/1.1" 200' in served.output)


def _published(tmp_path: Path, served: Served, database: str, front: str) -> tuple[Path, str]:
    """An agent of alice's, published with the real CLI: its folder and alice's key."""
    alice = _signed_in(tmp_path, served, database, "alice", "home")
    folder = write_agent(tmp_path / "helper", front)
    done = webagents(tmp_path, "publish", str(folder))
    assert done.returncode == 0, done.stderr
    return folder, alice


def _allow_others(served: Served, alice: str, folder: Path) -> None:
    agent_id = json.loads((folder / ".webagents" / "config.json").read_text())["link"]["agentId"]
    answer = httpx.patch(
        f"{served.url}/api/agents/{agent_id}",
        headers={"Authorization": f"Bearer {alice}"},
        json={"allowOthers": True},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def _client(served: Served, key: str) -> openai.OpenAI:
    return caller(f"{served.url}/agents/helper", key, max_retries=0, timeout=60)
