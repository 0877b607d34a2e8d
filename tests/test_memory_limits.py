"""The memory skill's limits on what one caller may keep (M7's namespaces): how many notes
and bytes each caller (and the owner, when set) keeps, counted across processes, how many
channel senders' and JWT callers' namespaces there may be, and the settings that set them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from webagents import Caller, load_agent
from webagents.errors import AgentFileError, ToolError
from webagents.newcomers import KINDS

from .caller_helpers import NEWCOMERS
from .conftest import write_agent
from .memory_helpers import ALICE, BOB, OWNER, memory_agent, use


def _full_notes(limit: int) -> str:
    return (
        f"no room for a new note: this agent keeps at most {limit} notes (summaries included) "
        "in a caller's memory; forget one (memory_forget) or replace one by writing to its key"
    )


async def test_memory_limits_a_caller_keeps_at_most_caller_notes(tmp_path: Path) -> None:
    _, skill = memory_agent(tmp_path / "keeper", caller_notes=2)
    for key in ("one", "two"):
        await use(skill, ALICE, "memory_write", key=key, content=key)
    with pytest.raises(ToolError) as refused:
        await use(skill, ALICE, "memory_write", key="three", content="three")
    assert str(refused.value) == _full_notes(2)
    assert not (skill.store.folder(ALICE.namespace) / "three.md").exists()
    # Replacing one is not a new note; forgetting one makes room.
    assert (await use(skill, ALICE, "memory_write", key="two", content="2"))["saved"] == "two"
    await use(skill, ALICE, "memory_forget", key="one")
    assert (await use(skill, ALICE, "memory_write", key="three", content="3"))["saved"] == "three"
    # Each caller has its own count; the owner has none by default.
    await use(skill, BOB, "memory_write", key="one", content="bob's")
    for n in range(5):
        await use(skill, OWNER, "memory_write", key=f"o{n}", content="owner's")
        await use(skill, OWNER, "memory_write", key=f"s{n}", content="all", namespace="shared")
    assert len((await use(skill, OWNER, "memory_list"))["notes"]) == 13


async def test_memory_limits_count_what_other_processes_wrote_and_forgot(
    tmp_path: Path,
) -> None:
    _, first = memory_agent(tmp_path / "keeper", caller_notes=2)
    _, second = memory_agent(tmp_path / "keeper", caller_notes=2)  # another process
    await use(first, ALICE, "memory_write", key="one", content="1")
    await use(second, ALICE, "memory_write", key="two", content="2")
    with pytest.raises(ToolError, match="at most 2 notes"):
        await use(first, ALICE, "memory_write", key="three", content="3")
    await use(second, ALICE, "memory_forget", key="one")
    assert (await use(first, ALICE, "memory_write", key="three", content="3"))["saved"] == "three"
    with pytest.raises(ToolError, match="at most 2 notes"):
        await use(first, ALICE, "memory_write", key="four", content="4")


async def test_memory_limits_a_caller_keeps_at_most_caller_note_bytes(tmp_path: Path) -> None:
    _, skill = memory_agent(tmp_path / "keeper", caller_note_bytes=400)
    await use(skill, ALICE, "memory_write", key="big", content="x" * 250)
    folder = skill.store.folder(ALICE.namespace)
    with pytest.raises(ToolError) as refused:
        await use(skill, ALICE, "memory_write", key="more", content="y" * 200)
    size = (folder / "big.md").stat().st_size
    made = size + (size - 250 + 200)  # the same front matter, 200 bytes of content
    assert str(refused.value) == (
        f"no room: this agent keeps at most 400 bytes of notes in a caller's memory, and "
        f"this write would make {made}; shorten or forget notes first"
    )
    assert sorted(p.name for p in folder.glob("*.md")) == ["big.md"]
    # A write that keeps less always goes through, even past a limit lowered since.
    assert (await use(skill, ALICE, "memory_write", key="big", content="x"))["saved"] == "big"
    assert (await use(skill, ALICE, "memory_write", key="more", content="y" * 200))["saved"]


async def test_memory_limits_the_owner_is_capped_only_when_set(tmp_path: Path) -> None:
    _, skill = memory_agent(tmp_path / "keeper", owner_notes=1)
    await use(skill, OWNER, "memory_write", key="one", content="1")
    with pytest.raises(ToolError) as refused:
        await use(skill, OWNER, "memory_write", key="two", content="2")
    assert str(refused.value) == _full_notes(1).replace("a caller's", "the owner's")
    # shared has a count of its own
    assert (await use(skill, OWNER, "memory_write", key="s", content="s", namespace="shared"))[
        "saved"
    ] == "s"


@pytest.mark.parametrize(("setting", "who", "newcomer"), NEWCOMERS)
async def test_memory_limits_channel_senders_and_jwt_callers_namespaces_are_capped(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    setting: str,
    who: str,
    newcomer: Callable[[int], Caller],
) -> None:
    """A bridge names its senders and an issuer its callers (one with open sign-up mints them
    without end, each with its own limits): past the cap, a new one's first write is refused.
    API keys' callers and the other kind are not counted; those that have notes go on."""
    caps = {"channel_senders": 1, "jwt_callers": 1, setting: 2}
    _, skill = memory_agent(tmp_path / "keeper", **caps)
    callers = [newcomer(n) for n in range(4)]
    for caller in callers[:2]:
        await use(skill, caller, "memory_write", key="hi", content="hello")
    await use(skill, ALICE, "memory_write", key="hi", content="verified callers are not counted")
    for other in NEWCOMERS:
        if other[0] != setting:
            await use(skill, other[2](9), "memory_write", key="hi", content="another kind")
    for caller in callers[2:]:
        with pytest.raises(ToolError) as refused:
            await use(skill, caller, "memory_write", key="hi", content="hello")
        assert str(refused.value) == (
            f"this agent keeps notes for at most 2 {who}, and has them all; it cannot keep "
            "notes for you (ask the agent's owner)"
        )
        assert not skill.store.folder(caller.namespace or "").exists()
    # One that has notes keeps writing; the refusals are logged for the owner once.
    assert (await use(skill, callers[0], "memory_write", key="more", content="x"))["saved"]
    assert [r.getMessage() for r in caplog.records if r.name == "webagents.memory"] == [
        f"memory: refusing the notes of new {who}: 2 {who} have notes, the most this agent "
        f"keeps (the memory skill's {setting} setting)"
    ]
    assert {kind.setting: skill.store.namespaces_of(kind) for kind in KINDS} == {
        "channel_senders": 1,
        "jwt_callers": 1,
        setting: 2,
    }


def test_memory_limits_settings_are_checked(tmp_path: Path) -> None:
    agent = load_agent(
        write_agent(
            tmp_path / "a",
            "skills:\n  - memory: {caller_notes: 5, caller_note_bytes: null, owner_notes: 9}",
        )
    )
    settings = agent.skill("memory").settings  # type: ignore[union-attr]
    assert (settings.caller_notes, settings.caller_note_bytes, settings.owner_notes) == (5, None, 9)
    with pytest.raises(AgentFileError) as refused:
        load_agent(write_agent(tmp_path / "b", "skills:\n  - memory: {caller_notes: 0}"))
    assert refused.value.reason == (
        "skill 'memory': setting 'caller_notes': Input should be greater than or equal to 1"
    )


def test_memory_limits_jwt_callers_setting_is_checked(tmp_path: Path) -> None:
    settings = load_agent(write_agent(tmp_path / "a", "skills:\n  - memory")).skill("memory")
    assert settings is not None and settings.settings.jwt_callers == 10_000
    with pytest.raises(AgentFileError) as refused:
        load_agent(write_agent(tmp_path / "b", "skills:\n  - memory: {jwt_callers: 0}"))
    assert refused.value.reason == (
        "skill 'memory': setting 'jwt_callers': Input should be greater than or equal to 1"
    )
