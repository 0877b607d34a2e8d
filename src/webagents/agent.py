"""The Agent: its skills, the system prompt of a conversation, and turns run through the loop.

A `Conversation` is one caller's exchange with the agent. Its system prompt is built once,
when it starts, from the instructions and every skill's contribution, and sent byte for byte
the same on every later turn (R5), so a provider's prompt cache keeps working.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._loop import Compacted, Event, TurnResult, run_turn
from .caller import Caller
from .compaction import Compaction, Summary, digest, prompt_tokens, split_point, summarise, view
from .context import AgentInfo, Context
from .errors import CompactionError, ConfigError
from .model import Message, Model, Usage
from .skills.base import Skill, Tool, as_tool

if TYPE_CHECKING:
    from .agent_spec import AgentSpec

DEFAULT_MAX_TURNS = 20
log = logging.getLogger("webagents.agent")


class _FunctionTools(Skill[Any]):
    """Holds the plain functions given as `Agent(tools=[...])`."""

    name = "tools"

    def __init__(self, tools: Sequence[Tool]) -> None:
        super().__init__()
        self._tools = list(tools)


class Agent:
    """An agent: instructions, skills and a model.

    `model` may be given directly (a `Model`, such as `webagents.testing.ScriptedModel`);
    otherwise it comes from the skill that provides `model_name` (`openai/<name>`), resolved
    the first time it is needed.
    """

    def __init__(
        self,
        name: str,
        instructions: str = "",
        *,
        skills: Iterable[Skill[Any]] = (),
        tools: Iterable[Callable[..., Any] | Tool] = (),
        model: Model | None = None,
        model_name: str | None = None,
        description: str = "",
        max_turns: int = DEFAULT_MAX_TURNS,
        directory: str | Path | None = None,
        profile: str | None = None,
        compaction: Compaction | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.name = name
        self.instructions = instructions
        self.description = description
        self.model_name = model_name
        self.max_turns = max_turns
        folder = Path(directory) if directory is not None else None
        self.info = AgentInfo(name=name, directory=folder, profile=profile)
        self.skills: list[Skill[Any]] = list(skills)
        function_tools = [as_tool(fn) for fn in tools]
        if function_tools:
            self.skills.append(_FunctionTools(function_tools))
        for skill in self.skills:
            skill.bind(self.info)
        self._model = model
        self._models: dict[str, Model] = {}
        self.compaction = compaction
        """When long conversations are summarised (C1); None: never on its own."""
        proposed = next((p for s in self.skills if (p := s.default_compaction())), None)
        if compaction is None:
            self.compaction = proposed
        elif proposed is not None:
            log.warning(
                "agent %r: its compaction: block wins over the memory skill's compaction "
                "setting (threshold %d is not used)",
                name,
                proposed.threshold,
            )
        self.spec: AgentSpec | None = None
        """The agent file this agent was loaded from, if any."""

    @property
    def directory(self) -> Path | None:
        return self.info.directory

    @property
    def model(self) -> Model:
        """The model, resolved from the skills on first use; ConfigError says what to set."""
        if self._model is None:
            for skill in self.skills:
                found = skill.model_for(self.model_name)
                if found is not None:
                    self._model = found
                    break
            else:
                raise ConfigError(
                    f"agent {self.name!r} has no model: add `model: openai/<model>` to its "
                    "AGENT.md (with the openai skill), or pass Agent(model=...)"
                )
        return self._model

    def model_named(self, name: str | None) -> Model:
        """The model for `openai/<model>` (compaction's summaries), else the agent's own."""
        if name is None or name == self.model_name:
            return self.model
        if name not in self._models:
            found = next((m for s in self.skills if (m := s.model_for(name))), None)
            if found is None:
                raise ConfigError(f"agent {self.name!r} has no skill that provides {name!r}")
            self._models[name] = found
        return self._models[name]

    def skill(self, name: str) -> Skill[Any] | None:
        return next((s for s in self.skills if s.name == name), None)

    def add_skill(self, skill: Skill[Any]) -> None:
        """Add a skill after the agent was built (before its conversations start)."""
        if self.skill(skill.name) is not None:
            raise ConfigError(f"agent {self.name!r} already has a {skill.name!r} skill")
        skill.bind(self.info)
        self.skills.append(skill)

    async def start(
        self,
        *,
        caller: Caller,
        conversation_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        messages: Sequence[Message] | None = None,
        system_prompt: str | None = None,
    ) -> Conversation:
        """Begin a conversation of `caller`, or go on with the one kept under `conversation_id`.

        The caller is always named (`Caller.owner()` for the owner): a forgotten one must
        not become the owner.

        Without `messages`, a kept conversation goes on where it was left: its messages,
        summary and system prompt (R5), also in a new process; its later turns are kept only
        while they extend what is kept (a turn after another writer's is a SessionConflict).
        `messages` is the whole conversation so far as the caller holds it (a served client's,
        S6): its first turn replaces what was kept under the id, earlier turns included.
        """
        ctx = Context(
            agent=self.info,
            caller=caller,
            conversation_id=conversation_id,
            metadata=dict(metadata or {}),
        )
        for skill in self.skills:
            await skill.on_conversation_start(ctx)
        summary: Summary | None = None
        kept: Sequence[Message] = ()
        for skill in self.skills:
            restored = await skill.restore(ctx)
            if restored is not None:
                if system_prompt is None:
                    system_prompt = restored.system_prompt
                summary = restored.summary
                kept = restored.messages
                break
        # A copy: the conversation grows turn by turn, what was read stays what was read.
        history = list(kept if messages is None else messages)
        if summary is not None and not summary.fits(history):
            summary = None  # the client changed what it summarised: summarise afresh
        if system_prompt is None:
            system_prompt = await self.build_system_prompt(ctx)
        tools: dict[str, Tool] = {}
        for skill in self.skills:
            for tool in skill.tools(ctx):
                if tool.name in tools:
                    raise ConfigError(
                        f"two skills of agent {self.name!r} offer a tool named {tool.name!r}"
                    )
                tools[tool.name] = tool
        return Conversation(
            self, ctx, system_prompt, tools, history, summary, replaces_kept=messages is not None
        )

    async def build_system_prompt(self, ctx: Context) -> str:
        parts = [self.instructions.strip()]
        for skill in self.skills:
            part = await skill.prompt(ctx)
            if part and part.strip():
                parts.append(part.strip())
        return "\n\n".join(p for p in parts if p)

    async def run(self, input: str, *, caller: Caller | None = None) -> TurnResult:
        """One turn of a new conversation, as the owner unless `caller` says otherwise (a
        one-line helper for the owner's own scripts; `start` has no default)."""
        conversation = await self.start(caller=caller or Caller.owner())
        return await conversation.send(input)

    def run_sync(self, input: str, *, caller: Caller | None = None) -> TurnResult:
        """`run` for code that is not async (each call runs its own event loop)."""

        async def run_then_close() -> TurnResult:
            try:
                return await self.run(input, caller=caller)
            finally:
                await self.aclose()  # the loop ends here, and its connections with it

        return asyncio.run(run_then_close())

    async def aclose(self) -> None:
        for model in {id(m): m for m in [self._model, *self._models.values()] if m}.values():
            await model.aclose()
        for skill in self.skills:
            await skill.aclose()


class Conversation:
    """One caller's conversation with an agent; the system prompt is fixed at its start."""

    def __init__(
        self,
        agent: Agent,
        ctx: Context,
        system_prompt: str,
        tools: dict[str, Tool],
        messages: list[Message],
        summary: Summary | None = None,
        *,
        replaces_kept: bool = False,
    ) -> None:
        self.agent = agent
        self.ctx = ctx
        self.system_prompt = system_prompt
        self.tools = tools
        self.messages = messages
        """Everything after the system prompt, in OpenAI message form (never compacted)."""
        self.summary = summary
        """The summary of the conversation's first messages, sent in their place (C2)."""
        self._last_call: tuple[int, int] | None = None
        """The last model call's reported prompt tokens, and how many messages it sent."""
        self._turns = 0
        self._compacted_in = -1
        self.replaces_kept = replaces_kept
        """The caller gave the conversation whole (`Agent.start(messages=...)`, S6): its first
        keep replaces what was kept under its id. Otherwise (and after that) a keep that would
        drop kept messages, another writer's included, is refused."""

    @property
    def caller(self) -> Caller:
        return self.ctx.caller

    async def send(self, input: str | Message | None = None) -> TurnResult:
        """Add the input (a user message) and run the turn without streaming."""
        result: TurnResult | None = None
        async for event in self._turn(input, stream=False):
            if isinstance(event, TurnResult):
                result = event
        assert result is not None  # the loop ends with a TurnResult or raises
        return result

    def stream(self, input: str | Message | None = None) -> AsyncIterator[Event]:
        """Add the input and run the turn, yielding text deltas and tool calls as they happen.

        The last event is the `TurnResult`.
        """
        return self._turn(input, stream=True)

    async def _turn(self, input: str | Message | None, *, stream: bool) -> AsyncIterator[Event]:
        for skill in self.agent.skills:
            await skill.before_turn(self)  # a refusal leaves the conversation as it was
        if isinstance(input, str):
            self.messages.append({"role": "user", "content": input})
        elif input is not None:
            self.messages.append(dict(input))
        if not self.messages:
            raise ValueError("a turn needs a user message")
        self._turns += 1
        async for event in run_turn(
            model=self.agent.model,
            system_prompt=self.system_prompt,
            history=self.messages,
            tools=self.tools,
            skills=self.agent.skills,
            ctx=self.ctx,
            max_turns=self.agent.max_turns,
            stream=stream,
            prepare=self._prepare,
            observe=self._observe,
        ):
            if isinstance(event, TurnResult):
                await self.keep(event)
            yield event

    async def _prepare(
        self, history: list[Message], tools: list[dict[str, Any]]
    ) -> tuple[list[Message], Compacted | None]:
        """What the next model call sends: compacted first when it would pass the threshold
        (at most once a turn: a turn's own tool rounds are never summarised away)."""
        policy = self.agent.compaction
        shown = view(history, self.summary)
        if policy is None or self._compacted_in == self._turns:
            return shown, None
        if prompt_tokens(self.system_prompt, shown, tools, self._last_call) < policy.threshold:
            return shown, None
        self._compacted_in = self._turns
        try:
            compacted = await self.compact()
        except CompactionError as exc:
            # The conversation goes on uncompacted: the model may still take it whole.
            log.warning("agent %r: %s; sending the conversation whole", self.agent.name, exc)
            return shown, None
        shown = view(history, self.summary)
        if prompt_tokens(self.system_prompt, shown, tools, None) >= policy.threshold:
            log.warning(
                "agent %r: the conversation is still over its compaction threshold (%d) "
                "after a summary: the summary, the system prompt, the tools and the newest "
                "turn together pass it (a larger threshold, or a smaller keep, would help)",
                self.agent.name,
                policy.threshold,
            )
        return shown, compacted

    def _observe(self, usage: Usage | None, sent: int) -> None:
        prompt = usage.prompt_tokens if usage is not None else 0
        self._last_call = (prompt, sent) if prompt > 0 else None

    async def compact(self) -> Compacted | None:
        """Summarise the older part of the conversation now (None: nothing old enough).

        CompactionError when the summary cannot be made; the conversation is left as it was.
        """
        policy = self.agent.compaction or Compaction(threshold=1)
        start = self.summary.covers if self.summary is not None else 0
        split = split_point(self.messages, policy, start)
        if split <= start:
            return None
        try:
            model = self.agent.model_named(policy.model)
            text, usage = await summarise(model, policy, self.summary, self.messages[start:split])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise CompactionError(f"the conversation could not be summarised ({exc})") from exc
        self.summary = Summary(text, split, digest(self.messages[:split]))
        self._last_call = None
        for skill in self.agent.skills:
            await skill.on_compacted(self.ctx, self.summary)
        return Compacted(split, text, usage)

    async def keep(self, turn: TurnResult | None = None) -> None:
        """Hand the conversation to the skills that keep conversations (after each turn)."""
        for skill in self.agent.skills:
            await skill.keep(self, turn)
        self.replaces_kept = False  # replaced once: later turns extend what this one kept
