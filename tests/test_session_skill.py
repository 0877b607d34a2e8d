"""S1, S5, S6 in process: the session skill keeps named conversations per caller, with the
system prompt they started with, and nothing for anonymous callers or unnamed ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from webagents import Agent, Caller, load_agent
from webagents.errors import AgentFileError, ConfigError
from webagents.home import sessions_dir
from webagents.model import ModelRequest
from webagents.sessions import SessionError, read_session
from webagents.sessions.store import agent_folder_name, caller_hash
from webagents.skills.memory import MemorySkill
from webagents.skills.session import SessionSkill
from webagents.testing import FunctionModel

from .conftest import write_agent

ALICE = Caller.verified("alice@example.com")
BOB = Caller.verified("bob@example.com")


def _echo(request: ModelRequest) -> str:
    return f"seen {len(request.messages)}"


def _agent(folder: Path, instructions: str = "Be brief.", **kwargs: object) -> Agent:
    folder.mkdir(parents=True, exist_ok=True)
    skills = [SessionSkill(agent_dir=folder), *kwargs.pop("skills", [])]  # type: ignore[list-item]
    return Agent(
        "helper",
        instructions,
        skills=skills,
        model=FunctionModel(_echo),
        **kwargs,  # type: ignore[arg-type]
    )


def _root(folder: Path) -> Path:
    return sessions_dir() / agent_folder_name(folder) / "helper"


def _read(path: Path) -> dict[str, object]:
    found = read_session(path)
    assert found is not None
    return dict(found[0])


def _kept(folder: Path) -> list[str]:
    root = _root(folder)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.json")) if root.exists() else []


# -- the agent file (S1) -------------------------------------------------------------------------


def test_s1_session_in_an_agent_file_and_its_backend_setting(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "name: helper\nskills:\n  - session")
    agent = load_agent(folder, model=FunctionModel(_echo))
    skill = agent.skill("session")
    assert isinstance(skill, SessionSkill)
    assert skill.store.root == _root(folder)

    local = write_agent(tmp_path / "b", "name: helper\nskills:\n  - session: {backend: local}")
    assert load_agent(local, model=FunctionModel(_echo)).skill("session") is not None


def test_s4_the_portal_backend_loads_unsigned_in_and_says_what_is_missing(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "name: helper\nskills:\n  - session: {backend: robutler}")
    skill = load_agent(folder, model=FunctionModel(_echo)).skill("session")
    assert isinstance(skill, SessionSkill)
    assert skill.portal is None  # nothing is recorded until the terminal chat asks
    chats = skill.record_owner_chats()
    assert chats is not None and chats.link is None and chats.outbox is None
    assert chats.notice == (
        "conversations are kept on this machine only: not signed in to a portal (backend: "
        "robutler needs it): run webagents login, then webagents publish"
    )
    local = write_agent(tmp_path / "c", "name: helper\nskills:\n  - session")
    plain = load_agent(local, model=FunctionModel(_echo)).skill("session")
    assert isinstance(plain, SessionSkill) and plain.record_owner_chats() is None

    other = write_agent(tmp_path / "b", "name: helper\nskills:\n  - session: {backend: s3}")
    with pytest.raises(AgentFileError, match="'local' or 'robutler'"):
        load_agent(other, model=FunctionModel(_echo))
    unknown = write_agent(tmp_path / "c", "name: helper\nskills:\n  - session: {keep: 3}")
    with pytest.raises(AgentFileError, match="unknown setting 'keep'; it takes: backend"):
        load_agent(unknown, model=FunctionModel(_echo))


def test_session_skill_needs_a_folder() -> None:
    with pytest.raises(ConfigError, match=r"SessionSkill\(agent_dir=\.\.\.\)"):
        Agent("helper", skills=[SessionSkill()], model=FunctionModel(_echo))


# -- what is kept (S5, S6) -----------------------------------------------------------------------


async def test_s5_python_api_keeps_a_named_conversation_with_its_prompt(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    conversation = await agent.start(caller=ALICE, conversation_id="plan")
    first = await conversation.send("first")
    second = await conversation.send("second")

    assert _kept(folder) == [f"callers/{caller_hash('caller:alice@example.com')}/plan.json"]
    path = _root(folder) / _kept(folder)[0]
    kept = _read(path)
    assert kept["format"] == 1
    assert (kept["id"], kept["agent"], kept["title"]) == ("plan", "helper", "first")
    assert kept["system_prompt"] == "Be brief."
    assert kept["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "seen 2"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "seen 4"},
    ]
    total = first.usage + second.usage
    assert total.prompt_tokens > 0
    assert kept["usage"] == {
        "prompt_tokens": total.prompt_tokens,
        "completion_tokens": total.completion_tokens,
    }


async def test_s5_r5_a_continued_conversation_keeps_the_prompt_it_started_with(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    first = _agent(folder, "The prompt of the first turn.")
    conversation = await first.start(caller=ALICE, conversation_id="plan")
    await conversation.send("hello")

    later = _agent(folder, "An edited prompt.")  # the agent changed since
    again = await later.start(caller=ALICE, conversation_id="plan", messages=conversation.messages)
    assert again.system_prompt == "The prompt of the first turn."
    fresh = await later.start(caller=ALICE, conversation_id="other")
    assert fresh.system_prompt == "An edited prompt."


async def test_s5_anonymous_callers_and_unnamed_conversations_keep_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(caller=Caller.anonymous(), conversation_id="plan")).send("hi")
    await (await agent.start(caller=ALICE)).send("hi")
    await (await agent.start(caller=Caller.verified("a,b"), conversation_id="plan")).send("hi")
    assert _kept(folder) == []
    assert not sessions_dir().exists()


async def test_s5_one_id_from_two_callers_is_two_conversations(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(caller=ALICE, conversation_id="plan")).send("alice's secret plan")
    bob = await agent.start(caller=BOB, conversation_id="plan")
    assert bob.messages == []  # nothing of alice's
    await bob.send("bob's plan")
    owner = await agent.start(caller=Caller.owner(), conversation_id="plan")
    await owner.send("the owner's plan")
    assert _kept(folder) == sorted(
        [
            "plan.json",
            f"callers/{caller_hash('caller:alice@example.com')}/plan.json",
            f"callers/{caller_hash('caller:bob@example.com')}/plan.json",
        ]
    )
    titles = {p: json.loads((_root(folder) / p).read_text())["title"] for p in _kept(folder)}
    assert sorted(titles.values()) == ["alice's secret plan", "bob's plan", "the owner's plan"]


async def test_s5_a_jwt_callers_conversations_are_kept_apart(
    tmp_path: Path,
) -> None:
    """S5, A6: a JWT caller whose `sub` equals an API-key identity has its own conversations
    (callers/<hash of caller:jwt:<issuer>#<sub>>), and never resumes the API-key caller's."""
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(caller=ALICE, conversation_id="plan")).send("alice's secret plan")
    by_token = Caller.verified("alice@example.com", issuer="https://id.test")
    resumed = await agent.start(caller=by_token, conversation_id="plan")
    assert resumed.messages == []
    await resumed.send("the token's plan")
    assert _kept(folder) == sorted(
        [
            f"callers/{caller_hash('caller:alice@example.com')}/plan.json",
            f"callers/{caller_hash('caller:jwt:https://id.test#alice@example.com')}/plan.json",
        ]
    )
    titles = {p: json.loads((_root(folder) / p).read_text())["title"] for p in _kept(folder)}
    assert sorted(titles.values()) == ["alice's secret plan", "the token's plan"]


async def test_s6_what_is_kept_is_the_conversation_sent_plus_the_reply(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(caller=ALICE, conversation_id="plan")).send("one")
    # A client sends the whole conversation each time, here an edited one.
    sent = [{"role": "user", "content": "edited one"}, {"role": "assistant", "content": "ok"}]
    await (await agent.start(caller=ALICE, conversation_id="plan", messages=sent)).send("two")
    (path,) = _kept(folder)
    assert _read(_root(folder) / path)["messages"] == [
        *sent,
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "seen 4"},
    ]


async def test_s7_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    old = os.umask(0)
    try:
        await (await agent.start(caller=ALICE, conversation_id="plan")).send("hi")
    finally:
        os.umask(old)
    path = _root(folder) / _kept(folder)[0]
    assert path.stat().st_mode & 0o777 == 0o600
    for parent in (path.parent, path.parent.parent, _root(folder), sessions_dir()):
        assert parent.stat().st_mode & 0o777 == 0o700, parent


async def test_s7_a_damaged_session_is_reported_and_left_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    await (await agent.start(caller=Caller.owner(), conversation_id="plan")).send("hi")
    path = _root(folder) / "plan.json"
    path.write_text('{"format": 1, "id": "plan", "messa', encoding="utf-8")
    with pytest.raises(SessionError, match=r"plan\.json is not a session file .*left as it is"):
        await agent.start(caller=Caller.owner(), conversation_id="plan")
    assert path.read_text(encoding="utf-8") == '{"format": 1, "id": "plan", "messa'


async def test_s7_a_file_changed_by_hand_after_loading_is_not_overwritten(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder)
    conversation = await agent.start(caller=Caller.owner(), conversation_id="plan")
    await conversation.send("hi")
    path = _root(folder) / "plan.json"
    path.write_text("my own notes, not JSON", encoding="utf-8")
    with pytest.raises(SessionError, match="not a session file"):
        await conversation.send("again")
    assert path.read_text(encoding="utf-8") == "my own notes, not JSON"


async def test_m6_with_sessions_the_memory_block_is_kept_in_the_session(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    memory = MemorySkill()
    agent = _agent(folder, skills=[memory], directory=folder)
    ctx_agent = await agent.start(caller=ALICE, conversation_id="plan")
    await memory.write(ctx_agent.ctx, "likes", "Alice likes tea.", "what alice drinks")
    await ctx_agent.send("hi")
    prompt = ctx_agent.system_prompt
    assert "likes" not in prompt  # written after the block was built

    again = await agent.start(caller=ALICE, conversation_id="plan", messages=ctx_agent.messages)
    assert again.system_prompt == prompt  # M6: fixed for the conversation
    fresh = await agent.start(caller=ALICE, conversation_id="next")
    assert "likes: what alice drinks" in fresh.system_prompt
    # The session keeps the snapshot; memory keeps none of its own beside it.
    assert not list((folder / ".webagents" / "memory").rglob("*.block"))
