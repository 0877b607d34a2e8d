"""The terminal chat, driven through its input stream (the pty test is in tests/e2e)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from webagents import Agent, Caller, Context, Skill, Usage, tool
from webagents.errors import ModelError
from webagents.model import ModelRequest
from webagents.skills.base import ChatIO, SlashCommand
from webagents.skills.session import SessionSkill
from webagents.testing import FunctionModel, ScriptedModel, call, reply

from .chat_helpers import drive


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Notes(Skill):  # type: ignore[type-arg]
    """A skill with a slash command that asks before it acts."""

    name = "notes"

    def __init__(self) -> None:
        super().__init__()
        self.removed: list[str] = []

    def commands(self) -> Sequence[SlashCommand]:
        async def forget(io: ChatIO, ctx: Context, args: str) -> None:
            if await io.confirm(f"Forget {args} for {ctx.caller.describe()}?"):
                self.removed.append(args)
                io.say(f"forgot {args}")
            else:
                io.say("kept it")

        return [SlashCommand("forget", "forget a note", forget)]


async def test_chat_message_streamed_reply_new_and_exit() -> None:
    model = ScriptedModel(
        [
            reply("Adding them.", call("add", a=2, b=3), usage=Usage(40, 9)),
            reply("It is 5.", usage=Usage(60, 4)),
            reply("A fresh start.", usage=Usage(30, 4)),
        ]
    )
    agent = Agent("calc", "Be exact.", tools=[add], model=model)
    shown = await drive(agent, "what is 2+3?\r/new\rhello again\r/exit\rnever read\r")

    assert shown.splitlines() == [
        "calc · scripted · /help for commands, Ctrl-D to leave",
        "Adding them.",
        '  ↳ add({"a": 2, "b": 3})',
        "    → 5",
        "It is 5.",
        "(100 tokens in, 13 out)",
        "new conversation",
        "A fresh start.",
        "(30 tokens in, 4 out)",
    ]
    # /new started over: the third request holds only the new user message.
    assert model.requests[2].messages == [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "hello again"},
    ]
    model.assert_finished()


async def test_chat_help_lists_builtin_and_skill_commands_and_unknown_is_refused() -> None:
    agent = Agent("calc", skills=[Notes()], model=ScriptedModel())
    shown = await drive(agent, "/help\r/nonsense\r\x04")  # \x04: Ctrl-D leaves
    assert shown.splitlines()[1:] == [
        "  /help       show the commands",
        "  /new        start a new conversation",
        "  /resume     list kept conversations; /resume N or ID continues one",
        "  /compact    summarise the older part of the conversation now",
        "  /exit       leave the chat (or Ctrl-D)",
        "  /forget     forget a note",
        "unknown command /nonsense; /help lists the commands",
    ]


async def test_chat_skill_commands_ask_before_acting() -> None:
    skill = Notes()
    agent = Agent("calc", skills=[skill], model=ScriptedModel())
    shown = await drive(agent, "/forget tone\rn\r/forget tone\ryes\r/exit\r")
    assert shown.splitlines()[1:] == ["kept it", "forgot tone"]
    assert skill.removed == ["tone"]


async def test_chat_a_failing_model_is_reported_and_the_chat_goes_on() -> None:
    def flaky(request: ModelRequest) -> str:
        if request.messages[-1]["content"] == "second":
            raise ModelError("the model endpoint at http://127.0.0.1:9/v1 answered 503: busy")
        return f"reply to {request.messages[-1]['content']}"

    model = FunctionModel(flaky)
    shown = await drive(Agent("calc", model=model), "first\rsecond\rthird\r\x04")
    lines = [line for line in shown.splitlines() if not line.endswith(" out)")]
    assert lines[1:] == [
        "reply to first",
        "error: the model endpoint at http://127.0.0.1:9/v1 answered 503: busy",
        "reply to third",
    ]
    # The failed turn left nothing behind: the third message follows the first exchange.
    assert [m["content"] for m in model.requests[2].messages[1:]] == [
        "first",
        "reply to first",
        "third",
    ]


async def test_chat_prints_the_offline_notice(tmp_path: Path) -> None:
    shown = await drive(
        Agent("calc", model=ScriptedModel()), "/exit\r", notice="offline: canned replies"
    )
    assert shown.splitlines()[1] == "offline: canned replies"


# -- kept conversations (S2) ---------------------------------------------------------------------


def _counting(request: ModelRequest) -> str:
    said = [m["content"] for m in request.messages if m["role"] == "user"]
    return f"I have heard: {' | '.join(said)}"


def _kept_agent(folder: Path) -> tuple[Agent, FunctionModel]:
    model = FunctionModel(_counting)
    return Agent("keeper", "Be brief.", skills=[SessionSkill(agent_dir=folder)], model=model), model


async def test_s2_every_conversation_is_kept_and_resume_continues_one(tmp_path: Path) -> None:
    agent, _ = _kept_agent(tmp_path)
    await drive(agent, "plan the launch\rand the party\r/new\rsomething else\r/exit\r")

    later, model = _kept_agent(tmp_path)  # a new chat, as after a restart
    shown = await drive(later, "/resume\r2\rwhat did I say?\r/exit\r")
    lines = shown.splitlines()
    listing = [line for line in lines if line.startswith("   ")]
    assert [line.split(" · ")[0] for line in listing] == [
        "   1. something else",
        "   2. plan the launch",
    ]
    assert [line.split(" · ")[2] for line in listing] == ["1 turn", "2 turns"]
    assert "resumed plan the launch · 2 turns" in lines
    assert "last reply: I have heard: plan the launch | and the party" in lines
    # The model receives the earlier turns, under the prompt the conversation began with.
    assert [m["content"] for m in model.requests[-1].messages] == [
        "Be brief.",
        "plan the launch",
        "I have heard: plan the launch",
        "and the party",
        "I have heard: plan the launch | and the party",
        "what did I say?",
    ]


async def test_s2_resume_by_id_latest_and_refusals(tmp_path: Path) -> None:
    agent, _ = _kept_agent(tmp_path)
    assert "no kept conversations yet" in await drive(agent, "/resume\r/exit\r")
    await drive(agent, "first one\r/new\rsecond one\r/exit\r")
    store = agent.skill("session").store  # type: ignore[union-attr]
    oldest = store.recent("owner")[-1].id

    again, model = _kept_agent(tmp_path)
    shown = await drive(again, f"/resume {oldest}\rmore\r/exit\r")
    assert "resumed first one · 1 turn" in shown
    assert [m["content"] for m in model.requests[-1].messages][1:] == [
        "first one",
        "I have heard: first one",
        "more",
    ]

    latest, model = _kept_agent(tmp_path)
    shown = await drive(latest, "more\r/exit\r", resume="latest")  # -c
    assert "resumed first one · 2 turns" in shown  # continued last, so the latest

    shown = await drive(latest, "/resume nope\r/resume ../x\r/resume 99\r/exit\r")
    assert shown.splitlines()[1:] == [
        "no kept conversation nope; /resume lists them",
        "no kept conversation ../x; /resume lists them",
        "there is no conversation 99 in the list (1 to 2); /resume lists them",
    ]


async def test_s2_a_damaged_conversation_is_skipped_and_said(tmp_path: Path) -> None:
    agent, _ = _kept_agent(tmp_path)
    await drive(agent, "kept fine\r/exit\r")
    store = agent.skill("session").store  # type: ignore[union-attr]
    (store.root / "broken.json").write_text("{not json", encoding="utf-8")
    shown = await drive(agent, "/resume\r\r/exit\r")
    broken = store.root / "broken.json"
    assert f"skipped: {broken} is not a session file (not JSON); it is left as it is" in shown
    assert "   1. kept fine" in shown
    assert (store.root / "broken.json").read_text(encoding="utf-8") == "{not json"


async def test_s2_an_agent_without_a_folder_keeps_nothing_and_says_so() -> None:
    agent = Agent("calc", model=ScriptedModel())
    shown = await drive(agent, "/resume\r/exit\r")
    assert shown.splitlines()[1:] == [
        "conversations are not kept for this agent: it has no folder to keep them by"
    ]


class _Elsewhere(Skill):  # type: ignore[type-arg]
    """`/elsewhere TEXT`: another chat of the same agent keeps a turn of this conversation
    (as a second terminal or a `webagents run -c` would, at that moment)."""

    name = "elsewhere"

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def commands(self) -> Sequence[SlashCommand]:
        async def elsewhere(io: ChatIO, ctx: Context, args: str) -> None:
            other, _ = _kept_agent(self.folder)
            assert ctx.conversation_id is not None
            conversation = await other.start(
                caller=Caller.owner(), conversation_id=ctx.conversation_id
            )
            await conversation.send(args)

        return [SlashCommand("elsewhere", "keep a turn from another chat", elsewhere)]


async def test_s2_s6_a_resumed_chat_never_overwrites_a_turn_kept_elsewhere_and_says_what_to_do(
    tmp_path: Path,
) -> None:
    agent, _ = _kept_agent(tmp_path)
    await drive(agent, "plan the launch\r/exit\r")
    store = agent.skill("session").store  # type: ignore[union-attr]
    (listed,) = store.recent("owner")

    later, model = _kept_agent(tmp_path)
    later.add_skill(_Elsewhere(tmp_path))
    shown = await drive(
        later,
        f"/resume 1\r/elsewhere the venue\rmy message\r/resume {listed.id}\rmy message\r/exit\r",
    )
    lines = shown.splitlines()
    refused = (
        f"error: the conversation {listed.id} was continued elsewhere (another chat or run) "
        "since it was resumed here: your message was not kept and no reply is shown. /resume "
        f"{listed.id} goes on from what is kept there; then send your message again."
    )
    assert lines[lines.index("resumed plan the launch · 1 turn") + 1 :] == [
        "last reply: I have heard: plan the launch",
        refused,
        "resumed plan the launch · 2 turns",
        "last reply: I have heard: plan the launch | the venue",
        "I have heard: plan the launch | the venue | my message",
        "(80 tokens in, 13 out)",
    ]
    assert len(model.requests) == 1  # the refused turn never reached the model
    loaded = store.load("owner", listed.id)
    assert [m["content"] for m in loaded["messages"]] == [
        "plan the launch",
        "I have heard: plan the launch",
        "the venue",
        "I have heard: plan the launch | the venue",
        "my message",
        "I have heard: plan the launch | the venue | my message",
    ]
