"""Issue 11, what the session skill keeps: no write through a link (S7), limits on kept
conversations (S5), and a full disk answered 507 over HTTP."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from webagents import Agent, Caller, load_agent
from webagents.access import AccessVerifier
from webagents.agent_file import AccessSpec
from webagents.errors import AgentFileError
from webagents.home import sessions_dir
from webagents.model import ModelRequest
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.skills.session import (
    SessionLimitError,
    SessionLinkError,
    SessionSkill,
    read_session,
)
from webagents.skills.session.store import agent_folder_name, caller_hash
from webagents.testing import FunctionModel

from .conftest import write_agent

ALICE = Caller.verified("alice@example.com")
BOB = Caller.verified("bob@example.com")


def _echo(request: ModelRequest) -> str:
    return f"seen {len(request.messages)}"


def _agent(folder: Path, **settings: Any) -> Agent:
    folder.mkdir(parents=True, exist_ok=True)
    skill = SessionSkill(agent_dir=folder, **settings)
    return Agent("helper", "Be brief.", skills=[skill], model=FunctionModel(_echo))


def _root(folder: Path) -> Path:
    return sessions_dir() / agent_folder_name(folder) / "helper"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# -- symbolic links on the write paths (S7) -------------------------------------------------------


async def test_hardening_s7_a_caller_folder_linked_to_another_callers_is_refused(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(BOB, conversation_id="plan")).send("bob's secret plan")
    await (await agent.start(ALICE, conversation_id="mine")).send("alice's")
    bob = _root(folder) / "callers" / caller_hash(BOB.namespace or "")
    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    shutil.rmtree(alice)
    alice.symlink_to(bob)
    before = _files(bob)

    for conversation in ("plan", "new"):  # reading bob's, or adding one to his folder
        with pytest.raises(SessionLinkError) as refused:
            await (await agent.start(ALICE, conversation_id=conversation)).send("mine now")
        assert str(refused.value) == (
            f"{alice} is a symbolic link or not a folder; nothing is written through it "
            "(replace it with a real folder or file, or remove it); the conversations there "
            "are neither read nor kept"
        )
    assert _files(bob) == before
    assert agent.skill("session").store.recent(ALICE.namespace or "") == []  # type: ignore[union-attr]


async def test_hardening_s7_a_lock_file_that_is_a_link_leaves_its_target_untouched(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(ALICE, conversation_id="plan")).send("hi")
    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    target = tmp_path / "precious.txt"
    target.write_bytes(b"never written by the agent\n")
    before = target.stat()
    (alice / ".lock").unlink()
    (alice / ".lock").symlink_to(target)
    conversation = await agent.start(ALICE, conversation_id="plan")
    with pytest.raises(SessionLinkError, match=r"\.lock is a symbolic link or not a plain file"):
        await conversation.send("again")
    assert target.read_bytes() == b"never written by the agent\n"
    assert target.stat().st_mtime_ns == before.st_mtime_ns


# -- limits (quotas) ------------------------------------------------------------------------------


async def test_hardening_quota_a_caller_keeps_at_most_caller_sessions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder, caller_sessions=2)
    for conversation in ("one", "two"):
        await (await agent.start(ALICE, conversation_id=conversation)).send("hi")
    for _ in range(2):
        with pytest.raises(SessionLimitError) as refused:
            await agent.start(ALICE, conversation_id="three")
    assert str(refused.value) == (
        "this agent keeps at most 2 conversations for each caller, and yours are all kept; "
        "continue one of them (its metadata.session_id), or send no metadata.session_id to be "
        "answered without keeping the conversation"
    )
    # Kept ones go on; another caller and the owner have their own room (the owner: no limit).
    result = await (await agent.start(ALICE, conversation_id="two")).send("more")
    assert result.output == "seen 2"
    await (await agent.start(BOB, conversation_id="three")).send("hi")
    for n in range(4):
        await (await agent.start(Caller.owner(), conversation_id=f"o{n}")).send("hi")
    kept = sorted(str(p.relative_to(_root(folder))) for p in _root(folder).rglob("*.json"))
    assert len(kept) == 2 + 1 + 4
    logged = [r.getMessage() for r in caplog.records if r.name == "webagents.session"]
    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    assert logged == [
        f"session: {alice} keeps 2 conversations, the most this agent keeps for one caller"
    ]


async def test_hardening_quota_two_new_conversations_at_once_never_pass_the_limit(
    tmp_path: Path,
) -> None:
    """Both started before either was kept: the second is refused when it is kept."""
    folder = tmp_path / "helper"
    agent = _agent(folder, caller_sessions=1)
    first = await agent.start(ALICE, conversation_id="one")
    second = await agent.start(ALICE, conversation_id="two")
    await first.send("hi")
    with pytest.raises(SessionLimitError):
        await second.send("hi")
    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    assert sorted(p.name for p in alice.glob("*.json")) == ["one.json"]


async def test_hardening_quota_the_owner_is_limited_only_when_set(tmp_path: Path) -> None:
    agent = _agent(tmp_path / "helper", owner_sessions=1)
    await (await agent.start(Caller.owner(), conversation_id="one")).send("hi")
    with pytest.raises(SessionLimitError, match="at most 1 conversations for its owner"):
        await agent.start(Caller.owner(), conversation_id="two")


async def test_hardening_quota_channel_senders_with_conversations_are_capped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = _agent(tmp_path / "helper", channel_senders=2)
    senders = [Caller.channel("telegram", str(n)) for n in range(4)]
    for sender in senders[:2]:
        await (await agent.start(sender, conversation_id="c")).send("hi")
    await (await agent.start(ALICE, conversation_id="c")).send("verified callers do not count")
    for sender in senders[2:]:
        with pytest.raises(SessionLimitError) as refused:
            await agent.start(sender, conversation_id="c")
        assert str(refused.value) == (
            "this agent keeps conversations for at most 2 channel senders, and has them all; "
            "send no metadata.session_id to be answered without keeping the conversation"
        )
    await (await agent.start(senders[0], conversation_id="d")).send("a known sender goes on")
    assert [r.getMessage() for r in caplog.records if r.name == "webagents.session"] == [
        "session: refusing the conversations of new channel senders: 2 channel senders have "
        "some, the most this agent keeps (the session skill's channel_senders setting)"
    ]


def test_hardening_quota_session_settings_are_checked(tmp_path: Path) -> None:
    agent = load_agent(
        write_agent(tmp_path / "a", "skills:\n  - session: {caller_sessions: 5, owner_sessions: 9}")
    )
    settings = agent.skill("session").settings  # type: ignore[union-attr]
    assert settings.model_dump() == {
        "backend": "local",
        "caller_sessions": 5,
        "owner_sessions": 9,
        "channel_senders": 10_000,
    }
    with pytest.raises(AgentFileError) as refused:
        load_agent(write_agent(tmp_path / "b", "skills:\n  - session: {sessions: 5}"))
    assert refused.value.reason == (
        "skill 'session': unknown setting 'sessions'; it takes: backend, caller_sessions, "
        "owner_sessions, channel_senders"
    )


# -- over HTTP: 429 at a limit, 507 on a full disk, 500 for a link ----------------------------


def _client(agent: Agent) -> TestClient:
    verifier = AccessVerifier(
        AccessSpec(keys={"alice@example.com": "env:ALICE"}), environ={"ALICE": "alice-key"}
    )
    return TestClient(create_app(AgentHost([ServedAgent(agent, verifier)])))


def _post(client: TestClient, session_id: str, *, stream: bool = False) -> Any:
    return client.post(
        "/v1/chat/completions",
        headers={"Authorization": "Bearer alice-key"},
        json={
            "model": "helper",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"session_id": session_id},
            "stream": stream,
        },
    )


def test_hardening_quota_a_served_caller_past_its_limit_gets_429(tmp_path: Path) -> None:
    with _client(_agent(tmp_path / "helper", caller_sessions=1)) as client:
        assert _post(client, "one").status_code == 200
        refused = _post(client, "two")
        assert (refused.status_code, refused.json()) == (
            429,
            {
                "error": {
                    "message": "this agent keeps at most 1 conversations for each caller, and "
                    "yours are all kept; continue one of them (its metadata.session_id), or send "
                    "no metadata.session_id to be answered without keeping the conversation",
                    "type": "rate_limit_error",
                    "param": None,
                    "code": "session_limit",
                }
            },
        )
        assert _post(client, "one").status_code == 200


def test_hardening_s7_a_full_disk_while_keeping_a_session_answers_507(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with _client(_agent(tmp_path / "helper")) as client:
        monkeypatch.setattr(os, "fsync", full_disk)
        refused = _post(client, "plan")
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
        assert _post(client, "plan").status_code == 200  # and kept once there is room


def test_hardening_s7_a_linked_caller_folder_answers_500_and_the_owner_is_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "helper"
    callers = _root(folder) / "callers"
    callers.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (callers / caller_hash(ALICE.namespace or "")).symlink_to(elsewhere)
    with _client(_agent(folder)) as client:
        refused = _post(client, "plan")
    assert (refused.status_code, refused.json()["error"]["code"]) == (500, "session_unsafe")
    assert refused.json()["error"]["message"] == (
        "this caller's kept conversations cannot be read or kept safely here (the agent's owner "
        "is told); send no metadata.session_id to be answered without keeping it"
    )
    assert list(elsewhere.iterdir()) == []
    assert any(str(callers) in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


async def test_hardening_lookalike_a_caller_folder_names_its_caller_by_its_marker(
    tmp_path: Path,
) -> None:
    """The owner's tools name a caller's folder by its marker (so `webagents sessions` shows
    whose it is without the memory skill), and a marker naming another caller is not believed."""
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(ALICE, conversation_id="mine")).send("hello")
    await (await agent.start(BOB, conversation_id="his")).send("hello")
    skill = agent.skill("session")
    assert isinstance(skill, SessionSkill)
    store = skill.store
    alice, bob = caller_hash("caller:alice@example.com"), caller_hash("caller:bob@example.com")
    assert store.caller_namespaces() == {
        alice: "caller:alice@example.com",
        bob: "caller:bob@example.com",
    }
    (_root(folder) / "callers" / bob / ".namespace").write_text("caller:alice@example.com")
    assert store.caller_namespaces() == {alice: "caller:alice@example.com"}


# -- a kept file that is a link is unsafe, not damaged (S7) ----------------------------------------


@pytest.mark.parametrize("which", ["journal", "snapshot"])
def test_hardening_s7_a_session_file_that_is_a_link_answers_500_session_unsafe(
    tmp_path: Path, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`.s1.journal` (or `s1.json`) made a link: the documented 500 session_unsafe with the
    path logged for the owner, not 409 "damaged"; the link and its target are left as they are."""
    folder = tmp_path / "helper"
    target = tmp_path / "precious.txt"
    target.write_bytes(b"never read or written by the agent\n")
    with _client(_agent(folder)) as client:
        assert _post(client, "s1").status_code == 200
        alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
        link = alice / (".s1.journal" if which == "journal" else "s1.json")
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        caplog.clear()
        refused = _post(client, "s1")
        streamed = _post(client, "s1", stream=True)
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


def test_hardening_s7_read_session_refuses_a_link_as_a_link(tmp_path: Path) -> None:
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
