"""`memory: {portal: true}` (SPEC M12, P7), the sync's own logic, against a stand-in of the
portal's memory store in this process (`memory_portal_double`): the outbox, exactly once in
effect after a crash, conflicts, what a pull may and may not write, and the rights of search.
The same behaviours against the real portal are tests/portal/test_memory_sync_*.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import write_agent
from tests.memory_helpers import ALICE, BOB, OWNER, memory_agent, use
from tests.memory_portal_double import KEY, MemoryDouble
from webagents.agent_file import load_agent
from webagents.errors import ConfigError
from webagents.home import agent_key_file
from webagents.portal_link.login import agent_key
from webagents.portal_link.memory_sync.files import SyncFiles, portal_link
from webagents.portal_link.memory_sync.sync import PortalSync
from webagents.rights import rights_of
from webagents.skills.memory import MemorySkill


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> MemoryDouble:
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", KEY)
    monkeypatch.setattr(PortalSync, "start", lambda self: None)  # rounds are run by the test
    return MemoryDouble()


def synced_agent(folder: Path, double: MemoryDouble, **settings: Any) -> MemorySkill:
    _, skill = memory_agent(folder, portal=True, **settings)
    assert skill.sync is not None
    skill.sync.connect = double.client
    return skill


def outbox(folder: Path) -> list[dict[str, Any]]:
    path = folder / ".webagents" / "portal-sync" / "outbox.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def synced_plan(tmp_path: Path, double: MemoryDouble) -> tuple[MemorySkill, PortalSync]:
    """An agent whose owner's note `plan` ("v1") is in the portal too: the base of a
    conflict."""
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    await use(skill, OWNER, "memory_write", key="plan", content="v1")
    assert skill.sync.sync_round() is True
    return skill, skill.sync


async def edited_offline(skill: MemorySkill, double: MemoryDouble, content: str) -> str:
    """`plan` edited here while the portal does not answer (the edit waits in the outbox);
    when the edit was written."""
    double.up = False
    await use(skill, OWNER, "memory_write", key="plan", content=content)
    return str((await use(skill, OWNER, "memory_read", key="plan"))["updated"])


def conflicts(sync: PortalSync) -> list[tuple[str, str, str]]:
    """The conflicts the sync recorded: (key, whose was kept, what became of the other)."""
    return [(c["key"], c["kept"], c["other"]) for c in sync.files.load().conflicts]


async def test_p7_writes_wait_in_a_private_outbox_offline_then_arrive_once(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    double.up = False
    for n in range(20):
        await use(skill, OWNER, "memory_write", key=f"note-{n}", content=f"Note {n}.")
    assert skill.sync.sync_round() is False
    waiting = outbox(tmp_path / "a")
    assert [(c["op"], c["namespace"], c["key"]) for c in waiting] == [
        ("put", "owner", f"note-{n}") for n in range(20)
    ]
    report = skill.report(rights_of(OWNER)).splitlines()
    assert report[-3:] == [
        "portal: http://127.0.0.1:8700 (synced entry by entry)",
        "last sync: not yet (the portal does not answer)",
        "waiting to be pushed: 20 changes",
    ]
    folder = tmp_path / "a" / ".webagents" / "portal-sync"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "outbox.jsonl").stat().st_mode) == 0o600

    double.up = True
    assert skill.sync.sync_round() is True
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", f"note-{n}"): f"Note {n}." for n in range(20)
    }
    assert [double.versions_of("owner", f"note-{n}") for n in range(20)] == [
        [f"Note {n}."] for n in range(20)
    ]
    assert outbox(tmp_path / "a") == []
    assert stat.S_IMODE((folder / "state.json").stat().st_mode) == 0o600
    assert skill.sync.sync_round() is True  # nothing is pushed again
    assert len(double.versions) == 20
    assert skill.report(rights_of(OWNER)).splitlines()[-1] == "waiting to be pushed: 0 changes"


async def test_p7_a_resend_after_a_crash_is_applied_once(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    await use(skill, OWNER, "memory_write", key="plan", content="v1")
    await use(skill, OWNER, "memory_write", key="plan", content="v2")
    await use(skill, OWNER, "memory_write", key="other", content="o1")
    state_file = tmp_path / "a" / ".webagents" / "portal-sync" / "state.json"
    outbox_file = tmp_path / "a" / ".webagents" / "portal-sync" / "outbox.jsonl"
    kept = outbox_file.read_bytes()
    assert skill.sync.sync_round() is True
    # The crash: everything was pushed, but neither the state nor the emptied outbox was
    # written (the state as it was before the round, the outbox as it was).
    state_file.unlink()
    outbox_file.write_bytes(kept)
    assert skill.sync.sync_round() is True
    assert double.versions_of("owner", "plan") == ["v1", "v2"]
    assert double.versions_of("owner", "other") == ["o1"]
    assert double.entries[("owner", "plan")]["content"] == "v2"
    assert outbox(tmp_path / "a") == []


async def test_p7_a_torn_outbox_line_from_a_crash_is_skipped_and_closed_off(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    outbox_file = tmp_path / "a" / ".webagents" / "portal-sync" / "outbox.jsonl"
    outbox_file.parent.mkdir(mode=0o700, parents=True)
    outbox_file.write_bytes(b'{"op": "put", "namespace": "owner", "key": "to')  # never acked
    await use(skill, OWNER, "memory_write", key="after", content="after the crash")
    assert skill.sync.sync_round() is True
    assert list(double.entries) == [("owner", "after")]


async def test_p7_pulled_changes_reach_the_files_and_the_index(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    for n in range(7):  # more than one page (the double answers 3 lines a page)
        double.edit(
            "owner",
            f"from-b-{n}",
            f"Written on machine B, number {n}.",
            f"2026-01-0{n + 1}T00:00:00+00:00",
        )
    double.edit("shared", "hours", "Opening hours are 9-5.", "2026-01-01T00:00:00+00:00")
    assert skill.sync.sync_round() is True
    files = sorted(p.name for p in (tmp_path / "a/.webagents/memory/owner").glob("*.md"))
    assert files == [f"from-b-{n}.md" for n in range(7)]
    read = await use(skill, OWNER, "memory_read", key="from-b-3")
    assert (read["content"], read["updated"]) == (
        "Written on machine B, number 3.",
        "2026-01-04T00:00:00+00:00",
    )
    found = await use(skill, ALICE, "memory_search", query="opening")
    assert [(h["namespace"], h["key"]) for h in found if "from" not in h] == [("shared", "hours")]
    # Nothing pulled is pushed back, and a second round pulls nothing new.
    assert skill.sync.sync_round() is True
    assert len(double.versions) == 8
    assert outbox(tmp_path / "a") == []
    # A forget in the portal removes the file.
    del double.entries[("owner", "from-b-0")]
    double._change("delete", {**double.versions[0]}, "2026-02-01T00:00:00+00:00")
    assert skill.sync.sync_round() is True
    assert not (tmp_path / "a/.webagents/memory/owner/from-b-0.md").exists()


async def test_p7_a_forget_here_is_pushed(tmp_path: Path, double: MemoryDouble) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    await use(skill, OWNER, "memory_write", key="gone", content="soon gone")
    assert skill.sync.sync_round() is True
    await use(skill, OWNER, "memory_forget", key="gone")
    assert skill.sync.sync_round() is True
    assert double.entries == {}
    assert [v["op"] for v in double.versions] == ["put", "delete"]


@pytest.mark.parametrize("later", ["here", "portal"])
async def test_p7_both_sides_edited_keeps_the_later_and_the_other_as_a_version(
    tmp_path: Path, double: MemoryDouble, later: str, caplog: pytest.LogCaptureFixture
) -> None:
    skill, sync = await synced_plan(tmp_path, double)
    here_at = await edited_offline(skill, double, "edited here")
    portal_at = "2000-01-01T00:00:00+00:00" if later == "here" else "2999-01-01T00:00:00+00:00"
    double.edit("owner", "plan", "edited in the portal", portal_at)
    double.up = True
    with caplog.at_level(logging.WARNING, logger="webagents.memory"):
        assert sync.sync_round() is True
    winner, loser = (
        ("edited here", "edited in the portal")
        if later == "here"
        else ("edited in the portal", "edited here")
    )
    assert double.entries[("owner", "plan")]["content"] == winner
    assert loser in double.versions_of("owner", "plan")
    assert double.versions_of("owner", "plan")[-1] == winner
    local = await use(skill, OWNER, "memory_read", key="plan")
    assert (local["content"], local["updated"]) == (
        (winner, here_at) if later == "here" else (winner, portal_at)
    )
    kept = "this machine's" if later == "here" else "the portal's"
    assert [r.getMessage() for r in caplog.records if "conflict" in r.getMessage()] == [
        f"memory: conflict on owner/plan (changed here and in the portal since the last sync): "
        f"kept {kept} version as current (the later one) and "
        f"{'the portal' if later == 'here' else 'this machine'}'s as a version in the portal"
    ]
    report = skill.report(rights_of(OWNER))
    assert "conflict on plan" in report
    # Settled: the next round changes nothing.
    count = len(double.versions)
    assert sync.sync_round() is True
    assert len(double.versions) == count


async def test_p7_a_pull_never_writes_over_a_file_that_cannot_be_read(
    tmp_path: Path, double: MemoryDouble, caplog: pytest.LogCaptureFixture
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    broken = tmp_path / "a/.webagents/memory/owner/plan.md"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_bytes(b"---\ndescription: [unclosed\n---\nhand written")
    double.edit("owner", "plan", "from the portal", "2026-01-01T00:00:00+00:00")
    with caplog.at_level(logging.WARNING, logger="webagents.memory"):
        assert skill.sync.sync_round() is True
    assert broken.read_bytes() == b"---\ndescription: [unclosed\n---\nhand written"
    assert any(
        "plan.md cannot be read" in r.getMessage() and "left as it is" in r.getMessage()
        for r in caplog.records
    )


async def test_p7_a_hand_edit_here_is_not_overwritten_by_a_pull(
    tmp_path: Path, double: MemoryDouble
) -> None:
    _, sync = await synced_plan(tmp_path, double)
    (tmp_path / "a/.webagents/memory/owner/plan.md").write_text("edited by hand")
    double.edit("owner", "plan", "edited in the portal", "2000-01-01T00:00:00+00:00")
    assert sync.sync_round() is True  # the hand edit goes to the outbox
    assert sync.sync_round() is True  # and is pushed: the later (the hand edit) wins
    assert double.entries[("owner", "plan")]["content"] == "edited by hand"
    assert double.versions_of("owner", "plan") == [
        "v1",
        "edited in the portal",
        "edited by hand",
    ]
    assert (tmp_path / "a/.webagents/memory/owner/plan.md").read_text() == "edited by hand"


async def test_p7_search_adds_the_portals_results_over_the_callers_namespaces_only(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    double.edit("caller:alice@example.com", "drink", "tea please", "2026-01-01T00:00:00+00:00")
    double.edit("caller:bob@example.com", "drink", "tea secretly", "2026-01-01T00:00:00+00:00")
    searched: list[list[str]] = []
    original = double.handle

    def spying(request: Any) -> Any:
        if request.url.params.get("action") == "search":
            searched.append(request.url.params.get_list("namespace"))
        return original(request)

    double.handle = spying  # type: ignore[method-assign]
    found = await use(skill, ALICE, "memory_search", query="tea")
    assert searched == [["caller:alice@example.com", "shared"]]
    assert found == [
        {
            "key": "drink",
            "namespace": "caller:alice@example.com",
            "description": "tea please",
            "updated": "2026-01-01T00:00:00+00:00",
            "snippet": "tea please",
            "from": "portal",
        }
    ]


async def test_p7_a_portal_that_answers_other_namespaces_is_not_believed(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    double.edit("caller:bob@example.com", "drink", "tea secretly", "2026-01-01T00:00:00+00:00")
    original = double.handle

    def everything(request: Any) -> Any:
        if request.url.params.get("action") == "search":
            import httpx

            return httpx.Response(200, json={"entries": list(double.entries.values())})
        return original(request)

    double.handle = everything  # type: ignore[method-assign]
    assert await use(skill, ALICE, "memory_search", query="tea") == []


async def test_p7_search_offline_says_the_portal_did_not_answer(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    await use(skill, OWNER, "memory_write", key="plan", content="tea time")
    double.up = False
    found = await use(skill, OWNER, "memory_search", query="tea")
    assert [h.get("from") for h in found] == [None, "portal"]
    assert found[1] == {
        "from": "portal",
        "unavailable": "the portal did not answer; these are this machine's results only",
    }


async def test_p7_bob_notes_are_pulled_into_bobs_folder_and_never_shown_to_alice(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    await use(skill, BOB, "memory_write", key="secret", content="bob's secret")
    assert skill.sync.sync_round() is True
    double.edit(
        "caller:bob@example.com", "secret2", "bob's second secret", "2026-01-01T00:00:00+00:00"
    )
    assert skill.sync.sync_round() is True
    assert (await use(skill, BOB, "memory_read", key="secret2"))["content"] == "bob's second secret"
    assert (await use(skill, ALICE, "memory_list"))["notes"] == []
    report = skill.report(rights_of(ALICE))
    assert "secret" not in report


def test_m12_portal_true_without_the_agents_key_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEBAGENTS_AGENT_TOKEN", raising=False)
    folder = write_agent(tmp_path / "a", "skills:\n  - memory: {portal: true}")
    with pytest.raises(ConfigError) as caught:
        load_agent(folder)
    assert str(caught.value) == (
        "memory: portal: true keeps notes in the portal's memory store, which needs the agent's "
        "platform key: publish the agent (webagents publish) or set WEBAGENTS_AGENT_TOKEN"
    )


def test_m12_a_kept_key_wins_over_the_variable_which_cannot_be_every_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon's agents share one environment: WEBAGENTS_AGENT_TOKEN there is at most one
    agent's key, so a key publish kept for the folder's agent is used first, as Connect does
    (login.agent_key); the variable serves a folder with no kept key."""
    agent_id = "0b6a3c1e-8f1d-4c55-9a57-3f1c2b9d4e11"
    folder = tmp_path / "a"
    (folder / ".webagents").mkdir(parents=True)
    link = {"link": {"agentId": agent_id, "portal": "http://127.0.0.1:9"}}
    (folder / ".webagents" / "config.json").write_text(json.dumps(link))
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", "another-agents-key")
    assert portal_link(folder, None).key == "another-agents-key"  # nothing kept: the variable
    kept = agent_key_file(agent_id)
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text("rok_this_agents_key\n")
    assert portal_link(folder, None).key == "rok_this_agents_key"
    assert agent_key(agent_id, None) == "rok_this_agents_key"  # Connect's rule is the same


async def test_p7_local_false_keeps_no_notes_in_the_agents_folder(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double, local=False)
    assert skill.sync is not None
    await use(skill, OWNER, "memory_write", key="plan", content="in the portal")
    assert skill.sync.sync_round() is True
    assert double.entries[("owner", "plan")]["content"] == "in the portal"
    assert not (tmp_path / "a" / ".webagents" / "memory").exists()
    home = Path(os.environ["WEBAGENTS_HOME"])
    assert skill.store.root.is_relative_to(home / "memory-cache")
    assert (await use(skill, OWNER, "memory_read", key="plan"))["content"] == "in the portal"


async def test_p7_notes_kept_before_portal_true_go_to_the_portal_at_the_first_sync(
    tmp_path: Path, double: MemoryDouble
) -> None:
    _, before = memory_agent(tmp_path / "a")
    await use(before, OWNER, "memory_write", key="old", content="kept before the portal")
    await use(before, ALICE, "memory_write", key="mine", content="alice's, before the portal")
    double.edit("owner", "both", "made in the portal first", "2000-01-01T00:00:00+00:00")
    (tmp_path / "a/.webagents/memory/owner/both.md").write_text("made here too, later")
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    assert skill.sync.sync_round() is True
    assert skill.sync.sync_round() is True
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", "old"): "kept before the portal",
        ("caller:alice@example.com", "mine"): "alice's, before the portal",
        ("owner", "both"): "made here too, later",
    }
    assert double.versions_of("owner", "both") == [
        "made in the portal first",
        "made here too, later",
    ]
    skill.close()
    again = synced_agent(tmp_path / "a", double)  # a later start seeds nothing again
    assert again.sync is not None
    assert again.sync.sync_round() is True
    assert len(double.versions) == 4


def refusing(double: MemoryDouble, status: int, message: str, word: str) -> None:
    """The double refuses every write whose content holds `word` with `status`."""
    handle = double.handle

    def answer(request: Any) -> Any:
        if request.method == "PUT" and word in json.loads(request.content)["content"]:
            double.requests.append(f"PUT refused {status}")
            return httpx.Response(status, json={"error": {"message": message}})
        return handle(request)

    double.handle = answer  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "the content holds a NUL character, which the store cannot keep"),
        (413, "the note's content is 1,100,005 bytes, over the store's 1,000,000"),
    ],
)
async def test_p7_a_line_the_portal_refuses_for_good_is_set_aside_and_the_rest_goes_on(
    tmp_path: Path,
    double: MemoryDouble,
    caplog: pytest.LogCaptureFixture,
    status: int,
    message: str,
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    refusing(double, status, message, "POISON")
    double.edit("owner", "news", "from the portal", "2026-01-01T00:00:00+00:00")
    await use(skill, ALICE, "memory_write", key="pref", content="tea POISON please")
    await use(skill, OWNER, "memory_write", key="plan", content="the owner's plan")
    with caplog.at_level(logging.WARNING, logger="webagents.memory"):
        assert skill.sync.sync_round() is True
        assert skill.sync.sync_round() is True  # not tried again
    assert double.requests.count(f"PUT refused {status}") == 1
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", "news"): "from the portal",
        ("owner", "plan"): "the owner's plan",
    }
    assert (await use(skill, OWNER, "memory_read", key="news"))["content"] == "from the portal"
    assert outbox(tmp_path / "a") == []
    folder = tmp_path / "a" / ".webagents" / "portal-sync"
    refused = [json.loads(line) for line in (folder / "refused.jsonl").read_text().splitlines()]
    assert [
        (r["line"]["namespace"], r["line"]["key"], r["line"]["content"], r["message"])
        for r in refused
    ] == [("caller:alice@example.com", "pref", "tea POISON please", message)]
    assert stat.S_IMODE((folder / "refused.jsonl").stat().st_mode) == 0o600
    said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert said == [
        f"memory: the portal refused the write of caller:alice@example.com/pref for good ({status} "
        f"{message}): it is set aside in {folder / 'refused.jsonl'} and the changes after it "
        "go on; the note here is left as it is"
    ]
    at = refused[0]["at"]
    assert skill.report(rights_of(ALICE)).splitlines()[-1] == (
        f"refused by the portal, not synced: pref ({at}): {message}"
    )
    assert "refused" not in skill.report(rights_of(BOB))  # another caller's is not shown


async def test_p7_a_line_refused_for_now_waits_and_keeps_its_order(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    answering = double.handle
    refusing(double, 429, "too many requests: try again in a minute", "first")
    await use(skill, OWNER, "memory_write", key="plan", content="the first plan")
    await use(skill, OWNER, "memory_write", key="later", content="a later note")
    assert skill.sync.sync_round() is False
    assert skill.sync.sync_round() is False
    assert double.entries == {}
    assert [(c["key"], c["content"]) for c in outbox(tmp_path / "a")] == [
        ("plan", "the first plan"),
        ("later", "a later note"),
    ]
    assert not (tmp_path / "a/.webagents/portal-sync/refused.jsonl").exists()
    double.handle = answering  # type: ignore[method-assign]  # the portal takes it again
    assert skill.sync.sync_round() is True
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", "plan"): "the first plan",
        ("owner", "later"): "a later note",
    }
    assert [v["key"] for v in double.versions] == ["plan", "later"]


@pytest.mark.parametrize("portal_change", ["edit", "forget"])
async def test_p7_a_tool_write_during_a_pull_is_never_overwritten_by_an_older_portal_change(
    tmp_path: Path, double: MemoryDouble, portal_change: str
) -> None:
    skill, sync = await synced_plan(tmp_path, double)
    older = "2026-01-01T00:00:00+00:00"
    if portal_change == "edit":
        double.edit("owner", "plan", "P (the portal's, older)", older)
    else:
        double._change("delete", double.entries.pop(("owner", "plan")), older)
    read = sync.puller._local
    raced: list[Any] = []

    def racing(namespace: str, key: str) -> tuple[bool, str | None]:
        found = read(namespace, key)
        if not raced:  # the model's memory_write lands right after the pull read the file
            thread = threading.Thread(
                target=lambda: raced.append(
                    asyncio.run(use(skill, OWNER, "memory_write", key="plan", content="T"))
                )
            )
            thread.start()
            thread.join()
        return found

    sync.puller._local = racing  # type: ignore[method-assign]
    assert await asyncio.to_thread(sync.sync_round) is True
    assert raced[0]["saved"] == "plan"  # acknowledged to the model
    note = tmp_path / "a/.webagents/memory/owner/plan.md"
    assert (await use(skill, OWNER, "memory_read", key="plan"))["content"] == "T"
    assert await asyncio.to_thread(sync.sync_round) is True
    assert double.entries[("owner", "plan")]["content"] == "T"
    assert (await use(skill, OWNER, "memory_read", key="plan"))["content"] == "T"
    assert note.exists()
    other = (
        "the portal's kept as a version in the portal"
        if portal_change == "edit"
        else "forgotten in the portal"
    )
    assert conflicts(sync) == [("plan", "this machine", other)]
    count = len(double.versions)
    assert await asyncio.to_thread(sync.sync_round) is True  # settled
    assert len(double.versions) == count


@pytest.mark.parametrize("later", ["here", "portal"])
async def test_p7_two_edits_waiting_and_a_portal_edit_between_keep_the_later_current(
    tmp_path: Path, double: MemoryDouble, later: str
) -> None:
    skill, sync = await synced_plan(tmp_path, double)
    a_at = datetime.fromisoformat(await edited_offline(skill, double, "A"))
    between = a_at + timedelta(microseconds=1)
    portal_at = between.isoformat() if later == "here" else "2999-01-01T00:00:00+00:00"
    double.edit("owner", "plan", "P", portal_at)
    for _ in range(1000):  # B is written after the portal's edit (bounded, in microseconds)
        if datetime.now(UTC) > between:
            break
    await use(skill, OWNER, "memory_write", key="plan", content="B")
    double.up = True
    for _ in range(3):
        assert sync.sync_round() is True
    winner = "B" if later == "here" else "P"
    assert double.entries[("owner", "plan")]["content"] == winner
    assert (await use(skill, OWNER, "memory_read", key="plan"))["content"] == winner
    assert double.versions_of("owner", "plan") == (
        ["v1", "P", "A", "P", "B"] if later == "here" else ["v1", "P", "A", "P", "B", "P"]
    )
    assert conflicts(sync) == [
        ("plan", "this machine", "the portal's kept as a version in the portal")
        if later == "here"
        else ("plan", "the portal", "this machine's kept as a version in the portal")
    ]


class _Crash(Exception):
    """A crash of the sync, simulated at one point of a round."""


@pytest.mark.parametrize("where", ["mid-rename", "before-the-state-is-saved"])
async def test_p7_a_first_pull_cut_short_by_a_crash_resumes_without_loss_or_duplicates(
    tmp_path: Path, double: MemoryDouble, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    double.page = 4
    for n in range(10):
        namespace = ("owner", "shared", "caller:alice@example.com")[n % 3]
        double.edit(namespace, f"note-{n}", f"Note {n}.", f"2026-01-01T00:00:0{n}+00:00")
    sync_folder = tmp_path / "a/.webagents/portal-sync"
    calls = {"replace": 0}
    real_replace, real_save = os.replace, SyncFiles.save

    def replace(*args: Any, **kwargs: Any) -> None:
        calls["replace"] += str(args[1]).endswith(".md")  # a note's rename
        if where == "mid-rename" and calls["replace"] == 6:  # in the second page's batch
            raise _Crash("the crash")
        real_replace(*args, **kwargs)

    def save(self: SyncFiles, state: Any) -> None:
        if where == "before-the-state-is-saved" and state.cursors:
            raise _Crash("the crash")  # the first page's notes are written, its cursor not
        real_save(self, state)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(SyncFiles, "save", save)
    assert skill.sync.sync_round() is False
    written = sorted(p.name for p in (tmp_path / "a/.webagents/memory").rglob("*.md"))
    assert len(written) == (5 if where == "mid-rename" else 4)
    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(SyncFiles, "save", real_save)

    assert skill.sync.sync_round() is True
    memory = tmp_path / "a/.webagents/memory"
    found = {
        (p.parent.name, p.name): skill.store.load("x", p.name[:-3], p)[0].content
        for p in memory.rglob("*.md")
    }
    assert sorted(found.values()) == sorted(f"Note {n}." for n in range(10))
    assert [p.name for p in memory.rglob("*.tmp")] == []
    assert outbox(tmp_path / "a") == []  # nothing pulled was taken for a change made here
    assert len(double.versions) == 10  # and nothing was pushed back
    state = json.loads((sync_folder / "state.json").read_text())
    assert len(state["bases"]) == 10 and state["conflicts"] == []
    for path in memory.rglob("*.md"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert skill.sync.sync_round() is True
    assert len(double.versions) == 10


async def test_p7_a_key_changed_twice_in_one_pull_page_ends_as_the_later_change(
    tmp_path: Path, double: MemoryDouble
) -> None:
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    double.page = 100
    double.edit("owner", "plan", "first", "2026-01-01T00:00:00+00:00")
    double.edit("owner", "other", "kept", "2026-01-01T00:00:00+00:00")
    double.edit("owner", "plan", "second", "2026-01-02T00:00:00+00:00")
    double.edit("owner", "gone", "soon forgotten", "2026-01-02T00:00:00+00:00")
    del double.entries[("owner", "gone")]
    double._change("delete", {**double.versions[-1]}, "2026-01-03T00:00:00+00:00")
    assert skill.sync.sync_round() is True
    owner = tmp_path / "a/.webagents/memory/owner"
    assert sorted(p.name for p in owner.glob("*.md")) == ["other.md", "plan.md"]
    read = await use(skill, OWNER, "memory_read", key="plan")
    assert (read["content"], read["updated"]) == ("second", "2026-01-02T00:00:00+00:00")
    assert outbox(tmp_path / "a") == []


async def test_p5_an_agent_over_its_portal_quota_frees_room_with_memory_forget(
    tmp_path: Path, double: MemoryDouble
) -> None:
    """The quota's 429 tells the agent to forget notes (memory_forget): the forget must reach
    the portal although the write refused for now waits before it in the outbox, or the agent
    is wedged (the write waits for room that only the forget behind it can make)."""
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    answering = double.handle
    full = "this agent keeps 1 note in the portal, the most it may (1); nothing was stored"

    def one_note_at_most(request: Any) -> Any:
        if request.method == "PUT" and double.entries:
            body = json.loads(request.content)
            if (body["namespace"], body["key"]) not in double.entries:
                double.requests.append("PUT refused 429")
                error = {"message": full, "code": "agent_entries_quota"}
                return httpx.Response(429, json={"error": error})
        return answering(request)

    double.handle = one_note_at_most  # type: ignore[method-assign]
    await use(skill, OWNER, "memory_write", key="old", content="no longer needed")
    assert skill.sync.sync_round() is True
    await use(skill, OWNER, "memory_write", key="new", content="the new plan")
    assert skill.sync.sync_round() is False  # refused for now: it waits, in order
    await use(skill, OWNER, "memory_forget", key="old")
    skill.sync.sync_round()  # the forget goes ahead of the write that waits for room
    assert skill.sync.sync_round() is True
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", "new"): "the new plan"
    }
    assert [(v["key"], v["op"]) for v in double.versions] == [
        ("old", "put"),
        ("old", "delete"),
        ("new", "put"),
    ]
    assert outbox(tmp_path / "a") == []
    assert skill.sync.last_error is None


def _refuse_new_until_room(double: MemoryDouble) -> list[bool]:
    """The double refuses a PUT of the note "new" with the quota's 429 while the returned
    flag is set; setting it to False makes room."""
    answering = double.handle
    refused_new = [True]

    def quota_then_room(request: Any) -> Any:
        if request.method == "PUT" and refused_new[0]:
            if json.loads(request.content)["key"] == "new":
                error = {"message": "full", "code": "agent_entries_quota"}
                return httpx.Response(429, json={"error": error})
        return answering(request)

    double.handle = quota_then_room  # type: ignore[method-assign]
    return refused_new


async def test_p5_a_forget_pushed_ahead_never_forgets_a_note_made_again_elsewhere(
    tmp_path: Path, double: MemoryDouble
) -> None:
    """A forget pushed ahead of a write waiting for room is sent again in its turn: then
    only if the note is still absent, never over the same key written anew by another
    machine meanwhile."""
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    refused_new = _refuse_new_until_room(double)
    await use(skill, OWNER, "memory_write", key="old", content="no longer needed")
    assert skill.sync.sync_round() is True
    await use(skill, OWNER, "memory_write", key="new", content="the new plan")
    await use(skill, OWNER, "memory_forget", key="old")
    assert skill.sync.sync_round() is False  # the forget went ahead; the write still waits
    assert ("owner", "old") not in double.entries
    double.edit("owner", "old", "written again on another machine", "2026-06-01T00:00:00+00:00")
    refused_new[0] = False
    assert skill.sync.sync_round() is True
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", "old"): "written again on another machine",
        ("owner", "new"): "the new plan",
    }


async def test_p5_a_forget_pushed_ahead_that_loses_to_the_portals_edit_is_said_once(
    tmp_path: Path, double: MemoryDouble
) -> None:
    """Edited in the portal since this machine saw it, a note forgotten here keeps the
    portal's edit (an edit beats a forget) whether its forget went ahead of a waiting write
    or not: the conflict is recorded once, and the forget's own turn sends nothing."""
    skill = synced_agent(tmp_path / "a", double)
    assert skill.sync is not None
    refused_new = _refuse_new_until_room(double)
    await use(skill, OWNER, "memory_write", key="old", content="v1")
    assert skill.sync.sync_round() is True
    double.edit("owner", "old", "edited in the portal", "2026-06-01T00:00:00+00:00")
    await use(skill, OWNER, "memory_write", key="new", content="the new plan")
    await use(skill, OWNER, "memory_forget", key="old")
    assert skill.sync.sync_round() is False
    assert skill.sync.sync_round() is False  # the forget is not tried again
    refused_new[0] = False
    deletes_before = double.requests.count("DELETE")
    assert skill.sync.sync_round() is True
    assert double.requests.count("DELETE") == deletes_before  # its turn sent nothing
    assert {k: e["content"] for k, e in double.entries.items()} == {
        ("owner", "old"): "edited in the portal",
        ("owner", "new"): "the new plan",
    }
    assert conflicts(skill.sync) == [("old", "the portal", "the forget here was not applied")]
    assert (await use(skill, OWNER, "memory_read", key="old"))["content"] == (
        "edited in the portal"
    )
