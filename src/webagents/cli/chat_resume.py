"""/resume in the terminal chat: the owner's kept conversations listed (this machine's and,
with `session: {backend: robutler}`, the portal's chats in one list, P10), one chosen by
number or id, and what it goes on from."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console
from rich.markup import escape

from ..caller import Caller
from ..context import is_conversation_id
from ..model import Message
from ..portal_link.chats import PortalChats, merged
from ..rights import rights_of
from ..sessions import SessionFile, SessionSummary
from ..sessions.session_file import new_session
from ..skills.session import SessionSkill
from .terminal_text import printable


@dataclass(frozen=True, slots=True)
class Chosen:
    """A kept conversation to go on with."""

    session: SessionFile
    given: list[Message] | None
    """The messages to start it with (the portal's, with turns this machine lacks), or None
    to go on as it is kept here (a turn another chat keeps meanwhile is never overwritten:
    this one's next turn is refused instead)."""


class Resume:
    """The owner's kept conversations of one agent, for the chat's /resume."""

    def __init__(
        self,
        sessions: SessionSkill,
        portal: PortalChats | None,
        agent_name: str,
        *,
        console: Console,
        ask: Callable[[str], Awaitable[str]],
    ) -> None:
        self.sessions = sessions
        self.portal = portal
        self.agent_name = agent_name
        self.console = console
        self.ask = ask
        self.failed = False
        """Whether the last `choose` was given a conversation that does not exist."""

    async def choose(self, args: str) -> Chosen | None:
        """The conversation `args` names (an id, a number from the list, `latest`), or the
        one chosen from the list shown when it is empty; None when there is none to go on
        with (`failed` then tells whether one was named that does not exist)."""
        self.failed = False
        store = self.sessions.store
        owner = rights_of(Caller.owner()).conversations  # the person at the terminal
        assert owner is not None
        recent = store.recent(owner)
        for problem in store.problems:
            self.console.print(
                f"[yellow]skipped:[/yellow] {escape(problem)} (remove it to forget it)",
                soft_wrap=True,
            )
        if self.portal is not None:  # P10: this machine's and the portal's, in one list
            await asyncio.to_thread(self.portal.flush)
            chats = await asyncio.to_thread(self.portal.chats)
            recent = merged(recent, chats) if chats is not None else recent
            show_portal_notes(self.console, self.portal)
        if not recent:
            self.console.print("[dim]no kept conversations yet[/dim]")
            return None
        choice = args.strip()
        if choice == "latest":
            choice = recent[0].id
        if not choice:
            for number, summary in enumerate(recent, 1):
                line = _listed(number, summary, marked=self.portal is not None)
                self.console.print(line, markup=False, highlight=False)
            try:
                choice = await self.ask("resume which? (number or id, Enter: none) ")
            except (EOFError, KeyboardInterrupt):
                return None
            choice = choice.strip()
            if not choice:
                return None
        chosen = _chosen(choice, recent)
        here = store.load(owner, chosen) if chosen else None
        session = here
        listed = next((s for s in recent if s.id == chosen), None)
        if listed is not None and listed.chat_id and self.portal is not None:
            session = await self._from_portal(listed, here)
        if session is None:
            if choice.isdigit() and len(choice) < 4:
                self.console.print(
                    f"[red]there is no conversation {escape(choice)} in the list[/red] "
                    f"(1 to {len(recent)}); /resume lists them"
                )
            else:
                self.console.print(
                    f"[red]no kept conversation {escape(choice)}[/red]; /resume lists them"
                )
            self.failed = True
            return None
        return Chosen(session, None if session is here else session["messages"])

    def show_resumed(self, title: str, messages: list[Message]) -> None:
        """The line that says which conversation goes on, and its last reply."""
        turns = sum(1 for m in messages if m.get("role") == "user")
        self.console.print(
            f"[dim]resumed {escape(title)} · {turns} turn{'' if turns == 1 else 's'}[/dim]"
        )
        last = next(
            (
                m.get("content")
                for m in reversed(messages)
                if m.get("role") == "assistant" and m.get("content")
            ),
            None,
        )
        if isinstance(last, str):
            shown = " ".join(printable(last).split())
            self.console.print(
                f"[dim]last reply: {escape(shown if len(shown) <= 200 else shown[:197] + '...')}"
                "[/dim]"
            )

    async def _from_portal(
        self, listed: SessionSummary, session: SessionFile | None
    ) -> SessionFile:
        """A chat of the portal's to continue here: the one kept here while the portal has
        nothing it lacks, else the portal's messages (turns added on the web or elsewhere)."""
        assert self.portal is not None
        if session is not None and self.portal.recorded(listed.id) in (None, listed.message_count):
            return session
        messages = await asyncio.to_thread(self.portal.load, listed)
        # A new dict: the caller tells the portal's from the one kept here by identity.
        found = new_session(listed.id, self.agent_name, messages) if session is None else session
        return {**found, "messages": messages}


def show_portal_notes(console: Console, portal: PortalChats | None) -> None:
    """What recording chats on the portal has to tell (a chat queued, the portal back)."""
    for note in portal.take_notes() if portal is not None else []:
        console.print(f"[yellow]{escape(note)}[/yellow]", soft_wrap=True)


def _listed(number: int, summary: SessionSummary, *, marked: bool = False) -> str:
    try:
        when = f"{datetime.fromisoformat(summary.updated).astimezone():%Y-%m-%d %H:%M}"
    except ValueError:
        when = summary.updated
    turns = f"{summary.turns} turn{'' if summary.turns == 1 else 's'}"
    if summary.where == "portal":
        count = summary.message_count or 0
        turns = f"{count} message{'' if count == 1 else 's'}"
    line = f"  {number:>2}. {printable(summary.title)} · {when} · {turns} · {summary.id}"
    return f"{line} · {summary.where}" if marked else line


def _chosen(choice: str, recent: list[SessionSummary]) -> str | None:
    """The id a /resume argument names: an id, or else a number from the list."""
    if any(summary.id == choice for summary in recent):
        return choice
    if choice.isdigit() and 1 <= int(choice) <= len(recent):
        return recent[int(choice) - 1].id
    return choice if is_conversation_id(choice) else None
