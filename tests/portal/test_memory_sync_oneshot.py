"""`memory: {portal: true}` (SPEC M12, P7) in one-shot runs and first conversations, with real
processes on SQLite and PostgreSQL: one `webagents portal serve`, the agent published with the
real CLI on machine A (home `home`), its copy on a fresh machine B (home `homeb`, the agent's
key in WEBAGENTS_AGENT_TOKEN), and `webagents run` / `webagents chat` in each.

`run` pushes its writes before it exits (or says on stderr that they wait in the outbox) and
leaves no temporary file; the first conversation on a fresh machine shows the portal's notes
in its `## Memory` block and in `memory_list`, and when the portal does not answer the chat
says so and its system prompt stays the same through the conversation."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_agent
from tests.e2e.conftest import child_env, webagents_command
from tests.e2e.memory_served_helpers import _driver, index_lines
from webagents.model import ModelRequest
from webagents.portal_link.client import PortalClient
from webagents.testing import FunctionModel, ScriptedServer

from .processes import Served
from .publish_helpers import _signed_in, webagents

pytestmark = pytest.mark.e2e  # runs the installed webagents command

AGENT_FILE = "name: keeper\nmodel: openai/m\nskills:\n  - memory: {portal: true}"
"""The sync's own interval (30 s): nothing in these tests waits for a background round."""


class Recording:
    """The model of these tests (`_driver`'s: PROMPT, CALL tool {json}, echo), keeping the
    system prompt of every request it was sent."""

    def __init__(self) -> None:
        self.system_prompts: list[str] = []

    def __call__(self, request: ModelRequest) -> Any:
        self.system_prompts.append(request.messages[0]["content"])
        return _driver(request)


@pytest.fixture
def model() -> Iterator[tuple[ScriptedServer, Recording]]:
    recording = Recording()
    with ScriptedServer(FunctionModel(recording)) as server:
        yield server, recording


class Machines:
    """The published agent's folder on machine A, and a copy of it on a fresh machine B."""

    def __init__(self, tmp_path: Path, portal: Served, database: str, model: ScriptedServer):
        self.tmp_path = tmp_path
        self.portal = portal
        self.model = model
        _signed_in(tmp_path, portal, database, "alice", "home")
        self.a = write_agent(tmp_path / "a" / "keeper", AGENT_FILE, "Keep notes.")
        done = webagents(tmp_path, "publish", str(self.a))
        assert done.returncode == 0, done.stderr
        agent_id = json.loads((self.a / ".webagents" / "config.json").read_text())["link"][
            "agentId"
        ]
        key_file = tmp_path / "home" / ".webagents" / "agents" / f"{agent_id}.key"
        self.key = key_file.read_text().strip()
        self.b = tmp_path / "b" / "keeper"
        (self.b / ".webagents").mkdir(parents=True)
        shutil.copy(self.a / "AGENT.md", self.b / "AGENT.md")
        shutil.copy(self.a / ".webagents" / "config.json", self.b / ".webagents" / "config.json")

    def env(self, machine: str) -> dict[str, str]:
        env = child_env(self.tmp_path, OPENAI_BASE_URL=self.model.base_url)
        if machine == "b":
            env["WEBAGENTS_HOME"] = str(self.tmp_path / "homeb" / ".webagents")
            env["WEBAGENTS_AGENT_TOKEN"] = self.key
        return env

    def run(self, machine: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        folder = self.a if machine == "a" else self.b
        return subprocess.run(
            [webagents_command(), *args[:1], str(folder), *args[1:]],
            input=stdin,
            env=self.env(machine),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def entry(self, namespace: str, key: str) -> dict[str, Any] | None:
        with PortalClient(self.portal.url, self.key) as client:
            found = client.memory_get(namespace, key)
        return found.model_dump(mode="json") if found is not None else None

    def put(self, key: str, content: str, description: str) -> None:
        """A note written into the portal by another machine (the agent's key, as a sync)."""
        entry = {"namespace": "owner", "key": key, "content": content}
        with PortalClient(self.portal.url, self.key) as client:
            client.memory_put({**entry, "description": description, "source": "webagents"})


@pytest.fixture
def machines(
    tmp_path: Path,
    fresh_database_url: str,
    served: Served,
    model: tuple[ScriptedServer, Recording],
) -> Machines:
    """Alice signed in, her agent published from machine A and copied to machine B."""
    return Machines(tmp_path, served, fresh_database_url, model[0])


def outbox(folder: Path) -> list[dict[str, Any]]:
    path = folder / ".webagents" / "portal-sync" / "outbox.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def temporary_files(*folders: Path) -> list[str]:
    """Every file a write left behind under `folders` (the atomic writes' `*.tmp`)."""
    return sorted(str(p) for folder in folders for p in folder.rglob("*.tmp"))


def call(tool: str, **arguments: Any) -> str:
    return f"CALL {tool} {json.dumps(arguments)}"


def test_p7_run_pushes_its_write_before_it_exits_and_leaves_no_temporary_file(
    tmp_path: Path,
    machines: Machines,
) -> None:
    wrote = machines.run(
        "a", "run", call("memory_write", key="plan", content="Lisbon in March.", description="Trip")
    )
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stderr == ""
    saved = json.loads(wrote.stdout.removeprefix("RESULT "))
    assert (saved["saved"], saved["namespace"]) == ("plan", "owner")
    entry = machines.entry("owner", "plan")  # at once: the run pushed it before it exited
    assert entry is not None
    assert (entry["content"], entry["description"], entry["source"]) == (
        "Lisbon in March.",
        "Trip",
        "webagents",
    )
    assert outbox(machines.a) == []
    assert temporary_files(machines.a, tmp_path / "home") == []


def test_p7_run_removes_the_temporary_state_file_a_stopped_sync_left(
    tmp_path: Path,
    machines: Machines,
) -> None:
    first = machines.run("a", "run", call("memory_write", key="plan", content="Lisbon."))
    assert first.returncode == 0, first.stderr
    # What a process killed (or ended) while its sync thread saved the state leaves behind.
    folder = machines.a / ".webagents" / "portal-sync"
    stray = folder / ".state.json.0a1b2c3d4e5f.tmp"
    stray.write_bytes(b'{"offset": 0, "curs')
    wrote = machines.run("a", "run", call("memory_write", key="tea", content="Green."))
    assert wrote.returncode == 0, wrote.stderr
    assert temporary_files(machines.a, tmp_path / "home") == []
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "outbox.jsonl", "state.json"]
    entry = machines.entry("owner", "tea")
    assert entry is not None and entry["content"] == "Green."


def test_p7_run_with_the_portal_down_says_so_and_the_outbox_keeps_the_write(
    tmp_path: Path,
    machines: Machines,
    served: Served,
) -> None:
    served.stop()
    wrote = machines.run("a", "run", call("memory_write", key="plan", content="Lisbon in March."))
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout.removeprefix("RESULT "))["saved"] == "plan"
    assert wrote.stderr.splitlines() == [
        "WARNING webagents.memory: memory: the portal does not answer; changes wait in the "
        f"outbox (cannot reach the portal at {served.url} ([Errno 111] Connection refused): "
        "check its address (webagents login --portal URL, or ROBUTLER_API_URL) and that the "
        "portal runs there (webagents portal serve))",
        f"memory: the portal {served.url} did not answer: 1 change waits in this machine's "
        "outbox, pushed by the agent's next chat, run or serve",
    ]
    assert [(line["op"], line["key"], line["content"]) for line in outbox(machines.a)] == [
        ("put", "plan", "Lisbon in March.")
    ]
    assert temporary_files(machines.a, tmp_path / "home") == []


def test_p7_first_run_on_a_fresh_machine_shows_the_portals_notes(
    machines: Machines,
) -> None:
    machines.put("plan", "Lisbon in March.", "The trip")
    machines.put("tea", "Green, no sugar.", "How the owner takes tea")
    prompt = machines.run("b", "run", "PROMPT")
    assert prompt.returncode == 0, prompt.stderr
    assert index_lines(prompt.stdout.rstrip("\n")) == [
        "Your notes (owner):",
        "- tea: How the owner takes tea",
        "- plan: The trip",
    ]
    listed = machines.run("b", "run", call("memory_list"))
    assert listed.returncode == 0, listed.stderr
    notes = json.loads(listed.stdout.removeprefix("RESULT "))["notes"]
    assert [(n["key"], n["namespace"], n["description"]) for n in notes] == [
        ("tea", "owner", "How the owner takes tea"),
        ("plan", "owner", "The trip"),
    ]


def test_p7_first_chat_on_a_fresh_machine_shows_the_portals_notes(
    machines: Machines,
    model: tuple[ScriptedServer, Recording],
) -> None:
    machines.put("plan", "Lisbon in March.", "The trip")
    chat = machines.run("b", "chat", stdin=f"PROMPT\n{call('memory_list')}\n")
    assert chat.returncode == 0, chat.stderr
    assert "did not answer" not in chat.stdout
    prompts = model[1].system_prompts
    assert len(prompts) == 3  # PROMPT, then memory_list's call and its result
    assert index_lines(prompts[0]) == ["Your notes (owner):", "- plan: The trip"]
    assert prompts == [prompts[0]] * 3
    listed = re.search(r"RESULT (\{.*\})", chat.stdout)
    assert listed is not None, chat.stdout
    notes = json.loads(listed.group(1))["notes"]
    assert [(n["key"], n["description"]) for n in notes] == [("plan", "The trip")]


def test_p7_first_chat_with_the_portal_down_says_so_and_keeps_one_prompt(
    machines: Machines,
    served: Served,
    model: tuple[ScriptedServer, Recording],
) -> None:
    served.stop()
    chat = machines.run("b", "chat", stdin=f"PROMPT\nhello\n{call('memory_list')}\n")
    assert chat.returncode == 0, chat.stderr
    said = [line for line in chat.stdout.splitlines() if line.startswith("memory:")]
    assert said == [
        f"memory: the portal {served.url} did not answer, so this conversation shows only "
        "the notes kept on this machine; /memory syncs again"
    ]
    prompts = model[1].system_prompts
    assert len(prompts) == 4
    assert prompts == [prompts[0]] * 4  # the block was built once, whatever the portal did
    assert index_lines(prompts[0]) == ["Your notes (owner): none yet."]
    assert outbox(machines.b) == []
