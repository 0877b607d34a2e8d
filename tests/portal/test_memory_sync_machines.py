"""`memory: {portal: true}` (SPEC M12, P7) with real processes, on PostgreSQL (SQLite with --db
sqlite): one `webagents portal serve`, the real CLI (`webagents login --token`, `webagents
publish`), and `webagents serve` of the same agent on two machines (two HOMEs, two copies of
the folder).

A note written on A is on B; notes written while the portal is down arrive once each; an
edit on both sides while apart loses neither; kill -9 during a burst loses nothing that was
acknowledged and pushes nothing twice; alice's conversation never reads another caller's
notes through the sync or the portal's search; an agent key reaches only its own store."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy

from tests.conftest import write_agent
from tests.e2e.conftest import child_env
from tests.e2e.serving import running
from tests.e2e.test_memory_served import _driver, tool
from webagents.portal_link.client import PortalClient
from webagents.testing import FunctionModel, ScriptedServer

from .processes import Served
from .test_publish_cli import _signed_in, webagents

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# agent's notes synced between two machines' files, does not depend on the database beyond what the
# repository and app tests prove on both; test_memory_sync_oneshot keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command

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


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_driver)) as server:
        yield server


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


def restart(portal: Served, tmp_path: Path, database: str) -> Served:
    port = portal.url.rsplit(":", 1)[1]
    return Served(tmp_path, "--database", database, "--port", port)


def test_p7_a_note_written_on_a_is_on_b_after_sync(
    tmp_path: Path, fresh_database_url: str, served: Served, model_server: ScriptedServer
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    with machines.serve("a") as a:
        saved = tool(
            a, OWNER, "memory_write", key="plan", content="Lisbon in March.", description="The trip"
        )
        assert saved["namespace"] == "owner"
        eventually(lambda: machines.entry("owner", "plan") is not None, "the note in the portal")
    with machines.serve("b") as b:
        eventually(lambda: note_file(machines.b, "plan").exists(), "the note on B")
        read = tool(b, OWNER, "memory_read", key="plan")
    assert (read["content"], read["description"]) == ("Lisbon in March.", "The trip")
    entry = machines.entry("owner", "plan")
    assert entry is not None
    assert (entry["content"], entry["description"], entry["source"]) == (
        "Lisbon in March.",
        "The trip",
        "webagents",
    )
    assert machines.versions() == [("owner", "plan", "put", "Lisbon in March.")]


def test_p7_twenty_notes_written_while_the_portal_is_down_arrive_once(
    tmp_path: Path, fresh_database_url: str, served: Served, model_server: ScriptedServer
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    with machines.serve("a") as a:
        served.stop()
        for n in range(20):
            tool(a, OWNER, "memory_write", key=f"note-{n}", content=f"Note number {n}.")
        outbox = machines.a / ".webagents" / "portal-sync" / "outbox.jsonl"
        assert len(outbox.read_text().splitlines()) == 20
        assert "memory: the portal does not answer; changes wait in the outbox" in a.output
        again = restart(served, tmp_path, fresh_database_url)
        try:
            eventually(lambda: len(machines.versions()) >= 20, "20 versions in the portal")
            eventually(lambda: outbox.read_text() == "", "the outbox emptied")
            listed = tool(a, OWNER, "memory_list")
        finally:
            again.stop()
    assert sorted(machines.versions()) == sorted(
        ("owner", f"note-{n}", "put", f"Note number {n}.") for n in range(20)
    )
    assert sorted(n["key"] for n in listed["notes"]) == sorted(f"note-{n}" for n in range(20))


def test_p7_both_sides_edit_one_note_while_apart_no_edit_is_lost(
    tmp_path: Path, fresh_database_url: str, served: Served, model_server: ScriptedServer
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    portal = served
    with machines.serve("a") as a, machines.serve("b") as b:
        tool(a, OWNER, "memory_write", key="plan", content="The first plan.")
        eventually(lambda: note_file(machines.b, "plan").exists(), "the note on B")
        portal.stop()
        tool(a, OWNER, "memory_write", key="plan", content="Edited on A.")
        time.sleep(0.01)  # B's edit is the later one, by its `updated` time
        tool(b, OWNER, "memory_write", key="plan", content="Edited on B.")
        portal = restart(served, tmp_path, fresh_database_url)
        try:
            eventually(
                lambda: (machines.entry("owner", "plan") or {}).get("content") == "Edited on B.",
                "B's edit current in the portal",
            )
            for machine in (machines.a, machines.b):
                eventually(
                    lambda m=machine: note_file(m, "plan").read_text().endswith("Edited on B."),
                    f"B's edit on {machine}",
                )
            log = a.output + b.output
        finally:
            portal.stop()
    contents = [content for ns, key, op, content in machines.versions() if key == "plan"]
    assert contents[0] == "The first plan."
    assert contents[-1] == "Edited on B."
    assert sorted(set(contents)) == ["Edited on A.", "Edited on B.", "The first plan."]
    assert "memory: conflict on owner/plan (changed here and in the portal since the last " in log


def test_p7_kill_9_during_a_burst_loses_nothing_acknowledged_and_pushes_nothing_twice(
    tmp_path: Path, fresh_database_url: str, served: Served, model_server: ScriptedServer
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    acknowledged: list[str] = []
    with machines.serve("a") as a:

        def burst() -> None:
            for n in range(200):
                try:
                    tool(a, OWNER, "memory_write", key=f"burst-{n}", content=f"Burst {n}.")
                except Exception:  # the agent was killed: this one was not acknowledged
                    return
                acknowledged.append(f"burst-{n}")

        writer = threading.Thread(target=burst)
        writer.start()
        eventually(lambda: len(acknowledged) >= 25, "25 acknowledged writes")
        a.popen.kill()  # SIGKILL: no clean shutdown
        writer.join(timeout=60)
    with machines.serve("a"):
        # The restarted process pushes again what follows the last saved offset (every
        # SAVE_EVERY lines): on a loaded machine that can take longer than a fixed bound,
        # so the bound runs from the push's last step (`pushed`).
        eventually(
            lambda: {key for _, key, _, _ in machines.versions()} >= set(acknowledged),
            "every acknowledged note in the portal",
            progress=lambda: pushed(machines.a),
        )
        outbox = machines.a / ".webagents" / "portal-sync" / "outbox.jsonl"
        eventually(
            lambda: outbox.read_text() == "",
            "the outbox emptied",
            progress=lambda: pushed(machines.a),
        )
    keys = [key for _, key, _, _ in machines.versions()]
    assert {key: keys.count(key) for key in keys} == dict.fromkeys(set(keys), 1)
    assert set(acknowledged) <= set(keys)
    assert len(set(keys) - set(acknowledged)) <= 1  # at most the write in flight at the kill


def test_p7_alices_conversation_never_reads_another_callers_notes_through_sync_or_search(
    tmp_path: Path, fresh_database_url: str, served: Served, model_server: ScriptedServer
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    with machines.client() as client:
        client.memory_put(
            {
                "namespace": "caller:bob@example.com",
                "key": "secret",
                "content": "Bob's tea is oolong.",
                "description": "Bob's tea",
                "source": "elsewhere",
                "at": None,
            }
        )
        client.memory_put(
            {
                "namespace": "caller:alice@example.com",
                "key": "drink",
                "content": "Alice's tea is green.",
                "description": "Alice's tea",
                "source": "elsewhere",
                "at": None,
            }
        )
    with machines.serve("a") as a:
        bob_folder = machines.a / ".webagents" / "memory" / "callers"
        eventually(lambda: len(list(bob_folder.rglob("*.md"))) == 2, "both callers' notes pulled")
        found = tool(a, ALICE, "memory_search", query="tea")
        listed = tool(a, ALICE, "memory_list")
        bobs = tool(a, BOB, "memory_search", query="tea")
    # (beside the notes, the portal may say its semantic search is off: no embedder here)
    notes = [h for h in found if "key" in h]
    assert [
        (h["namespace"], h["key"], h["content"] if "content" in h else h["snippet"]) for h in notes
    ] == [("caller:alice@example.com", "drink", "Alice's tea is green.")]
    assert [h for h in found if "key" not in h] in (
        [],
        [{"from": "portal", "note": "the portal's semantic search is off"}],
    )
    assert [(n["namespace"], n["key"]) for n in listed["notes"]] == [
        ("caller:alice@example.com", "drink")
    ]
    assert [(h["namespace"], h["key"]) for h in bobs if "key" in h] == [
        ("caller:bob@example.com", "secret")
    ]
    assert "oolong" not in json.dumps([found, listed])


def test_p5_an_agent_key_reaches_only_its_own_agents_store(
    tmp_path: Path, fresh_database_url: str, served: Served, model_server: ScriptedServer
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    other = write_agent(tmp_path / "other", "name: other\nskills:\n  - memory")
    assert webagents(tmp_path, "publish", str(other)).returncode == 0
    other_id = json.loads((other / ".webagents" / "config.json").read_text())["link"]["agentId"]
    other_key = (
        (tmp_path / "home" / ".webagents" / "agents" / f"{other_id}.key").read_text().strip()
    )
    with machines.client() as client:
        client.memory_put(
            {
                "namespace": "owner",
                "key": "plan",
                "content": "keeper's plan",
                "description": "",
                "source": "",
                "at": None,
            }
        )
    with PortalClient(served.url, other_key) as client:
        assert client.memory_get("owner", "plan") is None
        assert client.memory_list(["owner"]) == []
    answer = httpx.put(
        f"{served.url}/api/storage/memory-scoped",
        params={"agentId": machines.agent_id},
        headers={"Authorization": f"Bearer {other_key}"},
        json={
            "namespace": "owner",
            "key": "plan",
            "content": "overwritten",
            "description": "",
            "source": "",
            "at": None,
        },
    )
    assert answer.status_code == 403, answer.text
    assert machines.entry("owner", "plan") is not None
    assert (machines.entry("owner", "plan") or {})["content"] == "keeper's plan"
