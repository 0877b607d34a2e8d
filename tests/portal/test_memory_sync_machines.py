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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import write_agent
from tests.e2e.memory_served_helpers import _driver, tool
from webagents.portal_link.client import PortalClient
from webagents.testing import FunctionModel, ScriptedServer

from .processes import Served
from .publish_helpers import webagents
from .sync_machines_helpers import ALICE, BOB, OWNER, Machines, eventually, note_file, pushed

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# agent's notes synced between two machines' files, does not depend on the database beyond what the
# repository and app tests prove on both; test_memory_sync_oneshot keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_driver)) as server:
        yield server


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
