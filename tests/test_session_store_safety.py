"""S7, where the session skill cannot keep a conversation safely: nothing is read or written
through a symbolic or hard link (a folder, a lock, a journal or a snapshot), a caller's folder is
named by its marker only when the marker is its own, and a full disk answers 507 over HTTP."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import pytest

from webagents.sessions import SessionLinkError, read_session
from webagents.sessions.store import caller_hash
from webagents.skills.session import SessionSkill

from .session_helpers import (
    ALICE,
    BOB,
    plain_files,
    post_turn,
    served_client,
    session_agent,
    sessions_root,
)


async def test_s7_a_caller_folder_linked_to_another_callers_is_refused(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    agent = session_agent(folder)
    await (await agent.start(caller=BOB, conversation_id="plan")).send("bob's secret plan")
    await (await agent.start(caller=ALICE, conversation_id="mine")).send("alice's")
    bob = sessions_root(folder) / "callers" / caller_hash(BOB.namespace or "")
    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    shutil.rmtree(alice)
    alice.symlink_to(bob)
    before = plain_files(bob)

    for conversation in ("plan", "new"):  # reading bob's, or adding one to his folder
        with pytest.raises(SessionLinkError) as refused:
            await (await agent.start(caller=ALICE, conversation_id=conversation)).send("mine now")
        assert str(refused.value) == (
            f"{alice} is a symbolic link or not a folder; nothing is written through it "
            "(replace it with a real folder or file, or remove it); the conversations there "
            "are neither read nor kept"
        )
    assert plain_files(bob) == before
    assert agent.skill("session").store.recent(ALICE.namespace or "") == []  # type: ignore[union-attr]


async def test_s7_a_lock_file_that_is_a_link_leaves_its_target_untouched(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    agent = session_agent(folder)
    await (await agent.start(caller=ALICE, conversation_id="plan")).send("hi")
    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    target = tmp_path / "precious.txt"
    target.write_bytes(b"never written by the agent\n")
    before = target.stat()
    (alice / ".lock").unlink()
    (alice / ".lock").symlink_to(target)
    conversation = await agent.start(caller=ALICE, conversation_id="plan")
    with pytest.raises(SessionLinkError, match=r"\.lock is a symbolic link or not a plain file"):
        await conversation.send("again")
    assert target.read_bytes() == b"never written by the agent\n"
    assert target.stat().st_mtime_ns == before.st_mtime_ns


def test_s7_a_full_disk_while_keeping_a_session_answers_507(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with served_client(session_agent(tmp_path / "helper")) as client:
        monkeypatch.setattr(os, "fsync", full_disk)
        refused = post_turn(client, "plan")
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert (refused.status_code, refused.json()) == (
            507,
            {
                "error": {
                    "message": "the agent's disk is full, so the conversation was not kept; "
                    "try again later",
                    "type": "server_error",
                    "param": None,
                    "code": "insufficient_storage",
                }
            },
        )
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert [r.getMessage() for r in errors] == [
            "the disk is full: [Errno 28] No space left on device"
        ]
        assert post_turn(client, "plan").status_code == 200  # and kept once there is room


def test_s7_a_linked_caller_folder_answers_500_and_the_owner_is_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "helper"
    callers = sessions_root(folder) / "callers"
    callers.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (callers / caller_hash(ALICE.namespace or "")).symlink_to(elsewhere)
    with served_client(session_agent(folder)) as client:
        refused = post_turn(client, "plan")
    assert (refused.status_code, refused.json()["error"]["code"]) == (500, "session_unsafe")
    assert refused.json()["error"]["message"] == (
        "this caller's kept conversations cannot be read or kept safely here (the agent's owner "
        "is told); send no metadata.session_id to be answered without keeping it"
    )
    assert list(elsewhere.iterdir()) == []
    assert any(str(callers) in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


async def test_s7_a_caller_folder_names_its_caller_by_its_marker(
    tmp_path: Path,
) -> None:
    """The owner's tools name a caller's folder by its marker (so `webagents sessions` shows
    whose it is without the memory skill), and a marker naming another caller is not believed."""
    folder = tmp_path / "helper"
    agent = session_agent(folder)
    await (await agent.start(caller=ALICE, conversation_id="mine")).send("hello")
    await (await agent.start(caller=BOB, conversation_id="his")).send("hello")
    skill = agent.skill("session")
    assert isinstance(skill, SessionSkill)
    store = skill.store
    alice, bob = caller_hash("caller:alice@example.com"), caller_hash("caller:bob@example.com")
    assert store.caller_namespaces() == {
        alice: "caller:alice@example.com",
        bob: "caller:bob@example.com",
    }
    (sessions_root(folder) / "callers" / bob / ".namespace").write_text("caller:alice@example.com")
    assert store.caller_namespaces() == {alice: "caller:alice@example.com"}


@pytest.mark.parametrize("which", ["journal", "snapshot"])
def test_s7_a_session_file_that_is_a_link_answers_500_session_unsafe(
    tmp_path: Path, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`.s1.journal` (or `s1.json`) made a link: the documented 500 session_unsafe with the
    path logged for the owner, not 409 "damaged"; the link and its target are left as they are."""
    folder = tmp_path / "helper"
    target = tmp_path / "precious.txt"
    target.write_bytes(b"never read or written by the agent\n")
    with served_client(session_agent(folder)) as client:
        assert post_turn(client, "s1").status_code == 200
        alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
        link = alice / (".s1.journal" if which == "journal" else "s1.json")
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        caplog.clear()
        refused = post_turn(client, "s1")
        streamed = post_turn(client, "s1", stream=True)
    assert (refused.status_code, refused.json()) == (
        500,
        {
            "error": {
                "message": "this caller's kept conversations cannot be read or kept safely here "
                "(the agent's owner is told); send no metadata.session_id to be answered without "
                "keeping it",
                "type": "server_error",
                "param": None,
                "code": "session_unsafe",
            }
        },
    )
    assert streamed.status_code == 500
    assert streamed.json()["error"]["code"] == "session_unsafe"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert (
        errors
        == [
            f"{link} is a symbolic link or not a plain file; nothing is written through it "
            "(replace it with a real folder or file, or remove it); the conversations there are "
            "neither read nor kept"
        ]
        * 2
    )
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"never read or written by the agent\n"


def test_s7_read_session_refuses_a_link_as_a_link(tmp_path: Path) -> None:
    """`read_session` from code (and `webagents sessions`, and `recent`) name a linked session
    file as a link (SessionLinkError), never follow it."""
    real = tmp_path / "real.json"
    real.write_bytes(b"{}")
    (tmp_path / "s1.json").symlink_to(real)
    with pytest.raises(SessionLinkError) as refused:
        read_session(tmp_path / "s1.json")
    assert str(refused.value) == (
        f"{tmp_path / 's1.json'} is a symbolic link or not a plain file; nothing is written "
        "through it (replace it with a real folder or file, or remove it); the conversations "
        "there are neither read nor kept"
    )


async def test_s7_a_hard_linked_journal_is_refused_and_the_other_callers_untouched(
    tmp_path: Path,
) -> None:
    """A journal with a second name (a hard link to another caller's) is neither appended to
    nor read: one caller's turn must never land in another's conversation."""
    folder = tmp_path / "helper"
    agent = session_agent(folder)
    for caller in (BOB, ALICE):
        for text in ("first", "second"):  # the second turn is appended to the journal
            await (await agent.start(caller=caller, conversation_id="hl")).send(text)
    callers = sessions_root(folder) / "callers"
    bobs = callers / caller_hash(BOB.namespace or "") / ".hl.journal"
    alices = callers / caller_hash(ALICE.namespace or "") / ".hl.journal"
    assert bobs.is_file() and alices.is_file()
    alices.unlink()
    os.link(bobs, alices)
    before = bobs.read_bytes()
    with pytest.raises(SessionLinkError) as refused:
        await (await agent.start(caller=ALICE, conversation_id="hl")).send("injected")
    assert str(refused.value) == (
        f"{alices} is a file with another name (a hard link); nothing is written through it "
        "(replace it with a real folder or file, or remove it); the conversations there are "
        "neither read nor kept"
    )
    assert bobs.read_bytes() == before
