"""M7, M6: the memory skill never writes through a link. A caller's folder, a lock file, a
note or the callers' folder made a symbolic link is refused with a tool error that says so,
and the target is left as it was; a conversation's block is never kept through one either."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from webagents.context import AgentInfo, Context
from webagents.errors import ToolError
from webagents.skills.memory import MemorySkill

from .memory_helpers import ALICE, BOB, memory_agent, seed, use

REFUSED = (
    "the note {key!r} was not changed: where it is kept is a link on the agent's machine, "
    "which notes are never written through (the agent's owner is told)"
)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


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
