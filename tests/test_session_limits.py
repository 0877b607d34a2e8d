"""S5, the limits on what the session skill keeps for its callers: how many conversations
and how many bytes each caller (and the owner, when set) keeps, how many channel senders and
JWT callers keep any, the settings that set them, and a 429 over HTTP that the official client
does not retry."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from webagents import Caller, load_agent
from webagents.errors import AgentFileError
from webagents.sessions import SessionLimitError
from webagents.sessions.store import caller_hash
from webagents.skills.session import SessionSkill
from webagents.testing import FunctionModel

from .caller_helpers import NEWCOMERS
from .conftest import write_agent
from .session_helpers import (
    ALICE,
    BOB,
    echo,
    plain_files,
    post_turn,
    served_client,
    session_agent,
    sessions_root,
)


async def test_session_limits_a_caller_keeps_at_most_caller_sessions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "helper"
    agent = session_agent(folder, caller_sessions=2)
    for conversation in ("one", "two"):
        await (await agent.start(caller=ALICE, conversation_id=conversation)).send("hi")
    for _ in range(2):
        with pytest.raises(SessionLimitError) as refused:
            await agent.start(caller=ALICE, conversation_id="three")
    assert str(refused.value) == (
        "this agent keeps at most 2 conversations for each caller, and yours are all kept; "
        "continue one of them (its metadata.session_id), or send no metadata.session_id to be "
        "answered without keeping the conversation"
    )
    # Kept ones go on (from their kept turn); another caller and the owner have their own
    # room (the owner: no limit).
    result = await (await agent.start(caller=ALICE, conversation_id="two")).send("more")
    assert result.output == "seen 4"
    await (await agent.start(caller=BOB, conversation_id="three")).send("hi")
    for n in range(4):
        await (await agent.start(caller=Caller.owner(), conversation_id=f"o{n}")).send("hi")
    kept = sorted(
        str(p.relative_to(sessions_root(folder))) for p in sessions_root(folder).rglob("*.json")
    )
    assert len(kept) == 2 + 1 + 4
    logged = [r.getMessage() for r in caplog.records if r.name == "webagents.session"]
    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    assert logged == [
        f"session: {alice} keeps 2 conversations, the most this agent keeps for one caller"
    ]


async def test_session_limits_two_new_conversations_at_once_never_pass_the_limit(
    tmp_path: Path,
) -> None:
    """Both started before either was kept: the second is refused when it is kept."""
    folder = tmp_path / "helper"
    agent = session_agent(folder, caller_sessions=1)
    first = await agent.start(caller=ALICE, conversation_id="one")
    second = await agent.start(caller=ALICE, conversation_id="two")
    await first.send("hi")
    with pytest.raises(SessionLimitError):
        await second.send("hi")
    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    assert sorted(p.name for p in alice.glob("*.json")) == ["one.json"]


async def test_session_limits_the_owner_is_limited_only_when_set(tmp_path: Path) -> None:
    agent = session_agent(tmp_path / "helper", owner_sessions=1)
    await (await agent.start(caller=Caller.owner(), conversation_id="one")).send("hi")
    with pytest.raises(SessionLimitError, match="at most 1 conversations for its owner"):
        await agent.start(caller=Caller.owner(), conversation_id="two")


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
    agent = session_agent(tmp_path / "helper", **caps)
    callers = [newcomer(n) for n in range(4)]
    for caller in callers[:2]:
        await (await agent.start(caller=caller, conversation_id="c")).send("hi")
    await (await agent.start(caller=ALICE, conversation_id="c")).send("an API key's caller")
    for other in NEWCOMERS:
        if other[0] != setting:
            await (await agent.start(caller=other[2](9), conversation_id="c")).send("another kind")
    for caller in callers[2:]:
        with pytest.raises(SessionLimitError) as refused:
            await agent.start(caller=caller, conversation_id="c")
        assert str(refused.value) == (
            f"this agent keeps conversations for at most 2 {who}, and has them all; send no "
            "metadata.session_id to be answered without keeping the conversation"
        )
    await (await agent.start(caller=callers[0], conversation_id="d")).send("a known one goes on")
    assert [r.getMessage() for r in caplog.records if r.name == "webagents.session"] == [
        f"session: refusing the conversations of new {who}: 2 {who} have conversations, the "
        f"most this agent keeps (the session skill's {setting} setting)"
    ]
    assert len(list((sessions_root(tmp_path / "helper") / "callers").iterdir())) == 2 + 1 + 1


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


# -- over HTTP: 429 at a limit -----------------------------------------------------------------


def test_session_limits_a_served_caller_past_its_limit_gets_429(tmp_path: Path) -> None:
    with served_client(session_agent(tmp_path / "helper", caller_sessions=1)) as client:
        assert post_turn(client, "one").status_code == 200
        refused = post_turn(client, "two")
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
        assert post_turn(client, "one").status_code == 200


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
    agent = session_agent(folder, caller_session_bytes=3000)
    await (await agent.start(caller=ALICE, conversation_id="one")).send("x" * 1500)
    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    kept = (alice / "one.json").stat().st_size
    before = plain_files(alice)

    # A new conversation, and a kept one that grows, are refused when they would pass it.
    with pytest.raises(SessionLimitError) as refused:
        await (await agent.start(caller=ALICE, conversation_id="two")).send("y" * 1500)
    made = _would_make(refused)
    assert str(refused.value) == _bytes_refusal(
        3000, f"keeping this turn would make {made}, so it was not kept"
    )
    assert kept + 1500 < made <= 3000 + 1500
    skill = agent.skill("session")
    assert isinstance(skill, SessionSkill)
    history = skill.store.load(ALICE.namespace or "", "one")
    assert history is not None
    one = await agent.start(caller=ALICE, conversation_id="one", messages=history["messages"])
    with pytest.raises(SessionLimitError) as grown:
        await one.send("z" * 1500)
    assert str(grown.value) == _bytes_refusal(
        3000, f"keeping this turn would make {_would_make(grown)}, so it was not kept"
    )
    assert plain_files(alice) == before  # nothing written, nothing damaged

    # Bob has room of his own; the owner has no limit unless owner_session_bytes is set.
    await (await agent.start(caller=BOB, conversation_id="two")).send("y" * 1500)
    for n in range(3):
        await (await agent.start(caller=Caller.owner(), conversation_id=f"o{n}")).send("o" * 1500)

    # Past the limit (lowered since), a new conversation is refused before the model is
    # asked; a shorter conversation under a kept id always goes through.
    model = FunctionModel(echo)
    lowered = session_agent(folder, model, caller_session_bytes=1000)
    with pytest.raises(SessionLimitError) as full:
        await lowered.start(caller=ALICE, conversation_id="three")
    assert str(full.value) == _bytes_refusal(1000, f"yours take {kept}")
    assert model.requests == []
    # A shorter one, given whole as a served client sends it (S6), replaces what was kept.
    shorter = await lowered.start(caller=ALICE, conversation_id="one", messages=[])
    result = await shorter.send("short")
    assert result.output == "seen 2"
    assert sorted(plain_files(alice)) == [".lock", ".namespace", "one.json"]
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
    first, second = (session_agent(folder, caller_session_bytes=4000) for _ in range(2))
    started = await first.start(caller=ALICE, conversation_id="one")  # nothing kept yet: room
    await (await second.start(caller=ALICE, conversation_id="big")).send("b" * 2500)
    with pytest.raises(SessionLimitError) as refused:
        await started.send("a" * 2500)
    assert str(refused.value) == _bytes_refusal(
        4000, f"keeping this turn would make {_would_make(refused)}, so it was not kept"
    )
    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    assert sorted(p.name for p in alice.glob("*.json")) == ["big.json"]


async def test_session_limits_the_owners_bytes_are_capped_only_when_set(tmp_path: Path) -> None:
    agent = session_agent(tmp_path / "helper", owner_session_bytes=2000)
    await (await agent.start(caller=Caller.owner(), conversation_id="one")).send("x" * 1000)
    with pytest.raises(SessionLimitError) as refused:
        await (await agent.start(caller=Caller.owner(), conversation_id="two")).send("y" * 1000)
    assert str(refused.value) == _bytes_refusal(
        2000,
        f"keeping this turn would make {_would_make(refused)}, so it was not kept",
        whose="its owner",
    )


def test_session_limits_a_served_caller_past_its_session_bytes_gets_429(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    model = FunctionModel(echo)
    agent = session_agent(folder, model, caller_session_bytes=2000)

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

    alice = sessions_root(folder) / "callers" / caller_hash(ALICE.namespace or "")
    with served_client(agent) as client:
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
    model = FunctionModel(echo)
    agent = session_agent(folder, model, caller_session_bytes=2000)
    with served_client(agent) as client:
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
