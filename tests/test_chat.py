"""The terminal chat, driven through its input stream (the pty test is in tests/e2e)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from webagents import Agent, Context, Skill, Usage, tool
from webagents.cli.chat import ChatApp, PromptReader
from webagents.errors import ModelError
from webagents.model import ModelRequest
from webagents.skills.base import ChatIO, SlashCommand
from webagents.testing import FunctionModel, ScriptedModel, call, reply


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


async def drive(agent: Agent, typed: str, notice: str | None = None) -> str:
    """Type `typed` into the chat and return everything it printed."""
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    with create_pipe_input() as pipe:
        pipe.send_text(typed)
        reader = PromptReader(None, input=pipe, output=DummyOutput())
        await ChatApp(agent, console=console, reader=reader, notice=notice).run()
    return out.getvalue()


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
