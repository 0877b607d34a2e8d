"""`memory: {portal: true}` (SPEC P7) against the real memory store API (P5) in this process,
on SQLite and PostgreSQL: the outbox arrives once, a resend after a crash is applied once,
conflicts keep the later edit current and the other as a version, the portal's changes (the
owner's edits and forgets) reach the files, and a caller's search sees only its namespaces.
(The same with real processes on two machines: test_memory_sync_machines.py.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.memory_helpers import ALICE, OWNER, memory_agent, use
from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings
from webagents.portal_link.client import PortalClient
from webagents.portal_link.memory_sync.sync import PortalSync
from webagents.skills.memory import MemorySkill

from .conftest import make_client
from .memory_helpers import Published, publish


class Portal:
    """The portal's app on the test's database, as the agent's sync reaches it."""

    def __init__(
        self, settings: PortalSettings, engine: Engine, db: Session, agent: Published
    ) -> None:
        self.settings, self.engine, self.db, self.agent = settings, engine, db, agent
        self.up = True

    def client(self) -> PortalClient:
        if not self.up:  # nothing listens there: the portal is down
            return PortalClient("http://127.0.0.1:9", self.agent.key, timeout=5)
        client = PortalClient("http://testserver", self.agent.key)
        client._http.close()
        client._http = make_client(self.settings, self.engine, self.db)
        client._http.headers["Authorization"] = f"Bearer {self.agent.key}"
        return client

    @property
    def store(self) -> MemoryStore:
        return MemoryStore.for_agent(self.db, self.agent.scope)

    def edit(self, namespace: str, key: str, content: str, at: str) -> None:
        """The owner's edit on the portal's pages (or another machine's)."""
        service.put(
            self.store,
            namespace=namespace,
            key=key,
            content=content,
            at=datetime.fromisoformat(at),
            by=service.by_owner("alice"),
        )
        self.db.commit()  # as a request of the owner's pages ends

    def forget(self, namespace: str, key: str) -> None:
        service.delete(self.store, namespace, key, by=service.by_owner("alice"))
        self.db.commit()  # as a request of the owner's pages ends

    def entries(self) -> dict[tuple[str, str], str]:
        return {
            (e.namespace, e.key): e.content
            for e in service.list_entries(self.store, None, limit=1000)
        }

    def versions_of(self, namespace: str, key: str) -> list[str]:
        """The entry's kept versions, oldest first (puts' contents)."""
        kept = service.versions(self.store, namespace, key)
        return [v.content for v in reversed(kept) if v.op == "put"]


@pytest.fixture
def portal(
    settings: PortalSettings,
    migrated_engine: Engine,
    db: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Portal]:
    agent = publish(db)
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", agent.key)
    monkeypatch.setattr(PortalSync, "start", lambda self: None)  # rounds are run by the test
    yield Portal(settings, migrated_engine, db, agent)


def synced(folder: Path, portal: Portal) -> tuple[MemorySkill, PortalSync]:
    _, skill = memory_agent(folder, portal=True)
    assert skill.sync is not None
    skill.sync.connect = portal.client
    return skill, skill.sync


async def test_p7_twenty_notes_written_offline_arrive_once(tmp_path: Path, portal: Portal) -> None:
    skill, sync = synced(tmp_path / "a", portal)
    portal.up = False
    for n in range(20):
        await use(skill, OWNER, "memory_write", key=f"note-{n}", content=f"Note {n}.")
    assert sync.sync_round() is False
    portal.up = True
    assert sync.sync_round() is True
    assert sync.sync_round() is True
    assert portal.entries() == {("owner", f"note-{n}"): f"Note {n}." for n in range(20)}
    assert [portal.versions_of("owner", f"note-{n}") for n in range(20)] == [
        [f"Note {n}."] for n in range(20)
    ]


async def test_p7_a_resend_after_a_crash_makes_no_second_version(
    tmp_path: Path, portal: Portal
) -> None:
    skill, sync = synced(tmp_path / "a", portal)
    await use(skill, OWNER, "memory_write", key="plan", content="v1")
    await use(skill, OWNER, "memory_write", key="plan", content="v2")
    files = tmp_path / "a" / ".webagents" / "portal-sync"
    kept = (files / "outbox.jsonl").read_bytes()
    assert sync.sync_round() is True
    (files / "state.json").unlink()  # the crash: pushed, but not yet marked pushed
    (files / "outbox.jsonl").write_bytes(kept)
    assert sync.sync_round() is True
    assert portal.versions_of("owner", "plan") == ["v1", "v2"]
    assert portal.entries() == {("owner", "plan"): "v2"}


@pytest.mark.parametrize("later", ["here", "portal"])
async def test_p7_an_edit_on_both_sides_keeps_the_later_and_the_other_as_a_version(
    tmp_path: Path, portal: Portal, later: str, caplog: pytest.LogCaptureFixture
) -> None:
    skill, sync = synced(tmp_path / "a", portal)
    await use(skill, OWNER, "memory_write", key="plan", content="the plan")
    assert sync.sync_round() is True
    portal.up = False
    await use(skill, OWNER, "memory_write", key="plan", content="edited here")
    at = "2000-01-01T00:00:00+00:00" if later == "here" else "2999-01-01T00:00:00+00:00"
    portal.edit("owner", "plan", "edited in the portal", at)
    portal.up = True
    with caplog.at_level(logging.WARNING, logger="webagents.memory"):
        assert sync.sync_round() is True
    winner, loser = ("edited here", "edited in the portal")[:: 1 if later == "here" else -1]
    assert portal.entries() == {("owner", "plan"): winner}
    versions = portal.versions_of("owner", "plan")
    assert versions[-1] == winner and loser in versions and versions[0] == "the plan"
    assert (await use(skill, OWNER, "memory_read", key="plan"))["content"] == winner
    kept, other = ("this machine's", "the portal's")[:: 1 if later == "here" else -1]
    assert [r.getMessage() for r in caplog.records if "conflict" in r.getMessage()] == [
        "memory: conflict on owner/plan (changed here and in the portal since the last sync): "
        f"kept {kept} version as current (the later one) and {other.replace('machine', 'machine')}"
        " as a version in the portal"
    ]
    count = len(versions)
    assert sync.sync_round() is True  # settled: nothing more
    assert len(portal.versions_of("owner", "plan")) == count


async def test_p7_the_owners_edits_and_forgets_in_the_portal_reach_the_files(
    tmp_path: Path, portal: Portal
) -> None:
    skill, sync = synced(tmp_path / "a", portal)
    await use(skill, OWNER, "memory_write", key="plan", content="the plan")
    await use(skill, OWNER, "memory_write", key="old", content="to be forgotten")
    assert sync.sync_round() is True
    portal.edit("owner", "plan", "the owner's edit", "2026-06-01T00:00:00+00:00")
    portal.forget("owner", "old")
    portal.edit(
        "caller:bob@example.com", "made", "bob's note, made elsewhere", "2026-06-01T00:00:00+00:00"
    )
    assert sync.sync_round() is True
    owner = tmp_path / "a" / ".webagents" / "memory" / "owner"
    assert sorted(p.name for p in owner.glob("*.md")) == ["plan.md"]
    read = await use(skill, OWNER, "memory_read", key="plan")
    assert (read["content"], read["updated"]) == ("the owner's edit", "2026-06-01T00:00:00+00:00")
    listed = await use(skill, OWNER, "memory_list", namespace="caller:bob@example.com")
    assert [n["key"] for n in listed["notes"]] == ["made"]
    assert portal.versions_of("owner", "plan") == ["the plan", "the owner's edit"]


async def test_p7_a_callers_search_asks_the_portal_for_its_own_namespaces_only(
    tmp_path: Path, portal: Portal
) -> None:
    skill, sync = synced(tmp_path / "a", portal)
    portal.edit(
        "caller:bob@example.com", "drink", "bob drinks oolong tea", "2026-01-01T00:00:00+00:00"
    )
    portal.edit(
        "caller:alice@example.com", "drink", "alice drinks green tea", "2026-01-01T00:00:00+00:00"
    )
    found: list[Any] = await use(skill, ALICE, "memory_search", query="tea")
    assert [(h["namespace"], h["key"], h.get("from")) for h in found if "key" in h] == [
        ("caller:alice@example.com", "drink", "portal")
    ]
    assert sync.sync_round() is True  # pulled: found here now, and bob's note in bob's folder
    found = await use(skill, ALICE, "memory_search", query="tea")
    assert [(h["namespace"], h["key"], h.get("from")) for h in found if "key" in h] == [
        ("caller:alice@example.com", "drink", None)
    ]
    assert "oolong" not in str(found)
    assert "oolong" not in str(await use(skill, ALICE, "memory_list"))
    bobs = await use(skill, OWNER, "memory_read", key="drink", namespace="caller:bob@example.com")
    assert bobs["content"] == "bob drinks oolong tea"
