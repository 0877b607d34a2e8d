"""Issue 13's acceptance across its parts, with real processes, on PostgreSQL (SQLite with --db
sqlite): one `webagents portal serve`, an agent folder with `memory: {portal: true,
sync_seconds: 0.2}` published with the real CLI and served by `webagents serve` as machine A,
and the owner in Chromium on the portal's memory pages (SPEC P8, P6, P7, M12).

An edit on the owner's page reaches A's note file; forget on the page removes it; a retention
rule set on the page and swept by the portal's own sweeper removes the entry from the portal,
and A's next sync removes the file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import child_env
from tests.e2e.memory_served_helpers import _driver, tool
from webagents.testing import FunctionModel, ScriptedServer

from . import processes
from .conftest import PASSWORD
from .processes import Served
from .sync_machines_helpers import OWNER, Machines, eventually, note_file

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# owner's page edits reaching an agent's files, does not depend on the database beyond what the
# repository and app tests prove on both; test_memory_sync_oneshot keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_driver)) as server:
        yield server


def _memory_page(page: Any, machines: Machines) -> str:
    """alice signs in and goes from her home page to the agent's memory page (its URL)."""
    url = machines.portal.url
    page.goto(f"{url}/signin")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{url}/")
    memory = f"{url}/agents/{machines.agent_id}/memory"
    page.click(f'a[href="/agents/{machines.agent_id}/memory"]')
    page.wait_for_url(memory)
    return memory


def _open_entry(page: Any, machines: Machines, key: str) -> None:
    """From the memory page to its `owner` namespace and the entry `key`, by clicking."""
    memory = _memory_page(page, machines)
    page.click("#namespaces a")
    page.wait_for_url(f"{memory}/namespace?namespace=owner")
    page.click(f"#entries a:text-is('{key}')")
    page.wait_for_url(f"{memory}/entry?namespace=owner&key={key}")


def _ops(machines: Machines, key: str) -> list[tuple[str, str]]:
    return [(op, content) for _, k, op, content in machines.versions() if k == key]


def test_p8_an_edit_on_the_owners_page_in_chromium_reaches_the_agents_file(
    tmp_path: Path,
    fresh_database_url: str,
    served: Served,
    model_server: ScriptedServer,
    page: Any,
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    with machines.serve("a") as a:
        tool(a, OWNER, "memory_write", key="plan", content="Lisbon in March.", description="Trip")
        eventually(lambda: machines.entry("owner", "plan") is not None, "the note in the portal")
        _open_entry(page, machines, "plan")
        assert page.input_value("#content") == "Lisbon in March."
        page.fill("#content", "Lisbon in May,\nwith Tomas.")
        page.fill("#description", "The trip, moved")
        with page.expect_navigation():
            page.click("#save")
        assert page.input_value("#content") == "Lisbon in May,\nwith Tomas."
        path = note_file(machines.a, "plan")
        eventually(lambda: path.read_text().endswith("Lisbon in May,\nwith Tomas."), "A's file")
        read = tool(a, OWNER, "memory_read", key="plan")
    assert (read["content"], read["description"]) == (
        "Lisbon in May,\nwith Tomas.",
        "The trip, moved",
    )
    assert "Lisbon in March." not in path.read_text()
    assert _ops(machines, "plan") == [
        ("put", "Lisbon in March."),
        ("put", "Lisbon in May,\nwith Tomas."),
    ]


def test_p8_forget_on_the_page_removes_the_agents_file(
    tmp_path: Path,
    fresh_database_url: str,
    served: Served,
    model_server: ScriptedServer,
    page: Any,
) -> None:
    machines = Machines(tmp_path, served, fresh_database_url, model_server)
    with machines.serve("a") as a:
        tool(a, OWNER, "memory_write", key="plan", content="Lisbon in March.")
        tool(a, OWNER, "memory_write", key="kept", content="Stays.")
        eventually(lambda: machines.entry("owner", "kept") is not None, "the notes in the portal")
        path = note_file(machines.a, "plan")
        assert path.exists()
        _open_entry(page, machines, "plan")
        with page.expect_navigation():
            page.click("#forget-link")  # the page that asks first
        with page.expect_navigation():
            page.click("#confirm-forget")
        eventually(lambda: not path.exists(), "A's file removed")
        listed = tool(a, OWNER, "memory_list")
    assert [n["key"] for n in listed["notes"]] == ["kept"]
    assert note_file(machines.a, "kept").exists()
    assert machines.entry("owner", "plan") is None
    assert _ops(machines, "plan") == [("put", "Lisbon in March."), ("delete", "Lisbon in March.")]


def test_p6_retention_removes_an_entry_from_the_portal_and_after_sync_from_the_agents_files(
    tmp_path: Path,
    fresh_database_url: str,
    model_server: ScriptedServer,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def quick_sweeper(tmp: Path, **extra: str) -> dict[str, str]:
        return child_env(tmp, WEBAGENTS_PORTAL_RETENTION_SWEEP_SECONDS="0.2", **extra)

    monkeypatch.setattr(processes, "child_env", quick_sweeper)
    portal = Served(tmp_path, "--database", fresh_database_url)
    try:
        machines = Machines(tmp_path, portal, fresh_database_url, model_server)
        # A note kept on A since before the sync, last changed ten days ago: the first sync
        # pushes it with that time.
        old = note_file(machines.a, "old")
        old.parent.mkdir(parents=True)
        ten_days_ago = (datetime.now(UTC) - timedelta(days=10)).isoformat()
        old.write_text(f'---\ndescription: Old\nupdated: "{ten_days_ago}"\n---\nLast year\'s plan.')
        with machines.serve("a") as a:
            tool(a, OWNER, "memory_write", key="fresh", content="This year's plan.")
            eventually(
                lambda: (
                    machines.entry("owner", "fresh") is not None
                    and machines.entry("owner", "old") is not None
                ),
                "both notes in the portal",
            )
            memory = _memory_page(page, machines)
            page.select_option("#retention-namespace", "owner")
            page.fill("#retention-days", "7")
            with page.expect_navigation():
                page.click("#retention-form button[type=submit]")
            assert page.url == memory
            eventually(lambda: machines.entry("owner", "old") is None, "the sweeper removed it")
            eventually(lambda: not old.exists(), "A's file removed by the sync")
            listed = tool(a, OWNER, "memory_list")
        assert [n["key"] for n in listed["notes"]] == ["fresh"]
        assert (machines.entry("owner", "fresh") or {}).get("content") == "This year's plan."
        assert note_file(machines.a, "fresh").exists()
        # The put's version was older than the period too: gone; the removal's own version is
        # new, so the owner can still restore the text for one more period.
        assert _ops(machines, "old") == [("delete", "Last year's plan.")]
    finally:
        portal.stop()
