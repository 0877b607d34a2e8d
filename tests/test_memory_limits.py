"""Issue 11, what the memory skill stores: no write through a link (M7), lone surrogates in
tool arguments refused (M4), and the limits of what one caller may keep."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from webagents import Agent, Caller, load_agent
from webagents.context import AgentInfo, Context
from webagents.errors import AgentFileError, ToolError
from webagents.skills.memory import MemorySkill
from webagents.skills.newcomers import KINDS
from webagents.testing import ScriptedModel, call

from .conftest import write_agent
from .memory_helpers import ALICE, BOB, OWNER, memory_agent, seed, use

REFUSED = (
    "the note {key!r} was not changed: where it is kept is a link on the agent's machine, "
    "which notes are never written through (the agent's owner is told)"
)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# -- symbolic links on the write paths (M7) -------------------------------------------------------


def _link_alice_to_owner(skill: MemorySkill) -> tuple[Path, Path]:
    """Alice's folder made a link to the owner's: (owner's folder, alice's)."""
    owner = skill.store.folder("owner")
    alice = skill.store.folder(ALICE.namespace)
    for name in os.listdir(alice):
        os.unlink(alice / name)
    alice.rmdir()
    alice.symlink_to(owner)
    return owner, alice


async def test_m7_a_caller_folder_that_links_to_owner_is_never_written_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, skill = memory_agent(tmp_path / "keeper")
    await seed(skill)
    owner, alice = _link_alice_to_owner(skill)
    before = _files(owner)

    with pytest.raises(ToolError) as written:
        await use(skill, ALICE, "memory_write", key="mine", content="Alice's plan")
    assert str(written.value) == REFUSED.format(key="mine")
    with pytest.raises(ToolError) as forgotten:
        await use(skill, ALICE, "memory_forget", key="owner-plan")
    assert str(forgotten.value) == REFUSED.format(key="owner-plan")

    assert _files(owner) == before  # no note of alice's there, the owner's plan still there
    refusals = [r for r in caplog.records if r.name == "webagents.memory"]
    assert [r.levelno for r in refusals] == [logging.ERROR, logging.ERROR]
    assert all(str(alice) in r.getMessage() for r in refusals)
    # Bob's folder is a real one: his notes are kept as before.
    assert (await use(skill, BOB, "memory_write", key="b", content="x"))["saved"] == "b"


async def test_m7_a_lock_file_that_is_a_link_leaves_its_target_untouched(
    tmp_path: Path,
) -> None:
    _, skill = memory_agent(tmp_path / "keeper")
    await use(skill, ALICE, "memory_write", key="plan", content="Lisbon")
    alice = skill.store.folder(ALICE.namespace)
    target = tmp_path / "precious.txt"
    target.write_bytes(b"a file the agent must never write\n")
    (alice / ".lock").unlink()
    (alice / ".lock").symlink_to(target)

    with pytest.raises(ToolError) as refused:
        await use(skill, ALICE, "memory_write", key="plan", content="Porto")
    assert str(refused.value) == REFUSED.format(key="plan")
    assert target.read_bytes() == b"a file the agent must never write\n"
    assert (await use(skill, ALICE, "memory_read", key="plan"))["content"] == "Lisbon"

    (alice / ".lock").unlink()  # a hard link to it is refused too: it is written in place
    os.link(target, alice / ".lock")
    with pytest.raises(ToolError):
        await use(skill, ALICE, "memory_write", key="plan", content="Porto")
    assert target.read_bytes() == b"a file the agent must never write\n"


async def test_m7_a_note_that_is_a_link_is_refused_as_a_link(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Writing or forgetting a note whose file is a link: the documented "was not changed:
    ... a link" tool error and a log line naming the path, not "a file that cannot be read";
    the link and the note it points at are left as they are."""
    _, skill = memory_agent(tmp_path / "keeper")
    await seed(skill)
    alice = skill.store.folder(ALICE.namespace)
    bob = skill.store.folder(BOB.namespace)
    (alice / "evil.md").symlink_to(bob / "bob-secret.md")
    before = _files(bob)
    caplog.clear()
    for tool, arguments in (("memory_write", {"content": "mine"}), ("memory_forget", {})):
        with pytest.raises(ToolError) as refused:
            await use(skill, ALICE, tool, key="evil", **arguments)
        assert str(refused.value) == REFUSED.format(key="evil")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            f"memory: refused to write through a link: {alice / 'evil.md'} is a symbolic link "
            "or not a plain file; nothing is written through it (replace it with a real folder "
            "or file, or remove it)",
        )
    ] * 2
    assert _files(bob) == before
    assert (alice / "evil.md").is_symlink()


async def test_m7_the_callers_folder_itself_linked_elsewhere_is_refused(
    tmp_path: Path,
) -> None:
    _, skill = memory_agent(tmp_path / "keeper")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    skill.store.root.mkdir(parents=True, exist_ok=True)
    (skill.store.root / "callers").symlink_to(elsewhere)
    with pytest.raises(ToolError) as refused:
        await use(skill, ALICE, "memory_write", key="plan", content="Lisbon")
    assert str(refused.value) == REFUSED.format(key="plan")
    assert list(elsewhere.iterdir()) == []


async def test_m6_a_conversation_block_is_never_kept_through_a_linked_folder(
    tmp_path: Path,
) -> None:
    _, skill = memory_agent(tmp_path / "keeper")
    await seed(skill)
    owner, _ = _link_alice_to_owner(skill)
    ctx = Context(agent=AgentInfo("keeper", tmp_path), caller=ALICE, conversation_id="chat-1")
    block = await skill.prompt(ctx)
    assert block is not None
    assert not (owner / ".sessions").exists()


# -- lone surrogates in tool arguments (M4) -------------------------------------------------------


@pytest.mark.parametrize("argument", ["key", "content", "description"])
async def test_m4_a_lone_surrogate_in_a_memory_tool_argument_is_a_tool_error(
    tmp_path: Path, argument: str
) -> None:
    arguments = {"key": "plan", "content": "Lisbon", "description": "where"}
    raw = json.dumps(arguments).replace(f'"{arguments[argument]}"', '"half \\ud800 of a pair"')
    model = ScriptedModel([call("memory_write", raw), "noted"])
    skill = MemorySkill()
    agent = Agent("keeper", "Keep notes.", skills=[skill], model=model, directory=tmp_path)
    conversation = await agent.start(ALICE)
    result = await conversation.send("remember this")
    assert result.output == "noted"
    assert result.messages[1] == {
        "role": "tool",
        "tool_call_id": result.messages[0]["tool_calls"][0]["id"],
        "content": f"Error: invalid arguments: {argument}: the text holds a lone surrogate (a "
        "\\ud800 to \\udfff escape without its pair), which is not Unicode; send it without one",
    }
    assert not skill.store.folder(ALICE.namespace).exists()


async def test_m4_a_surrogate_pair_in_a_memory_tool_argument_is_kept(tmp_path: Path) -> None:
    raw = '{"key": "plan", "content": "a smile \\ud83d\\ude00", "description": "\\ud83d\\ude00"}'
    model = ScriptedModel([call("memory_write", raw), "noted"])
    skill = MemorySkill()
    agent = Agent("keeper", "Keep notes.", skills=[skill], model=model, directory=tmp_path)
    result = await (await agent.start(ALICE)).send("remember this")
    assert json.loads(result.messages[1]["content"])["saved"] == "plan"
    assert (await use(skill, ALICE, "memory_read", key="plan"))["content"] == "a smile 😀"


# -- limits (quotas) ------------------------------------------------------------------------------


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


NEWCOMERS = [
    ("channel_senders", "channel senders", lambda n: Caller.channel("telegram", str(n))),
    (
        "jwt_callers",
        "callers verified by a JWT issuer",
        lambda n: Caller.verified(f"user{n}@example.com", issuer="https://id.example.com"),
    ),
]


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
