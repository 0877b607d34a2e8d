"""The model <-> tool loop of one turn, as a stream of events.

A turn runs until the model answers without calling a tool, or until the turn limit. Several
tool calls in one step run concurrently and their results go back in the order the model
asked for them; a tool that fails sends its error back to the model as the tool's message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import ModelError, ToolError, TurnLimitError
from .model import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
    json_kind,
    parse_arguments,
    unicode_text,
)

if TYPE_CHECKING:
    from .context import Context
    from .skills.base import Skill, Tool

log = logging.getLogger("webagents.loop")


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, and values never changed in place).

    Without recursion: a conversation's depth is whatever a client sent, and `copy.deepcopy`
    runs out of stack on a few hundred levels of nesting (a 500 for a 1.4 KB request).
    """
    if not isinstance(value, dict | list):
        return value
    root: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    pending: list[tuple[Any, Any]] = [(value, root)]
    while pending:
        source, target = pending.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            copied: Any = item
            if isinstance(item, dict | list):
                copied = {} if isinstance(item, dict) else []
                pending.append((item, copied))  # filled in later, already in its place
            if isinstance(target, dict):
                target[key] = copied
            else:
                target.append(copied)
    return root


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    call: ToolCall
    output: str
    is_error: bool


@dataclass(frozen=True, slots=True)
class Compacted:
    """The older part of the conversation was summarised before a model call (C2)."""

    covers: int
    """How many leading messages the summary now stands for."""
    summary: str
    usage: Usage | None = None
    """What the summary cost, as the summary model reported it."""


@dataclass(slots=True)
class TurnResult:
    """A finished turn: the final answer and every message the turn added."""

    output: str
    messages: list[Message] = field(default_factory=list)
    """The assistant and tool messages of this turn, in order (not the user's input)."""
    usage: Usage = field(default_factory=Usage)
    """Tokens over every model call of the turn, as the endpoint reported them."""
    model_calls: int = 0
    last_usage: Usage | None = None
    """The last call's reported usage (its prompt_tokens is the conversation's size)."""


Event = TextDelta | ToolCallStarted | ToolCallFinished | Compacted | TurnResult
Prepare = Callable[
    [list[Message], list[dict[str, Any]]], Awaitable[tuple[list[Message], Compacted | None]]
]
"""What is sent for a history (and the tools' schemas): the history, or a compacted view."""
Observe = Callable[[Usage | None, int], None]
"""Told each call's reported usage and how many messages were sent."""


async def run_turn(
    *,
    model: Model,
    system_prompt: str,
    history: list[Message],
    tools: Mapping[str, Tool],
    skills: Sequence[Skill[Any]],
    ctx: Context,
    max_turns: int,
    stream: bool,
    prepare: Prepare | None = None,
    observe: Observe | None = None,
) -> AsyncIterator[Event]:
    """Run one turn over `history` (which already ends with the user's input).

    New messages are appended to `history` step by step (a tool call together with its
    results), so a caller that stops early keeps a conversation a model accepts.
    """
    schemas = [tool.schema() for tool in tools.values()]
    turn = TurnResult(output="")
    for _ in range(max_turns):
        shown = history
        if prepare is not None:
            shown, compacted = await prepare(history, schemas)
            if compacted is not None:
                if compacted.usage is not None:
                    turn.usage = turn.usage + compacted.usage
                yield compacted
        # A deep copy: what a hook changes is what this call sends, never the conversation.
        sent: list[Message] = copy_json(shown)
        for skill in skills:
            await skill.before_model(ctx, sent)
        request = ModelRequest([{"role": "system", "content": system_prompt}, *sent], schemas)

        response: ModelResponse | None = None
        if stream:
            text = _StreamedText()
            async for item in model.stream(request):
                if isinstance(item, TextDelta):
                    if not isinstance(item.text, str):
                        raise _not_text(model, item.text)
                    if piece := text.add(item.text):
                        yield TextDelta(piece)
                else:
                    response = item
            if piece := text.end():
                yield TextDelta(piece)
            if response is None:
                raise RuntimeError(f"{type(model).__name__}.stream ended without a response")
        else:
            response = await model.complete(request)
        response = _as_unicode(model, response)

        turn.model_calls += 1
        if observe is not None:
            observe(response.usage, len(shown))
        if response.usage is not None:
            turn.usage = turn.usage + response.usage
            turn.last_usage = response.usage
        message = response.to_message()

        if not response.tool_calls:
            history.append(message)
            turn.messages.append(message)
            turn.output = response.content or ""
            for skill in skills:
                await skill.on_turn_finished(ctx, turn)
            yield turn
            return

        for call in response.tool_calls:
            yield ToolCallStarted(call)
        outcomes = await asyncio.gather(*(call_tool(tools, ctx, c) for c in response.tool_calls))
        results: list[Message] = [
            {"role": "tool", "tool_call_id": call.id, "content": output}
            for call, (output, _) in zip(response.tool_calls, outcomes, strict=True)
        ]
        # The call and all its results join the conversation together, so a turn stopped
        # anywhere leaves a conversation a model accepts.
        history.extend([message, *results])
        turn.messages.extend([message, *results])
        for call, (output, is_error) in zip(response.tool_calls, outcomes, strict=True):
            for skill in skills:
                await skill.after_tool(ctx, call, output, is_error)
            yield ToolCallFinished(call, output, is_error)
    raise TurnLimitError(max_turns)


class _StreamedText:
    """A reply's deltas as Unicode (`unicode_text`), so that what streams is what is kept: a
    delta that ends in the first half of a surrogate pair keeps it for the next delta, which
    may begin with the other half."""

    def __init__(self) -> None:
        self._held = ""

    def add(self, text: str) -> str:
        text = self._held + text
        self._held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            text, self._held = text[:-1], text[-1]
        return unicode_text(text)

    def end(self) -> str:
        held, self._held = self._held, ""
        return unicode_text(held)


def _as_unicode(model: Model, response: ModelResponse) -> ModelResponse:
    """The response with its text made Unicode, said once in the log when it was not: a lone
    surrogate (a `\\ud800` escape from the endpoint) fails every reply, file and terminal
    that meets it, so it goes no further than here."""
    if response.content is None:
        return response
    if not isinstance(response.content, str):
        raise _not_text(model, response.content)
    content = unicode_text(response.content)
    if content is response.content:
        return response
    log.warning(
        "the model %s replied with text that is not Unicode (a lone surrogate, half of a "
        "UTF-16 pair); it is answered and kept with U+FFFD in its place",
        model.name,
    )
    return dataclasses.replace(response, content=content)


def _not_text(model: Model, content: object) -> ModelError:
    """For a Model (written in Python) whose text is something else: its endpoint's answers
    are read at its own boundary, as `OpenAIModel` reads them."""
    return ModelError(
        f"the model {model.name} replied with content that is {json_kind(content)} "
        f"({type(content).__name__}), not text"
    )


async def call_tool(tools: Mapping[str, Tool], ctx: Context, call: ToolCall) -> tuple[str, bool]:
    """The text the model is answered with, and whether the call failed (`webagents mcp`
    answers its clients with the same)."""
    tool = tools.get(call.name)
    if tool is None:
        names = ", ".join(sorted(tools)) or "none"
        return f"Error: there is no tool named {call.name!r}; the tools are: {names}", True
    try:
        arguments = parse_arguments(call)
        _refuse_lone_surrogates(arguments)
        return await tool(ctx, arguments), False
    except ToolError as exc:
        return f"Error: {exc}", True
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        # The model sees that it failed, not why: exception text can carry paths and
        # internals, and a served agent's model talks to strangers.
        log.exception("tool %s failed", call.name)
        return (
            f"Error: the tool {call.name} failed unexpectedly ({type(exc).__name__}); "
            "the details are in the agent's log",
            True,
        )


def _refuse_lone_surrogates(arguments: dict[str, Any]) -> None:
    """A ToolError naming the first argument whose text holds half of a surrogate pair
    (JSON lets a model write `\\ud800` alone): such text is not Unicode, and no file, log
    or reply can hold it. Walked without recursion: arguments may nest deeply."""
    stack: list[tuple[str, Any]] = [("", arguments)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not _is_unicode(value):
                raise ToolError(
                    f"invalid arguments: {where}: the text holds a lone surrogate (a \\ud800 to "
                    "\\udfff escape without its pair), which is not Unicode; send it without one"
                )
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                named = f"{where}.{_shown(key)}" if where else _shown(key)
                if not _is_unicode(key):
                    stack.append((named, key))  # the name itself is reported
                stack.append((named, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{n}]", item) for n, item in reversed(list(enumerate(value))))


def _is_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(name: str) -> str:
    """An argument's name as it can be shown, a lone surrogate escaped."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")
