"""R4, S5, R5, C2: through the Python API, a kept conversation goes on where it was left.

`Agent.start(caller, conversation_id=...)` on a new `Agent` (a restart) brings the kept
messages, system prompt and summary into the conversation, for the owner and for a verified
caller; a save never replaces a kept conversation with one that lost earlier turns (another
writer's turn included) unless the caller gave the conversation whole (`messages=`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from webagents import Agent, Caller
from webagents.caller import CallerKind
from webagents.compaction import SUMMARY_FRAME, Compaction
from webagents.home import sessions_dir
from webagents.model import Message, ModelRequest
from webagents.sessions import SessionConflict, read_session
from webagents.sessions.store import agent_folder_name, caller_hash
from webagents.skills.memory import MemorySkill
from webagents.skills.session import SessionSkill
from webagents.testing import FunctionModel, ScriptedModel

from .conftest import REPO_ROOT

OWNER = Caller.owner()
ALICE = Caller.verified("alice@example.com")
CALLERS = pytest.mark.parametrize("caller", [OWNER, ALICE], ids=["owner", "verified"])


def _agent(folder: Path, model: ScriptedModel, **kwargs: Any) -> Agent:
    """The helper as a process builds it after a restart: a new Agent, new skills."""
    folder.mkdir(parents=True, exist_ok=True)
    return Agent(
        "helper",
        "Be brief.",
        skills=[SessionSkill(), MemorySkill()],
        directory=folder,
        model=model,
        **kwargs,
    )


def _kept_file(folder: Path, caller: Caller) -> Path:
    root = sessions_dir() / agent_folder_name(folder) / "helper"
    if caller.kind is CallerKind.OWNER:
        return root / "plan.json"
    return root / "callers" / caller_hash(f"caller:{caller.identity}") / "plan.json"


def _kept(folder: Path, caller: Caller) -> dict[str, Any]:
    found = read_session(_kept_file(folder, caller))
    assert found is not None
    return dict(found[0])


LAUNCH: list[Message] = [
    {"role": "user", "content": "When is the launch?"},
    {"role": "assistant", "content": "Tuesday."},
]
"""The turn `_keep_the_launch` keeps."""
VENUE: list[Message] = [
    {"role": "user", "content": "And the venue?"},
    {"role": "assistant", "content": "The old hall."},
]
"""The turn the other process keeps (`_turn_in_a_process(..., "And the venue?", ...)`)."""


async def _keep_the_launch(folder: Path, caller: Caller) -> None:
    """Conversation "plan" kept for `caller` with one turn (LAUNCH)."""
    agent = _agent(folder, ScriptedModel(["Tuesday."]))
    await (await agent.start(caller=caller, conversation_id="plan")).send("When is the launch?")


def _sent(model: ScriptedModel) -> list[list[Message]]:
    return [request.messages for request in model.requests]


@CALLERS
async def test_r4_s5_a_new_agent_continues_the_kept_conversation(
    tmp_path: Path, caller: Caller
) -> None:
    folder = tmp_path / "helper"
    first = _agent(folder, ScriptedModel(["Tuesday, with the beta list."]))
    before = await first.start(caller=caller, conversation_id="plan")
    await before.send("When is the launch?")
    prompt = before.system_prompt
    # A note written since: a rebuilt prompt's memory block would name it (R5, M6).
    memory = first.skill("memory")
    assert isinstance(memory, MemorySkill)
    await memory.write(before.ctx, "launch", "Tuesday.", "the launch day")

    model = ScriptedModel(["We said Tuesday."])
    after = await _agent(folder, model).start(caller=caller, conversation_id="plan")
    assert after.system_prompt == prompt
    await after.send("Where were we?")

    turns: list[Message] = [
        {"role": "user", "content": "When is the launch?"},
        {"role": "assistant", "content": "Tuesday, with the beta list."},
        {"role": "user", "content": "Where were we?"},
    ]
    assert _sent(model) == [[{"role": "system", "content": prompt}, *turns]]
    kept = _kept(folder, caller)
    assert kept["system_prompt"] == prompt
    assert kept["messages"] == [*turns, {"role": "assistant", "content": "We said Tuesday."}]


async def test_c2_a_new_agent_sends_the_kept_summary_in_place_of_the_older_turns(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    policy = Compaction(threshold=100_000, keep_messages=2)
    first = _agent(folder, ScriptedModel(["One.", "Two.", "They counted."]), compaction=policy)
    before = await first.start(caller=ALICE, conversation_id="plan")
    await before.send("Count: one")
    await before.send("Count: two")
    assert await before.compact() is not None
    await before.keep()

    model = ScriptedModel(["Three."])
    after = await _agent(folder, model, compaction=policy).start(
        caller=ALICE, conversation_id="plan"
    )
    await after.send("And next?")

    summary: Message = {
        "role": "user",
        "content": SUMMARY_FRAME + json.dumps({"summary": "They counted."}),
    }
    assert _sent(model) == [
        [
            {"role": "system", "content": before.system_prompt},
            summary,
            {"role": "user", "content": "Count: two"},
            {"role": "assistant", "content": "Two."},
            {"role": "user", "content": "And next?"},
        ]
    ]
    assert _kept(folder, ALICE)["messages"] == [
        {"role": "user", "content": "Count: one"},
        {"role": "assistant", "content": "One."},
        {"role": "user", "content": "Count: two"},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": "And next?"},
        {"role": "assistant", "content": "Three."},
    ]


# -- two processes -------------------------------------------------------------------------------

_TURN = """
import asyncio, json, sys
from pathlib import Path
from webagents import Agent, Caller
from webagents.caller import CallerKind
from webagents.skills.memory import MemorySkill
from webagents.skills.session import SessionSkill
from webagents.model import ModelRequest
from webagents.testing import FunctionModel, ScriptedModel

folder, identity, text, reply = sys.argv[1:5]
caller = Caller.owner() if identity == "owner" else Caller.verified(identity)
model = ScriptedModel([reply])
agent = Agent("helper", "Be brief.", skills=[SessionSkill(), MemorySkill()],
              directory=Path(folder), model=model)

async def main():
    conversation = await agent.start(caller=caller, conversation_id="plan")
    await conversation.send(text)
    print(json.dumps([request.messages for request in model.requests]))

asyncio.run(main())
"""


def _turn_in_a_process(folder: Path, caller: Caller, text: str, reply: str) -> Any:
    """One turn of `plan` in a process of its own; what its model was sent."""
    identity = "owner" if caller.kind is CallerKind.OWNER else caller.identity
    done = subprocess.run(
        [sys.executable, "-c", _TURN, str(folder), str(identity), text, reply],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@CALLERS
def test_r4_s5_a_second_process_continues_the_kept_conversation(
    tmp_path: Path, caller: Caller
) -> None:
    folder = tmp_path / "helper"
    folder.mkdir()
    first = _turn_in_a_process(folder, caller, "When is the launch?", "Tuesday.")
    (system,) = (m for m in first[0] if m["role"] == "system")
    second = _turn_in_a_process(folder, caller, "Where were we?", "We said Tuesday.")

    turns = [
        {"role": "user", "content": "When is the launch?"},
        {"role": "assistant", "content": "Tuesday."},
        {"role": "user", "content": "Where were we?"},
    ]
    assert second == [[system, *turns]]
    assert _kept(folder, caller)["messages"] == [
        *turns,
        {"role": "assistant", "content": "We said Tuesday."},
    ]


def _conflict(conversation_id: str = "plan") -> str:
    return (
        f"the kept conversation {conversation_id!r} has messages this one does not (it was "
        "continued elsewhere after it was loaded here, or this one lost earlier turns); it is "
        "left as it is and this turn was not kept: start the conversation again to go on from "
        f"what is kept (Agent.start with conversation_id={conversation_id!r}; in the chat, "
        f"/resume {conversation_id}), or give Agent.start the messages to keep in its place "
        "(messages=...)"
    )


async def test_s6_a_turn_on_a_conversation_continued_elsewhere_is_refused_not_kept(
    tmp_path: Path,
) -> None:
    """Two processes on one conversation: the other's turn, kept after this one loaded it,
    is never replaced; this turn is refused with what to do."""
    folder = tmp_path / "helper"
    await _keep_the_launch(folder, ALICE)
    here = await _agent(folder, ScriptedModel(["Not kept."])).start(
        caller=ALICE, conversation_id="plan"
    )
    _turn_in_a_process(folder, ALICE, "And the venue?", "The old hall.")

    with pytest.raises(SessionConflict) as refused:
        await here.send("Where were we?")
    assert str(refused.value) == _conflict()
    assert _kept(folder, ALICE)["messages"] == [*LAUNCH, *VENUE]


@pytest.mark.parametrize("kept_before", [True, False], ids=["continued", "new"])
async def test_s6_two_agents_on_one_conversation_the_later_turn_is_refused(
    tmp_path: Path, kept_before: bool
) -> None:
    folder = tmp_path / "helper"
    earlier: list[Message] = []
    if kept_before:
        agent = _agent(folder, ScriptedModel(["Tuesday."]))
        await (await agent.start(caller=OWNER, conversation_id="plan")).send("When is the launch?")
        earlier = [
            {"role": "user", "content": "When is the launch?"},
            {"role": "assistant", "content": "Tuesday."},
        ]
    one = await _agent(folder, ScriptedModel(["The old hall."])).start(
        caller=OWNER, conversation_id="plan"
    )
    two = await _agent(folder, ScriptedModel(["Not kept."])).start(
        caller=OWNER, conversation_id="plan"
    )
    await one.send("And the venue?")
    with pytest.raises(SessionConflict) as refused:
        await two.send("Where were we?")
    assert str(refused.value) == _conflict()
    assert _kept(folder, OWNER)["messages"] == [
        *earlier,
        {"role": "user", "content": "And the venue?"},
        {"role": "assistant", "content": "The old hall."},
    ]
    # Started again, it goes on from what is kept.
    model = ScriptedModel(["Tuesday, in the old hall."])
    again = await _agent(folder, model).start(caller=OWNER, conversation_id="plan")
    await again.send("Where were we?")
    assert _sent(model)[0][1:] == [
        *earlier,
        {"role": "user", "content": "And the venue?"},
        {"role": "assistant", "content": "The old hall."},
        {"role": "user", "content": "Where were we?"},
    ]


async def test_s6_a_conversation_that_dropped_kept_turns_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    agent = _agent(folder, ScriptedModel(["Tuesday.", "Not kept."]))
    conversation = await agent.start(caller=OWNER, conversation_id="plan")
    await conversation.send("When is the launch?")
    conversation.messages.clear()
    with pytest.raises(SessionConflict) as refused:
        await conversation.send("Where were we?")
    assert str(refused.value) == _conflict()
    assert _kept(folder, OWNER)["messages"] == LAUNCH


async def test_s6_messages_given_to_start_replace_the_kept_conversation_on_purpose(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "helper"
    await _keep_the_launch(folder, OWNER)
    model = ScriptedModel(["Hello."])
    fresh = await _agent(folder, model).start(caller=OWNER, conversation_id="plan", messages=[])
    await fresh.send("Start over.")
    assert _sent(model)[0][1:] == [{"role": "user", "content": "Start over."}]
    assert _kept(folder, OWNER)["messages"] == [
        {"role": "user", "content": "Start over."},
        {"role": "assistant", "content": "Hello."},
    ]


async def test_s6_after_its_replacing_turn_a_given_conversation_extends_what_it_kept(
    tmp_path: Path,
) -> None:
    """`messages=` replaces once: a later turn, after another writer's, is refused."""
    folder = tmp_path / "helper"
    await _keep_the_launch(folder, OWNER)
    given: list[Message] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
    ]
    here = await _agent(folder, ScriptedModel(["Noted.", "Not kept."])).start(
        caller=OWNER, conversation_id="plan", messages=given
    )
    await here.send("Start over.")
    kept = [
        *given,
        {"role": "user", "content": "Start over."},
        {"role": "assistant", "content": "Noted."},
    ]
    assert _kept(folder, OWNER)["messages"] == kept
    _turn_in_a_process(folder, OWNER, "And the venue?", "The old hall.")
    with pytest.raises(SessionConflict) as refused:
        await here.send("Where were we?")
    assert str(refused.value) == _conflict()
    assert _kept(folder, OWNER)["messages"] == [
        *kept,
        {"role": "user", "content": "And the venue?"},
        {"role": "assistant", "content": "The old hall."},
    ]


@CALLERS
async def test_s6_a_turn_on_a_conversation_continued_elsewhere_is_refused_before_the_model(
    tmp_path: Path, caller: Caller
) -> None:
    """The refused turn's reply is never computed: the check comes before the model call, and
    the conversation is left as it was (the input not added)."""
    folder = tmp_path / "helper"
    await _keep_the_launch(folder, caller)
    model = ScriptedModel(["Not asked."])
    here = await _agent(folder, model).start(caller=caller, conversation_id="plan")
    _turn_in_a_process(folder, caller, "And the venue?", "The old hall.")

    with pytest.raises(SessionConflict) as refused:
        await here.send("Where were we?")
    assert (str(refused.value), model.requests) == (_conflict(), [])
    assert here.messages == LAUNCH
    assert _kept(folder, caller)["messages"] == [*LAUNCH, *VENUE]


async def test_s6_a_turn_kept_elsewhere_while_the_model_answers_is_still_refused(
    tmp_path: Path,
) -> None:
    """The race the early check cannot close: another process keeps a turn while this one's
    model is answering; the keep, under the lock, refuses this turn."""
    folder = tmp_path / "helper"

    def answer_while_another_keeps(request: ModelRequest) -> str:
        _turn_in_a_process(folder, OWNER, "And the venue?", "The old hall.")
        return "Not kept."

    model = FunctionModel(answer_while_another_keeps)
    here = await _agent(folder, model).start(caller=OWNER, conversation_id="plan")
    with pytest.raises(SessionConflict) as refused:
        await here.send("Where were we?")
    assert (str(refused.value), len(model.requests)) == (_conflict(), 1)
    assert _kept(folder, OWNER)["messages"] == [
        {"role": "user", "content": "And the venue?"},
        {"role": "assistant", "content": "The old hall."},
    ]
