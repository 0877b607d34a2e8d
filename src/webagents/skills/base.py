"""Skills: typed settings, tools from typed functions, a prompt contribution, hooks, commands.

A skill is instantiated once per agent and shared by all of its conversations; whatever is
about one conversation or caller lives in the `Context` passed to every method.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Protocol,
    TypeVar,
    cast,
    get_type_hints,
    overload,
)

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ..context import AgentInfo, Context
from ..errors import SkillSettingsError, ToolError, validation_problems
from .hooks import ConversationView, FinishedTurn

if TYPE_CHECKING:
    from ..compaction import Compaction, Summary
    from ..model import Message, Model, ToolCall

_TOOL_MARK = "__webagents_tool__"
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")


S = TypeVar("S", bound=BaseModel)


def settings_error(skill: str, model: type[BaseModel], exc: ValidationError) -> SkillSettingsError:
    """One message for every way a skill's settings can be wrong, listing what it takes."""
    problems = validation_problems(
        exc,
        unknown=lambda where: f"unknown setting {where!r}",
        wrong=lambda where, msg: f"setting {where!r}: {msg}" if where else msg,
    )
    if any(err["type"] == "extra_forbidden" for err in exc.errors()):
        problems += f"; it takes: {', '.join(model.model_fields) or 'no settings'}"
    return SkillSettingsError(f"skill {skill!r}: {problems}")


def validate_settings(skill: str, model: type[S], values: Mapping[str, Any] | None) -> S:
    if values is not None and not isinstance(values, Mapping):
        raise SkillSettingsError(
            f"skill {skill!r}: settings must be a mapping such as "
            f"{{{', '.join(f'{k}: ...' for k in list(model.model_fields)[:2])}}}"
        )
    try:
        return model.model_validate(dict(values or {}))
    except ValidationError as exc:
        raise settings_error(skill, model, exc) from None


# ---------------------------------------------------------------------------------------------
# Tools


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and the `Args:` section's per-parameter text."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    head, _, args = text.partition("\nArgs:\n")
    params: dict[str, str] = {}
    current: str | None = None
    for line in args.splitlines():
        match = re.match(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
        elif not line.strip():
            current = None
    description = " ".join(p.strip() for p in head.strip().split("\n\n")[0].splitlines())
    return description, params


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call, with the JSON schema it sees."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[Context, dict[str, Any]], Awaitable[Any]]
    """Called with the context and the model's arguments (already a dict)."""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def __call__(self, ctx: Context, arguments: dict[str, Any]) -> str:
        result = await self.handler(ctx, arguments)
        if isinstance(result, str):
            return result
        return pydantic_core.to_json(result).decode()

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """A tool from a typed function; a parameter annotated `Context` receives the context.

        The schema comes from the signature, descriptions from the docstring (its first
        paragraph, and an `Args:` section). Arguments are validated before the call, and an
        argument the schema does not name is refused.
        """
        tool_name = name or fn.__name__
        if not _TOOL_NAME.fullmatch(tool_name):
            raise ValueError(f"tool name {tool_name!r} must be 1-64 characters of a-z A-Z 0-9 _ -")
        doc, param_docs = _doc_parts(fn.__doc__)
        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        context_param: str | None = None
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {tool_name!r}: *args and **kwargs cannot be described")
            annotation = hints.get(param.name, Any)
            if annotation is Context:
                context_param = param.name
                continue
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (
                annotation,
                Field(default, description=param_docs.get(param.name)),
            )
        args_model = create_model(
            f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        parameters = _strip_titles(args_model.model_json_schema())
        parameters.setdefault("properties", {})
        is_async = inspect.iscoroutinefunction(fn)

        async def handler(ctx: Context, arguments: dict[str, Any]) -> Any:
            try:
                parsed = args_model.model_validate(arguments)
            except ValidationError as exc:
                raise ToolError(_arguments_problem(exc)) from None
            kwargs = {key: getattr(parsed, key) for key in fields}
            if context_param is not None:
                kwargs[context_param] = ctx
            if is_async:
                return await fn(**kwargs)
            return await asyncio.to_thread(fn, **kwargs)

        return cls(tool_name, description or doc or tool_name, parameters, handler)


def _arguments_problem(exc: ValidationError) -> str:
    return "invalid arguments: " + validation_problems(
        exc,
        unknown=lambda where: f"{where}: this tool takes no such argument",
        wrong=lambda where, msg: f"{where}: {msg}",
    )


F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None, /, *, name: str | None = None, description: str | None = None
) -> F | Callable[[F], F]:
    """Mark a function or a skill method as a tool: `@tool` or `@tool(name=...)`."""

    def mark(f: F) -> F:
        setattr(f, _TOOL_MARK, {"name": name, "description": description})
        return f

    return mark(fn) if fn is not None else mark


def as_tool(fn: Callable[..., Any] | Tool) -> Tool:
    if isinstance(fn, Tool):
        return fn
    options = getattr(fn, _TOOL_MARK, {})
    return Tool.from_function(fn, **options)


# ---------------------------------------------------------------------------------------------
# Slash commands (the terminal chat)


class ChatIO(Protocol):
    """What a slash command may do with the terminal."""

    def say(self, text: str) -> None: ...

    async def confirm(self, question: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class SlashCommand:
    name: str
    """Without the slash: `memory` for /memory."""
    help: str
    run: Callable[[ChatIO, Context, str], Awaitable[None]]
    """Called with the terminal, the conversation's context and the text after the name."""


# ---------------------------------------------------------------------------------------------
# The skill base class


@dataclass(frozen=True, slots=True)
class Restored:
    """What a kept conversation had when it was last kept."""

    system_prompt: str | None = None
    summary: Summary | None = None
    messages: Sequence[Message] = ()
    """The conversation after the system prompt: where a caller that sends none goes on."""


class Skill(Generic[S]):
    """Base of every skill. Subclasses set `name` and, when they take settings, `Settings`."""

    name: ClassVar[str] = ""
    Settings: ClassVar[type[BaseModel]] = NoSettings

    settings: S

    def __init__(self, settings: S | None = None, /, **values: Any) -> None:
        if settings is not None and values:
            raise TypeError("give settings either as an object or as keywords, not both")
        self.settings = (
            settings
            if settings is not None
            else cast(S, validate_settings(self.name or type(self).__name__, self.Settings, values))
        )
        self._tools = [
            Tool.from_function(getattr(self, attr), **getattr(member, _TOOL_MARK))
            for attr, member in inspect.getmembers(type(self))
            if hasattr(member, _TOOL_MARK)
        ]

    @classmethod
    def from_settings(cls, values: Mapping[str, Any] | None) -> Skill[Any]:
        """Build the skill from settings as written in an agent file."""
        return cls(cast(Any, validate_settings(cls.name, cls.Settings, values)))

    # -- set up once, when the agent is built ---------------------------------------------

    def bind(self, agent: AgentInfo) -> None:
        """Called once when the skill joins an agent."""

    def default_compaction(self) -> Compaction | None:
        """A compaction policy for an agent whose file has no `compaction:` block."""
        return None

    def model_for(self, model: str | None) -> Model | None:
        """A skill that provides models returns one for the agent's `model:` setting."""
        return None

    # -- per conversation ---------------------------------------------------------------------

    def tools(self, ctx: Context) -> Sequence[Tool]:
        """The tools this caller sees; a skill may show a caller fewer tools or parameters."""
        return self._tools

    async def prompt(self, ctx: Context) -> str | None:
        """This skill's part of the system prompt, asked once when a conversation starts."""
        return None

    async def on_conversation_start(self, ctx: Context) -> None:
        """A conversation begins (before the prompt is built)."""

    async def restore(self, ctx: Context) -> Restored | None:
        """A skill that keeps conversations returns what this one had: the system prompt it
        started with (then no skill's `prompt` is asked: R5), its summary and its messages
        (the conversation goes on from them unless `Agent.start` was given some). First
        wins."""
        return None

    async def before_turn(self, conversation: ConversationView) -> None:
        """Before a turn, with the conversation as it stands (the new input not added yet): a
        skill that keeps conversations refuses here, before the model is asked, a turn it
        could already tell it would not keep."""

    async def before_model(self, ctx: Context, messages: list[Message]) -> None:
        """Before each model call; may change `messages` (not the system prompt) in place."""

    async def after_tool(self, ctx: Context, call: ToolCall, output: str, is_error: bool) -> None:
        """After each tool call, with what went back to the model."""

    async def on_turn_finished(self, ctx: Context, turn: FinishedTurn) -> None:
        """A turn ended with a final answer."""

    async def on_compacted(self, ctx: Context, summary: Summary) -> None:
        """The older part of the conversation was just summarised (C2)."""

    async def keep(self, conversation: ConversationView, turn: FinishedTurn | None) -> None:
        """After a finished turn (or another change, with no turn), the whole conversation:
        a skill that keeps conversations saves it here."""

    def commands(self) -> Sequence[SlashCommand]:
        """Slash commands this skill adds to the terminal chat."""
        return ()

    async def aclose(self) -> None:
        """The agent is closed: let go of what the skill holds open (processes, connections)."""
