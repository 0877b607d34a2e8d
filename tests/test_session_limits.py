"""Issue 11, what the session skill keeps: no write through a link (S7), limits on kept
conversations (S5), and a full disk answered 507 over HTTP."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from collections.abc import Callable
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


def _agent(folder: Path, model: FunctionModel | None = None, **settings: Any) -> Agent:
    folder.mkdir(parents=True, exist_ok=True)
    skill = SessionSkill(agent_dir=folder, **settings)
    return Agent("helper", "Be brief.", skills=[skill], model=model or FunctionModel(_echo))


def _root(folder: Path) -> Path:
    return sessions_dir() / agent_folder_name(folder) / "helper"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# -- symbolic links on the write paths (S7) -------------------------------------------------------


async def test_s7_a_caller_folder_linked_to_another_callers_is_refused(
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


async def test_s7_a_lock_file_that_is_a_link_leaves_its_target_untouched(
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


async def test_session_limits_a_caller_keeps_at_most_caller_sessions(
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
    # Kept ones go on (from their kept turn); another caller and the owner have their own
    # room (the owner: no limit).
    result = await (await agent.start(ALICE, conversation_id="two")).send("more")
    assert result.output == "seen 4"
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


async def test_session_limits_two_new_conversations_at_once_never_pass_the_limit(
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


async def test_session_limits_the_owner_is_limited_only_when_set(tmp_path: Path) -> None:
    agent = _agent(tmp_path / "helper", owner_sessions=1)
    await (await agent.start(Caller.owner(), conversation_id="one")).send("hi")
    with pytest.raises(SessionLimitError, match="at most 1 conversations for its owner"):
        await agent.start(Caller.owner(), conversation_id="two")


ISSUER = "https://id.example.com"
NEWCOMERS = [
    ("channel_senders", "channel senders", lambda n: Caller.channel("telegram", str(n))),
    (
        "jwt_callers",
        "callers verified by a JWT issuer",
        lambda n: Caller.verified(f"user{n}@example.com", issuer=ISSUER),
    ),
]


@pytest.mark.parametrize(("setting", "who", "newcomer"), NEWCOMERS)
async def test_session_limits_channel_senders_and_jwt_callers_with_conversations_are_capped(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    setting: str,
    who: str,
    newcomer: Callable[[int], Caller],
) -> None:
    """A bridge names its senders and an issuer its callers (one with open sign-up mints them
    without end): past the cap, a new one's conversations are not kept. API keys' callers and
    the other kind are not counted; those that keep some go on."""
    caps = {"channel_senders": 1, "jwt_callers": 1, setting: 2}
    agent = _agent(tmp_path / "helper", **caps)
    callers = [newcomer(n) for n in range(4)]
    for caller in callers[:2]:
        await (await agent.start(caller, conversation_id="c")).send("hi")
    await (await agent.start(ALICE, conversation_id="c")).send("an API key's caller")
    for other in NEWCOMERS:
        if other[0] != setting:
            await (await agent.start(other[2](9), conversation_id="c")).send("another kind")
    for caller in callers[2:]:
        with pytest.raises(SessionLimitError) as refused:
            await agent.start(caller, conversation_id="c")
        assert str(refused.value) == (
            f"this agent keeps conversations for at most 2 {who}, and has them all; send no "
            "metadata.session_id to be answered without keeping the conversation"
        )
    await (await agent.start(callers[0], conversation_id="d")).send("a known one goes on")
    assert [r.getMessage() for r in caplog.records if r.name == "webagents.session"] == [
        f"session: refusing the conversations of new {who}: 2 {who} have conversations, the "
        f"most this agent keeps (the session skill's {setting} setting)"
    ]
    assert len(list((_root(tmp_path / "helper") / "callers").iterdir())) == 2 + 1 + 1


def test_session_limits_settings_are_checked(tmp_path: Path) -> None:
    agent = load_agent(
        write_agent(tmp_path / "a", "skills:\n  - session: {caller_sessions: 5, owner_sessions: 9}")
    )
    settings = agent.skill("session").settings  # type: ignore[union-attr]
    assert settings.model_dump() == {
        "backend": "local",
        "caller_sessions": 5,
        "owner_sessions": 9,
        "caller_session_bytes": 100_000_000,
        "owner_session_bytes": None,
        "channel_senders": 10_000,
        "jwt_callers": 10_000,
    }
    with pytest.raises(AgentFileError) as refused:
        load_agent(write_agent(tmp_path / "b", "skills:\n  - session: {sessions: 5}"))
    assert refused.value.reason == (
        "skill 'session': unknown setting 'sessions'; it takes: backend, caller_sessions, "
        "owner_sessions, caller_session_bytes, owner_session_bytes, channel_senders, jwt_callers"
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


def test_session_limits_a_served_caller_past_its_limit_gets_429(tmp_path: Path) -> None:
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


def test_s7_a_full_disk_while_keeping_a_session_answers_507(
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


def test_s7_a_linked_caller_folder_answers_500_and_the_owner_is_told(
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


async def test_s7_a_caller_folder_names_its_caller_by_its_marker(
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
def test_s7_a_session_file_that_is_a_link_answers_500_session_unsafe(
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


# -- bytes of kept conversations, and how many JWT callers keep any ----------------------------


def _bytes_refusal(cap: int, made: str, whose: str = "each caller") -> str:
    return (
        f"this agent keeps at most {cap} bytes of conversations for {whose}, and {made}; send a "
        "shorter conversation under a kept metadata.session_id (what a request carries "
        "replaces what was kept), or send no metadata.session_id to be answered without "
        "keeping the conversation"
    )


def _would_make(refused: pytest.ExceptionInfo[SessionLimitError]) -> int:
    found = re.search(r"keeping this turn would make (\d+),", str(refused.value))
    assert found is not None, str(refused.value)
    return int(found[1])


async def test_session_limits_a_caller_keeps_at_most_caller_session_bytes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder, caller_session_bytes=3000)
    await (await agent.start(ALICE, conversation_id="one")).send("x" * 1500)
    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    kept = (alice / "one.json").stat().st_size
    before = _files(alice)

    # A new conversation, and a kept one that grows, are refused when they would pass it.
    with pytest.raises(SessionLimitError) as refused:
        await (await agent.start(ALICE, conversation_id="two")).send("y" * 1500)
    made = _would_make(refused)
    assert str(refused.value) == _bytes_refusal(
        3000, f"keeping this turn would make {made}, so it was not kept"
    )
    assert kept + 1500 < made <= 3000 + 1500
    skill = agent.skill("session")
    assert isinstance(skill, SessionSkill)
    history = skill.store.load(ALICE.namespace or "", "one")
    assert history is not None
    one = await agent.start(ALICE, conversation_id="one", messages=history["messages"])
    with pytest.raises(SessionLimitError) as grown:
        await one.send("z" * 1500)
    assert str(grown.value) == _bytes_refusal(
        3000, f"keeping this turn would make {_would_make(grown)}, so it was not kept"
    )
    assert _files(alice) == before  # nothing written, nothing damaged

    # Bob has room of his own; the owner has no limit unless owner_session_bytes is set.
    await (await agent.start(BOB, conversation_id="two")).send("y" * 1500)
    for n in range(3):
        await (await agent.start(Caller.owner(), conversation_id=f"o{n}")).send("o" * 1500)

    # Past the limit (lowered since), a new conversation is refused before the model is
    # asked; a shorter conversation under a kept id always goes through.
    model = FunctionModel(_echo)
    lowered = _agent(folder, model, caller_session_bytes=1000)
    with pytest.raises(SessionLimitError) as full:
        await lowered.start(ALICE, conversation_id="three")
    assert str(full.value) == _bytes_refusal(1000, f"yours take {kept}")
    assert model.requests == []
    # A shorter one, given whole as a served client sends it (S6), replaces what was kept.
    shorter = await lowered.start(ALICE, conversation_id="one", messages=[])
    result = await shorter.send("short")
    assert result.output == "seen 2"
    assert sorted(_files(alice)) == [".lock", ".namespace", "one.json"]
    assert (alice / "one.json").stat().st_size < kept

    logged = [r.getMessage() for r in caplog.records if r.name == "webagents.session"]
    assert logged == [
        f"session: {alice}: a conversation was not kept: this caller's would take {made} "
        "bytes, and this agent keeps at most 3000 for one caller (the session skill's "
        "caller_session_bytes setting)",
        f"session: {alice}: a conversation was not kept: this caller's would take {kept} "
        "bytes, and this agent keeps at most 1000 for one caller (the session skill's "
        "caller_session_bytes setting)",
    ]


async def test_session_limits_bytes_count_what_another_process_kept(
    tmp_path: Path,
) -> None:
    """The bytes are counted under the folder's lock when a turn is kept, so conversations
    another process (here: another agent on the same folder) kept meanwhile count too."""
    folder = tmp_path / "helper"
    first, second = (_agent(folder, caller_session_bytes=4000) for _ in range(2))
    started = await first.start(ALICE, conversation_id="one")  # nothing kept yet: room
    await (await second.start(ALICE, conversation_id="big")).send("b" * 2500)
    with pytest.raises(SessionLimitError) as refused:
        await started.send("a" * 2500)
    assert str(refused.value) == _bytes_refusal(
        4000, f"keeping this turn would make {_would_make(refused)}, so it was not kept"
    )
    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    assert sorted(p.name for p in alice.glob("*.json")) == ["big.json"]


async def test_session_limits_the_owners_bytes_are_capped_only_when_set(tmp_path: Path) -> None:
    agent = _agent(tmp_path / "helper", owner_session_bytes=2000)
    await (await agent.start(Caller.owner(), conversation_id="one")).send("x" * 1000)
    with pytest.raises(SessionLimitError) as refused:
        await (await agent.start(Caller.owner(), conversation_id="two")).send("y" * 1000)
    assert str(refused.value) == _bytes_refusal(
        2000,
        f"keeping this turn would make {_would_make(refused)}, so it was not kept",
        whose="its owner",
    )


def test_session_limits_a_served_caller_past_its_session_bytes_gets_429(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    model = FunctionModel(_echo)
    agent = _agent(folder, model, caller_session_bytes=2000)

    def post(session_id: str, *contents: str) -> Any:
        roles = ("user", "assistant")
        return client.post(
            "/v1/chat/completions",
            headers={"Authorization": "Bearer alice-key"},
            json={
                "model": "helper",
                "messages": [
                    {"role": roles[n % 2], "content": content} for n, content in enumerate(contents)
                ],
                "metadata": {"session_id": session_id},
            },
        )

    alice = _root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    with _client(agent) as client:
        assert post("one", "x" * 1500).status_code == 200
        kept = (alice / "one.json").stat().st_size
        grown = post("two", "y" * 1500)  # answered by the model, then not kept
        assert grown.status_code == 429
        message = grown.json()["error"]["message"]
        made = re.search(r"would make (\d+),", message)
        assert made is not None
        assert grown.json() == {
            "error": {
                "message": _bytes_refusal(
                    2000, f"keeping this turn would make {made[1]}, so it was not kept"
                ),
                "type": "rate_limit_error",
                "param": None,
                "code": "session_limit",
            }
        }
        asked = len(model.requests)
        assert post("one", "x" * 1500, "seen 1", "z" * 200).status_code == 429
        assert len(model.requests) == asked + 1
        assert sorted(p.name for p in alice.glob("*.json")) == ["one.json"]
        assert (alice / "one.json").stat().st_size == kept
        assert post("one", "short").status_code == 200  # a shorter one replaces it
        assert post("", "hi").status_code == 400
        assert (
            client.post(
                "/v1/chat/completions",
                headers={"Authorization": "Bearer alice-key"},
                json={"model": "helper", "messages": [{"role": "user", "content": "y" * 3000}]},
            ).status_code
            == 200
        )  # not kept: no limit applies


def test_session_limits_byte_settings_are_checked(tmp_path: Path) -> None:
    for setting in ("caller_session_bytes", "owner_session_bytes", "jwt_callers"):
        with pytest.raises(AgentFileError) as refused:
            load_agent(write_agent(tmp_path / setting, f"skills:\n  - session: {{{setting}: 0}}"))
        assert refused.value.reason == (
            f"skill 'session': setting '{setting}': Input should be greater than or equal to 1"
        )
    agent = load_agent(
        write_agent(tmp_path / "a", "skills:\n  - session: {caller_session_bytes: null}")
    )
    assert agent.skill("session").settings.caller_session_bytes is None  # type: ignore[union-attr]


def test_session_limits_a_refused_turn_is_not_retried_by_the_official_client(
    tmp_path: Path,
) -> None:
    """A turn refused for a limit on what is kept would only run again and be refused again:
    the 429 says `X-Should-Retry: false`, and the official client (which retries a 429 twice
    by default) asks once."""
    import openai

    folder = tmp_path / "helper"
    model = FunctionModel(_echo)
    agent = _agent(folder, model, caller_session_bytes=2000)
    with _client(agent) as client:
        caller = openai.OpenAI(
            api_key="alice-key", base_url="http://testserver/v1", http_client=client
        )
        with pytest.raises(openai.RateLimitError) as refused:
            caller.chat.completions.create(
                model="helper",
                messages=[{"role": "user", "content": "y" * 3000}],
                metadata={"session_id": "big"},
            )
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert refused.value.code == "session_limit"
    assert len(model.requests) == 1


async def test_s7_a_hard_linked_journal_is_refused_and_the_other_callers_untouched(
    tmp_path: Path,
) -> None:
    """A journal with a second name (a hard link to another caller's) is neither appended to
    nor read: one caller's turn must never land in another's conversation."""
    folder = tmp_path / "helper"
    agent = _agent(folder)
    for caller in (BOB, ALICE):
        for text in ("first", "second"):  # the second turn is appended to the journal
            await (await agent.start(caller, conversation_id="hl")).send(text)
    callers = _root(folder) / "callers"
    bobs = callers / caller_hash(BOB.namespace or "") / ".hl.journal"
    alices = callers / caller_hash(ALICE.namespace or "") / ".hl.journal"
    assert bobs.is_file() and alices.is_file()
    alices.unlink()
    os.link(bobs, alices)
    before = bobs.read_bytes()
    with pytest.raises(SessionLinkError) as refused:
        await (await agent.start(ALICE, conversation_id="hl")).send("injected")
    assert str(refused.value) == (
        f"{alices} is a file with another name (a hard link); nothing is written through it "
        "(replace it with a real folder or file, or remove it); the conversations there are "
        "neither read nor kept"
    )
    assert bobs.read_bytes() == before
