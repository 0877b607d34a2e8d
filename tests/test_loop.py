"""R3, R5: the model/tool loop, streaming, the turn limit, usage, and the fixed system prompt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from webagents import (
    Agent,
    Caller,
    Context,
    Skill,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
    Usage,
    tool,
)
from webagents.errors import ToolError, TurnLimitError
from webagents.model import Message, ToolCall
from webagents.skills.base import Tool
from webagents.testing import ScriptedModel, ScriptMismatch, call, call_unoffered, reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool
async def refuse() -> str:
    """Fails with a message for the model."""
    raise ToolError("not today: ask again tomorrow")


async def test_r3_multi_step_loop_with_parallel_calls_and_failing_tools() -> None:
    model = ScriptedModel(
        [
            [call("add", a=2, b=3), call("explode", reason="boom")],
            [call("refuse"), call_unoffered("nope"), call("add", '{"a": 1,')],
            reply("Five.", usage=Usage(40, 2)),
        ]
    )
    agent = Agent("calc", "Add things.", tools=[add, explode, refuse], model=model)
    result = await agent.run("What is 2+3?")

    assert result.output == "Five."
    assert result.model_calls == 3
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_1_0", "5"),
        (
            "call_1_1",
            "Error: the tool explode failed unexpectedly (RuntimeError); "
            "the details are in the agent's log",
        ),
        ("call_2_0", "Error: not today: ask again tomorrow"),
        ("call_2_1", "Error: there is no tool named 'nope'; the tools are: add, explode, refuse"),
        (
            "call_2_2",
            "Error: arguments are not valid JSON "
            "(Expecting property name enclosed in double quotes at position 8)",
        ),
    ]
    # The third request carries the whole exchange: both steps and every tool result, in order.
    roles = [m["role"] for m in model.requests[2].messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "tool",
        "tool",
    ]
    assert model.requests[2].messages[2]["tool_calls"][1]["function"] == {
        "name": "explode",
        "arguments": '{"reason": "boom"}',
    }
    model.assert_finished()


async def test_r3_usage_is_summed_over_the_turns_calls() -> None:
    model = ScriptedModel(
        [reply(None, call("add", a=1, b=1), usage=Usage(100, 7)), reply("2", usage=Usage(130, 1))]
    )
    result = await Agent("calc", tools=[add], model=model).run("1+1")
    assert (result.usage, result.last_usage) == (Usage(230, 8), Usage(130, 1))
    assert result.usage.total_tokens == 238


async def test_r3_streaming_yields_deltas_tool_events_and_the_result_last() -> None:
    model = ScriptedModel(
        [reply("Let me add.", call("add", a=1, b=2)), "The sum is 3, as computed."]
    )
    conversation = await Agent("calc", tools=[add], model=model).start(caller=Caller.owner())
    events = [event async for event in conversation.stream("1+2?")]

    assert isinstance(events[-1], TurnResult)
    kinds = [type(e).__name__ for e in events]
    first_call = kinds.index("ToolCallStarted")
    assert set(kinds[:first_call]) == {"TextDelta"}
    assert kinds[first_call : first_call + 2] == ["ToolCallStarted", "ToolCallFinished"]
    assert set(kinds[first_call + 2 : -1]) == {"TextDelta"}
    assert sum(k == "TextDelta" for k in kinds) > 2  # it really arrived in pieces
    texts = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert texts == "Let me add.The sum is 3, as computed."
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [(e.call.name, e.output, e.is_error) for e in finished] == [("add", "3", False)]
    assert isinstance(events[first_call], ToolCallStarted)
    assert events[-1].output == "The sum is 3, as computed."


async def test_a1_agent_start_needs_its_caller_named() -> None:
    """A forgotten caller is an error, never the owner: `Agent.start` takes the caller by
    keyword, with no default."""
    agent = Agent("a", model=ScriptedModel(["Hi."]))
    with pytest.raises(TypeError) as forgotten:
        await agent.start()  # type: ignore[call-arg]
    assert str(forgotten.value) == (
        "Agent.start() missing 1 required keyword-only argument: 'caller'"
    )
    with pytest.raises(TypeError) as positional:
        await agent.start(Caller.verified("alice"))  # type: ignore[misc]
    assert str(positional.value) == "Agent.start() takes 1 positional argument but 2 were given"
    conversation = await agent.start(caller=Caller.verified("alice"))
    assert conversation.caller == Caller.verified("alice")


async def test_r3_turn_limit_stops_a_model_that_never_answers() -> None:
    model = ScriptedModel([call("add", a=1, b=1)] * 3)
    agent = Agent("calc", tools=[add], model=model, max_turns=3)
    conversation = await agent.start(caller=Caller.owner())
    with pytest.raises(TurnLimitError) as caught:
        await conversation.send("loop forever")
    assert str(caught.value) == (
        "the agent called the model 3 times in one turn without a final answer; "
        "raise max_turns (Agent(max_turns=...)) if the task needs more steps"
    )
    assert len(model.requests) == 3
    model.assert_finished()


class CountingPrompt(Skill):  # type: ignore[type-arg]
    """A skill whose prompt would differ every time it was asked: proves it is asked once."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def prompt(self, ctx: Context) -> str:
        self.asked += 1
        return f"Prompt version {self.asked} for {ctx.caller.describe()}."


async def test_r5_system_prompt_is_byte_identical_across_turns() -> None:
    model = ScriptedModel(["one", call("add", a=1, b=1), "two", "three", "new"])
    skill = CountingPrompt()
    agent = Agent("calc", "Be exact.", skills=[skill], tools=[add], model=model)
    conversation = await agent.start(caller=Caller.owner())
    for text in ("first", "second", "third"):
        await conversation.send(text)

    systems = [r.messages[0] for r in model.requests[:4]]
    assert (
        systems == [{"role": "system", "content": "Be exact.\n\nPrompt version 1 for owner."}] * 4
    )
    assert skill.asked == 1
    # The conversation's history grows behind the same prompt.
    assert [m["content"] for m in model.requests[3].messages if m["role"] == "user"] == [
        "first",
        "second",
        "third",
    ]
    # A new conversation builds its own prompt once.
    await (await agent.start(caller=Caller.owner())).send("fresh")
    assert model.requests[4].messages[0]["content"] == "Be exact.\n\nPrompt version 2 for owner."


async def test_r5_a_kept_prompt_snapshot_is_reused_as_is() -> None:
    model = ScriptedModel(["ok"])
    skill = CountingPrompt()
    agent = Agent("calc", "Be exact.", skills=[skill], model=model)
    earlier: list[Message] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    conversation = await agent.start(
        caller=Caller.owner(), messages=earlier, system_prompt="The snapshot."
    )
    await conversation.send("again")
    assert skill.asked == 0
    assert model.requests[0].messages == [
        {"role": "system", "content": "The snapshot."},
        *earlier,
        {"role": "user", "content": "again"},
    ]


class Recorder(Skill):  # type: ignore[type-arg]
    """Records every hook, and shows anonymous callers fewer tools."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    @tool
    async def whoami(self, ctx: Context) -> str:
        """Who is calling."""
        return ctx.caller.describe()

    @tool
    async def secret(self) -> str:
        """Only for verified callers."""
        return "s3cret"

    def tools(self, ctx: Context) -> Sequence[Tool]:
        if ctx.caller.namespace is None:
            return [t for t in self._tools if t.name == "whoami"]
        return self._tools

    async def on_conversation_start(self, ctx: Context) -> None:
        self.seen.append(f"start {ctx.caller.describe()} {ctx.conversation_id}")

    async def before_model(self, ctx: Context, messages: list[Message]) -> None:
        self.seen.append(f"before_model {len(messages)}")

    async def after_tool(self, ctx: Context, call: ToolCall, output: str, is_error: bool) -> None:
        self.seen.append(f"after_tool {call.name}={output}")

    async def on_turn_finished(self, ctx: Context, turn: TurnResult) -> None:
        self.seen.append(f"finished {turn.output}")


async def test_r4_hooks_run_in_order_with_the_conversations_context() -> None:
    skill = Recorder()
    model = ScriptedModel([call("whoami"), "done"])
    agent = Agent("r", skills=[skill], model=model)
    conversation = await agent.start(
        caller=Caller.verified("alice@example.com"), conversation_id="c1"
    )
    await conversation.send("who am I?")
    assert skill.seen == [
        "start verified 'alice@example.com' c1",
        "before_model 1",
        "after_tool whoami=verified 'alice@example.com'",
        "before_model 3",
        "finished done",
    ]


async def test_r4_tools_are_listed_per_caller() -> None:
    skill = Recorder()
    model = ScriptedModel(["a", "b", call("secret")])
    agent = Agent("r", skills=[skill], model=model)
    await (await agent.start(caller=Caller.verified("alice@example.com"))).send("hi")
    await (await agent.start(caller=Caller.anonymous())).send("hi")
    offered = [[t["function"]["name"] for t in r.tools] for r in model.requests]
    assert offered == [["secret", "whoami"], ["whoami"]]
    # A scripted call to a tool the caller was not offered is a script mismatch, not a call.
    with pytest.raises(
        ScriptMismatch, match=r"calls tool 'secret', but the request offers \['whoami'\]"
    ):
        await (await agent.start(caller=Caller.anonymous())).send("try")


async def test_before_model_may_change_what_is_sent_but_not_the_system_prompt() -> None:
    class Trim(Skill):  # type: ignore[type-arg]
        name = "trim"

        async def before_model(self, ctx: Context, messages: list[Message]) -> None:
            del messages[:-1]

    model = ScriptedModel(["a", "b"])
    conversation = await Agent("t", "System.", skills=[Trim()], model=model).start(
        caller=Caller.owner()
    )
    await conversation.send("one")
    await conversation.send("two")
    assert model.requests[1].messages == [
        {"role": "system", "content": "System."},
        {"role": "user", "content": "two"},
    ]
    assert [m["content"] for m in conversation.messages] == ["one", "a", "two", "b"]


async def test_two_skills_offering_one_tool_name_are_refused() -> None:
    from webagents.errors import ConfigError

    agent = Agent("t", tools=[add], skills=[_AddSkill()], model=ScriptedModel())
    with pytest.raises(ConfigError, match="two skills of agent 't' offer a tool named 'add'"):
        await agent.start(caller=Caller.owner())


class _AddSkill(Skill):  # type: ignore[type-arg]
    name = "adder"

    @tool
    def add(self, a: int) -> int:
        """Another add."""
        return a


def test_scripted_model_says_when_it_is_called_too_often() -> None:
    model = ScriptedModel(["only"])
    agent = Agent("t", model=model)
    assert agent.run_sync("one").output == "only"
    with pytest.raises(ScriptMismatch) as caught:
        agent.run_sync("two")
    assert str(caught.value) == (
        "the model was called 2 times but the script has 1 replies; "
        'the last message was {"role": "user", "content": "two"}'
    )


def test_scripted_model_reports_unused_replies_and_accepts_functions() -> None:
    seen: list[Any] = []

    def echo(request: Any) -> str:
        seen.append(request.messages[-1]["content"])
        return "echo: " + request.messages[-1]["content"]

    model = ScriptedModel([echo, "left over"])
    assert Agent("t", model=model).run_sync("ping").output == "echo: ping"
    assert seen == ["ping"]
    with pytest.raises(ScriptMismatch, match="1 scripted replies were never asked for"):
        model.assert_finished()
    assert json.loads(json.dumps(model.requests[0].messages))[-1] == {
        "role": "user",
        "content": "ping",
    }


async def test_r3_tool_calls_of_one_step_run_concurrently() -> None:
    """Each tool waits for the other: run one after the other, they could never finish."""
    barrier = asyncio.Barrier(2)

    @tool
    async def left() -> str:
        """Meets right."""
        await asyncio.wait_for(barrier.wait(), timeout=30)  # a guard against hanging forever
        return "left met right"

    @tool
    async def right() -> str:
        """Meets left."""
        await asyncio.wait_for(barrier.wait(), timeout=30)
        return "right met left"

    model = ScriptedModel([[call("left"), call("right")], "both met"])
    result = await Agent("meet", tools=[left, right], model=model).run("meet")
    assert [m["content"] for m in result.messages if m["role"] == "tool"] == [
        "left met right",
        "right met left",
    ]


async def test_a_turn_stopped_mid_step_leaves_a_conversation_a_model_accepts() -> None:
    twice = [call("add", a=1, b=2), call("add", a=3, b=4)]
    model = ScriptedModel([twice, twice])
    conversation = await Agent("calc", tools=[add], model=model).start(caller=Caller.owner())
    async for event in conversation.stream("add twice"):
        if isinstance(event, ToolCallStarted):
            break  # the consumer goes away while the tools run
    assert [m["role"] for m in conversation.messages] == ["user"]
    async for event in conversation.stream("add twice"):
        if isinstance(event, ToolCallFinished):
            break  # after the results arrived: the call and both results are kept together
    assert [m["role"] for m in conversation.messages] == [
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
    ]


async def test_a_hook_that_edits_messages_changes_only_what_is_sent() -> None:
    class Redact(Skill):  # type: ignore[type-arg]
        name = "redact"

        async def before_model(self, ctx: Context, messages: list[Message]) -> None:
            for message in messages:
                message["content"] = "[redacted]"

    model = ScriptedModel(["ok"])
    conversation = await Agent("r", skills=[Redact()], model=model).start(caller=Caller.owner())
    await conversation.send("my secret")
    assert model.requests[0].messages[1] == {"role": "user", "content": "[redacted]"}
    assert conversation.messages == [
        {"role": "user", "content": "my secret"},
        {"role": "assistant", "content": "ok"},
    ]
