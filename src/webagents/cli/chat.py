"""The terminal chat: the person at the terminal is the agent's owner.

Replies stream as they arrive, tool calls show as one dim line each, and slash commands come
from the chat itself (/help, /new, /resume, /exit) and from the agent's skills. Ctrl-C at the
prompt clears the line and during a reply stops it; Ctrl-D at an empty prompt leaves, as in a
shell. Every conversation is kept (S2) by the agent's session skill, which the chat adds to
an agent whose file has none; /resume lists them and continues one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.markup import escape

from .._loop import Compacted, ToolCallFinished, ToolCallStarted, TurnResult
from ..agent import Agent, Conversation
from ..agent_file import load_agent
from ..caller import Caller
from ..errors import ConfigError, WebAgentsError
from ..model import TextDelta
from ..sessions import SessionConflict
from ..skills.base import SlashCommand
from ..skills.memory.skill import MemorySkill
from ..skills.session import SessionSkill
from .chat_resume import Resume, show_portal_notes
from .terminal_text import printable

log = logging.getLogger("webagents.chat")


class LineReader(Protocol):
    async def read(self, prompt: str) -> str:
        """A line typed at the prompt; EOFError on Ctrl-D, KeyboardInterrupt on Ctrl-C."""
        ...


class PromptReader:
    """prompt_toolkit's line editor, with history kept privately under the webagents home."""

    def __init__(self, history_file: Path | None = None, **session_options: object) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory

        history: History = InMemoryHistory()
        if history_file is not None:
            from .._files import ensure_private_dir, ensure_private_file

            ensure_private_dir(history_file.parent)
            ensure_private_file(history_file)
            history = FileHistory(str(history_file))
        self._session: PromptSession[str] = PromptSession(history=history, **session_options)  # type: ignore[arg-type]

    async def read(self, prompt: str) -> str:
        line: str = await self._session.prompt_async(prompt)
        return line


class PlainReader:
    """Lines from a stdin that is not a terminal (a pipe or a file)."""

    async def read(self, prompt: str) -> str:
        line: str = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            raise EOFError
        return line.rstrip("\n")


@dataclass
class _Terminal:
    """The ChatIO handed to skills' slash commands."""

    console: Console
    reader: LineReader

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    async def confirm(self, question: str) -> bool:
        try:
            answer = await self.reader.read(f"{question} [y/N] ")
        except (EOFError, KeyboardInterrupt):
            return False
        return answer.strip().lower() in {"y", "yes"}


def new_conversation_id() -> str:
    """A new conversation's id: when it began, and enough randomness never to collide."""
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def keep_conversations(agent: Agent) -> SessionSkill | None:
    """The agent's session skill, added when its file has none (S2: the chat keeps every
    conversation); None for an agent built in code with no folder to keep them by."""
    found = agent.skill(SessionSkill.name)
    if isinstance(found, SessionSkill):
        return found
    if found is not None or agent.directory is None:
        return None
    skill = SessionSkill()
    agent.add_skill(skill)
    return skill


class ChatApp:
    def __init__(
        self,
        agent: Agent,
        *,
        console: Console,
        reader: LineReader,
        notice: str | None = None,
    ) -> None:
        self.agent = agent
        self.console = console
        self.reader = reader
        self.notice = notice
        self.terminal = _Terminal(console, reader)
        self.conversation: Conversation | None = None
        found = agent.skill(SessionSkill.name)
        self.sessions = found if isinstance(found, SessionSkill) else None
        self.portal = self.sessions.record_owner_chats() if self.sessions else None
        self._line_open = False
        self.resume_failed = False
        self.commands: dict[str, tuple[str, Callable[[str], Awaitable[bool]]]] = {
            "help": ("show the commands", self._help),
            "new": ("start a new conversation", self._new),
            "resume": ("list kept conversations; /resume N or ID continues one", self._resume),
            "compact": ("summarise the older part of the conversation now", self._compact),
            "exit": ("leave the chat (or Ctrl-D)", self._exit),
        }
        for skill in agent.skills:
            for command in skill.commands():
                self.commands[command.name] = (command.help, self._skill_command(command))

    def _skill_command(self, command: SlashCommand) -> Callable[[str], Awaitable[bool]]:
        async def run(args: str) -> bool:
            conversation = await self._conversation()
            await command.run(self.terminal, conversation.ctx, args)
            return True

        return run

    async def _conversation(self) -> Conversation:
        if self.conversation is None:
            self.conversation = await self.agent.start(
                caller=Caller.owner(), conversation_id=new_conversation_id()
            )
        return self.conversation

    async def run(self, *, resume: str | None = None) -> None:
        """The chat until /exit or Ctrl-D; `resume` continues a kept conversation first
        (an id, a number from the list, `latest`, or "" to list them and ask)."""
        model_name = getattr(self.agent.model, "name", "model")
        self.console.print(
            f"[bold]{escape(self.agent.name)}[/bold] [dim]· {escape(model_name)} · "
            "/help for commands, Ctrl-D to leave[/dim]"
        )
        if self.notice:
            self.console.print(f"[yellow]{escape(self.notice)}[/yellow]")
        if self.portal is not None:
            if self.portal.notice:
                self.console.print(f"[yellow]{escape(self.portal.notice)}[/yellow]")
            await asyncio.to_thread(self.portal.flush)  # what an earlier chat left waiting
            show_portal_notes(self.console, self.portal)
        memory = self.agent.skill(MemorySkill.name)
        if isinstance(memory, MemorySkill) and (notice := await memory.portal_notice()):
            self.console.print(f"[yellow]{escape(notice)}[/yellow]", soft_wrap=True)
        if resume is not None:
            await self._command(f"/resume {resume}")
            if self.resume_failed and resume not in ("", "latest"):
                raise WebAgentsError(
                    f"no kept conversation {resume!r} to resume: `webagents chat PATH "
                    "--resume` lists them"
                )
        while True:
            try:
                line = await self.reader.read("> ")
            except EOFError:
                break
            except KeyboardInterrupt:
                continue
            # What a pipe or a terminal sent that is not valid Unicode is shown and kept as
            # U+FFFD, so that it can be sent and kept at all.
            line = line.strip().encode("utf-8", "replace").decode("utf-8")
            if not line:
                continue
            if line.startswith("/"):
                if not await self._command(line):
                    break
                continue
            await self._turn(line)

    async def _command(self, line: str) -> bool:
        name, _, args = line[1:].partition(" ")
        entry = self.commands.get(name.lower())
        if entry is None:
            self.console.print(
                f"[red]unknown command /{escape(name)}[/red]; /help lists the commands"
            )
            return True
        try:
            return await entry[1](args.strip())
        except WebAgentsError as exc:
            self.console.print(f"[red]error:[/red] {escape(str(exc))}")
            return True

    async def _help(self, args: str) -> bool:
        for name, (text, _) in self.commands.items():
            self.console.print(f"  /{name:<10} {escape(text)}", highlight=False)
        return True

    async def _new(self, args: str) -> bool:
        self.conversation = None  # begun, and kept, with its first message
        self.console.print("[dim]new conversation[/dim]")
        return True

    async def _compact(self, args: str) -> bool:
        conversation = self.conversation
        compacted = await conversation.compact() if conversation is not None else None
        if conversation is None or compacted is None:
            self.console.print("[dim]nothing to compact yet[/dim]")
            return True
        await conversation.keep()
        self._show_compacted(compacted)
        return True

    def _show_compacted(self, compacted: Compacted) -> None:
        self._end_line()
        n = compacted.covers
        which = (
            "message of this conversation is"
            if n == 1
            else f"{n} messages of this conversation are"
        )
        self.console.print(f"[dim]compacted: the earliest {which} now sent as a summary[/dim]")

    async def _resume(self, args: str) -> bool:
        if self.sessions is None:
            self.console.print(
                "conversations are not kept for this agent: it has no folder to keep them by",
                markup=False,
            )
            return True
        resume = Resume(
            self.sessions, self.portal, self.agent.name, console=self.console, ask=self.reader.read
        )
        chosen = await resume.choose(args)
        self.resume_failed = resume.failed
        if chosen is None:
            return True
        session = chosen.session
        self.conversation = await self.agent.start(
            caller=Caller.owner(), conversation_id=session["id"], messages=chosen.given
        )
        resume.show_resumed(session["title"], self.conversation.messages)
        return True

    async def _exit(self, args: str) -> bool:
        return False

    async def _turn(self, text: str) -> None:
        conversation = await self._conversation()
        kept = len(conversation.messages)
        task = asyncio.ensure_future(self._render(conversation, text))
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, task.cancel)
        try:
            await task
        except SessionConflict as exc:
            del conversation.messages[kept:]
            self._end_line()
            self.console.print(
                f"[red]error:[/red] the conversation {escape(exc.session_id)} was continued "
                "elsewhere (another chat or run) since it was resumed here: your message was "
                f"not kept and no reply is shown. /resume {escape(exc.session_id)} goes on "
                "from what is kept there; then send your message again.",
                soft_wrap=True,
            )
        except asyncio.CancelledError:
            del conversation.messages[kept:]
            self.console.print()  # after the ^C the terminal echoed
            self._line_open = False
            self.console.print("[yellow]stopped[/yellow]")
        except WebAgentsError as exc:
            del conversation.messages[kept:]
            self._end_line()
            self.console.print(f"[red]error:[/red] {escape(str(exc))}")
        except Exception as exc:  # the chat outlives a bug in a skill or a model
            log.exception("the turn failed")
            del conversation.messages[kept:]
            self._end_line()
            self.console.print(f"[red]error:[/red] {escape(f'{type(exc).__name__}: {exc}')}")
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGINT)
            show_portal_notes(self.console, self.portal)

    def _end_line(self) -> None:
        """Finish a line a streamed reply left open."""
        if self._line_open:
            self.console.print()
            self._line_open = False

    async def _render(self, conversation: Conversation, text: str) -> None:
        async for event in conversation.stream(text):
            if isinstance(event, TextDelta):
                if not event.text:
                    continue
                self.console.print(printable(event.text), end="", markup=False, highlight=False)
                self._line_open = not event.text.endswith("\n")
            elif isinstance(event, ToolCallStarted):
                self._end_line()
                args = printable(event.call.arguments)
                args = args if len(args) <= 80 else args[:77] + "..."
                name = printable(event.call.name)
                self.console.print(f"[dim]  ↳ {escape(name)}({escape(args)})[/dim]")
            elif isinstance(event, ToolCallFinished):
                output = " ".join(printable(event.output).split())
                output = output if len(output) <= 100 else output[:97] + "..."
                style = "red" if event.is_error else "dim"
                self.console.print(f"[{style}]    → {escape(output)}[/{style}]")
            elif isinstance(event, Compacted):
                self._show_compacted(event)
            elif isinstance(event, TurnResult):
                self._end_line()
                usage = event.usage
                self.console.print(
                    f"[dim]({usage.prompt_tokens} tokens in, {usage.completion_tokens} out)[/dim]"
                )


def offline_notice(agent: Agent) -> str:
    """What the chat and `run` say with --offline: where replies come from, and (for an agent
    with the memory skill) the phrases that make the offline model keep and list notes."""
    from ..offline import OFFLINE_MEMORY_HINT, OFFLINE_NOTICE

    has_memory = agent.skill("memory") is not None
    return f"{OFFLINE_NOTICE}\n{OFFLINE_MEMORY_HINT}" if has_memory else OFFLINE_NOTICE


def run_chat(
    path: Path,
    *,
    offline: bool = False,
    profile: str | None = None,
    resume: str | None = None,
) -> None:
    from ..home import chat_history_file

    model = notice = None
    if offline:
        from ..offline import OfflineModel

        model = OfflineModel()
    agent = load_agent(path, model=model, profile=profile)
    if offline:
        notice = offline_notice(agent)
    keep_conversations(agent)
    try:  # resolve now, so a missing key is reported before the prompt
        agent.model  # noqa: B018
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}; or try the chat with the offline scripted model: --offline"
        ) from None
    console = Console(highlight=False, soft_wrap=True)
    reader: LineReader = (
        PromptReader(chat_history_file(profile)) if sys.stdin.isatty() else PlainReader()
    )

    async def main() -> None:
        try:
            app = ChatApp(agent, console=console, reader=reader, notice=notice)
            await app.run(resume=resume)
        finally:
            await agent.aclose()

    asyncio.run(main())
