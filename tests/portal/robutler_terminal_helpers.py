"""A published agent driven in a terminal, its chats read back from the portal."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pexpect

from tests.conftest import write_agent
from tests.e2e.conftest import Terminal, child_env, webagents_command
from webagents.model import ModelRequest
from webagents.testing import ScriptedServer

from .account_helpers import new_user_key
from .processes import Served

PROMPT = "\n>"


AGENT = "name: helper\nmodel: openai/test-model\nskills:\n  - session: {backend: robutler}"


async def _answer(request: ModelRequest) -> str:
    users = sum(1 for m in request.messages if m["role"] == "user")
    return f"Reply number {users} to {request.messages[-1]['content']}."


class Machine:
    """One profile of the real `webagents` command (its own ~/.webagents-<profile>)."""

    def __init__(self, tmp_path: Path, profile: str, model: ScriptedServer) -> None:
        self.tmp_path = tmp_path
        self.profile = profile
        self.env = child_env(tmp_path, OPENAI_BASE_URL=model.base_url)
        self.home = Path(self.env["WEBAGENTS_HOME"] + f"-{profile}")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [webagents_command(), "--profile", self.profile, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done

    def chat(self, folder: Path, *args: str) -> Terminal:
        child = pexpect.spawn(
            webagents_command(),
            ["--profile", self.profile, "chat", str(folder), *args],
            env=self.env,
            cwd=str(self.tmp_path),
            encoding="utf-8",
            dimensions=(40, 200),
        )
        return Terminal(child)

    def token(self) -> str:
        return str(json.loads((self.home / "login.json").read_text())["access_token"])


def _account(tmp_path: Path, served: Served, database: str) -> str:
    return new_user_key(database, "alice")


def _chats(served: Served, key: str, agent_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{served.url}/api/agents/{agent_id}/conversations",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["conversations"]
    return found


def _messages(served: Served, key: str, agent_id: str, chat_id: str) -> list[tuple[str, str]]:
    answer = httpx.get(
        f"{served.url}/api/agents/{agent_id}/conversations/{chat_id}",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text
    return [(m["role"], m["content"]) for m in answer.json()["messages"]]


def _say(terminal: Terminal, text: str, reply: str) -> None:
    terminal.child.sendline(text)
    terminal.expect(reply)
    terminal.expect(PROMPT)


def _leave(terminal: Terminal) -> None:
    terminal.child.sendeof()
    assert terminal.finish() == 0


def _published(
    tmp_path: Path, served: Served, key: str, a: Machine, front: str = AGENT
) -> tuple[Path, str]:
    """An agent folder (`front`: its AGENT.md's front matter) published by machine `a`."""
    folder = write_agent(tmp_path / "helper", front)
    a.run("login", "--portal", served.url, "--token", key)
    a.run("publish", str(folder))
    config = json.loads((folder / ".webagents" / "config.json").read_text())
    return folder, str(config["link"]["agentId"])
