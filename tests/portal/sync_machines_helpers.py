"""Several machines of one agent syncing their notes with a served portal, in tests."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy

from tests.conftest import write_agent
from tests.e2e.conftest import child_env
from tests.e2e.serving import running
from webagents.portal_link.client import PortalClient
from webagents.testing import ScriptedServer

from .processes import Served
from .publish_helpers import _signed_in, webagents

KEYS = {"ALICE_KEY": "alice-key-123", "BOB_KEY": "bob-key-123", "OWNER_KEY": "owner-key-123"}


OWNER, ALICE, BOB = KEYS["OWNER_KEY"], KEYS["ALICE_KEY"], KEYS["BOB_KEY"]


AGENT_FILE = """name: keeper
model: openai/m
skills:
  - memory: {portal: true, sync_seconds: 0.2}
access:
  owner: env:OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: env:BOB_KEY"""


# The most any wait here takes, however loaded the machine: a guard against a hang only.
GUARD_SECONDS = 600


def eventually(
    check: Callable[[], bool],
    what: str,
    timeout: float = 60,
    progress: Callable[[], object] | None = None,
) -> None:
    """Wait for `check` (a bounded wait, not a timed assertion). With `progress`, a measure of
    the work awaited (how far the sync got), the bound is `timeout` seconds after it last
    moved: a long outbox pushed to a portal on a loaded machine takes what it takes, and only
    a sync that stopped moving fails (GUARD_SECONDS in all)."""
    start = time.monotonic()
    moved, seen = start, progress() if progress else None
    while time.monotonic() - moved < timeout and time.monotonic() - start < GUARD_SECONDS:
        if check():
            return
        time.sleep(0.1)  # a check may open a database connection: not more often
        if progress is not None and (now := progress()) != seen:
            moved, seen = time.monotonic(), now
    assert check(), f"never: {what}"


class Machines:
    """The published agent's folder on machine A (home `home`) and its copy on machine B
    (home `homeb`, signed in as the same user, the agent's key in WEBAGENTS_AGENT_TOKEN)."""

    def __init__(self, tmp_path: Path, portal: Served, database: str, model: ScriptedServer):
        self.tmp_path = tmp_path
        self.portal = portal
        self.database = database
        self.model = model
        user_key = _signed_in(tmp_path, portal, database, "alice", "home")
        self.a = write_agent(tmp_path / "a" / "keeper", AGENT_FILE, "Keep notes.")
        done = webagents(tmp_path, "publish", str(self.a))
        assert done.returncode == 0, done.stderr
        self.agent_id = json.loads((self.a / ".webagents" / "config.json").read_text())["link"][
            "agentId"
        ]
        key_file = tmp_path / "home" / ".webagents" / "agents" / f"{self.agent_id}.key"
        self.key = key_file.read_text().strip()
        self.b = tmp_path / "b" / "keeper"
        (self.b / ".webagents").mkdir(parents=True)
        shutil.copy(self.a / "AGENT.md", self.b / "AGENT.md")
        shutil.copy(self.a / ".webagents" / "config.json", self.b / ".webagents" / "config.json")
        login = webagents(
            tmp_path, "login", "--portal", portal.url, "--token", user_key, home="homeb"
        )
        assert login.returncode == 0, login.stderr

    def env(self, machine: str) -> dict[str, str]:
        env = child_env(self.tmp_path, OPENAI_BASE_URL=self.model.base_url, **KEYS)
        if machine == "b":
            env["WEBAGENTS_HOME"] = str(self.tmp_path / "homeb" / ".webagents")
            env["WEBAGENTS_AGENT_TOKEN"] = self.key
        return env

    def serve(self, machine: str) -> Any:
        return running(["serve", str(self.a if machine == "a" else self.b)], self.env(machine))

    def client(self) -> PortalClient:
        return PortalClient(self.portal.url, self.key)

    def entry(self, namespace: str, key: str) -> dict[str, Any] | None:
        with self.client() as client:
            found = client.memory_get(namespace, key)
        return found.model_dump(mode="json") if found is not None else None

    def versions(self) -> list[tuple[str, str, str, str]]:
        """Every version the portal keeps of this agent's notes: (namespace, key, op, content)."""
        engine = sqlalchemy.create_engine(self.database)
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sqlalchemy.text(
                        "SELECT namespace, key, op, content FROM memory_versions ORDER BY cursor"
                    )
                ).all()
        finally:
            engine.dispose()
        return [(r[0], r[1], r[2], r[3]) for r in rows]


def pushed(folder: Path) -> object:
    """How far the sync of the agent in `folder` pushed its outbox (its saved offset, a file
    replaced whole), and the outbox's size: they move while a push is under way."""
    sync = folder / ".webagents" / "portal-sync"
    try:
        offset = json.loads((sync / "state.json").read_text())["offset"]
    except (OSError, ValueError, KeyError):
        offset = None
    outbox = sync / "outbox.jsonl"
    return offset, outbox.stat().st_size if outbox.exists() else None


def note_file(folder: Path, key: str) -> Path:
    return folder / ".webagents" / "memory" / "owner" / f"{key}.md"
