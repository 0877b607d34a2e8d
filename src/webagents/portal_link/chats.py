"""`session: {backend: robutler}` (S3, S4, P10): the owner's terminal conversations recorded
as their chats with the agent on the portal, and the portal's chats listed and continued.

Only the terminal chat asks for this (`SessionSkill.record_owner_chats`): served
conversations reach the agent through the portal already and are kept as before. Recording
needs the profile's sign-in (`webagents login`) and the folder's link (`webagents publish`);
without either the conversation stays on this machine and `notice` says which is missing.
Turns go through a durable outbox (`chat_outbox.py`), so a portal that does not answer, or a
sign-in that expired, loses nothing: they are recorded, once, when it answers again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, WebAgentsError
from ..home import is_agent_id
from ..model import Message
from ..portal_wire.times import wire_time
from ..sessions.protocol import SessionSummary
from .chat_outbox import Call, ChatOutbox, OutboxError, PortalMessage
from .client import PortalClient
from .errors import AgentNotPublished, PortalUnreachable, SignInError
from .login import Login, load_login

TIMEOUT = 15.0
"""Seconds a call to the portal may take before the turn is kept for later instead."""


@dataclass(frozen=True)
class PortalLink:
    """Where the owner's chats with this agent are recorded: the portal, who, which agent."""

    login: Login
    agent_id: str


def link_of(directory: Path, profile: str | None) -> tuple[PortalLink | None, str | None]:
    """The portal link of an agent folder for a profile, or why there is none (what the chat
    says: what is missing and the command that fixes it)."""
    stays = "conversations are kept on this machine only"
    try:
        login = load_login(profile)
    except ConfigError as exc:
        return None, f"{stays}: {exc}"
    if login is None:
        return None, (
            f"{stays}: not signed in to a portal (backend: robutler needs it): run "
            "webagents login, then webagents publish"
        )
    config = directory / ".webagents" / "config.json"
    try:
        found = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        found = {}
    except (OSError, ValueError) as exc:
        return None, f"{stays}: {config} cannot be read ({exc}): fix it, or run webagents publish"
    link = found.get("link") if isinstance(found, dict) else None
    agent_id = link.get("agentId") if isinstance(link, dict) else None
    if not is_agent_id(agent_id):
        return None, (
            f"{stays}: this agent is not published on {login.portal} (backend: robutler "
            "needs it): run webagents publish"
        )
    assert isinstance(link, dict) and isinstance(agent_id, str)
    linked_to = link.get("portal")
    if isinstance(linked_to, str) and linked_to.rstrip("/") != login.portal.rstrip("/"):
        return None, (
            f"{stays}: this agent is published on {linked_to}, but you are signed in to "
            f"{login.portal}: run webagents login --portal {linked_to}, or webagents publish"
        )
    return PortalLink(login, agent_id), None


def to_portal(message: Message) -> PortalMessage:
    """A kept message as the portal records it: its role and text, and a tool call's or a
    tool result's identity so that the chat shows them and a resumed chat can send them."""
    content = message.get("content")
    out: PortalMessage = {"role": message.get("role"), "content": content}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    elif not isinstance(content, str):
        out["content"] = ""  # P9 takes no message with neither content nor tool calls
    if message.get("role") == "tool":
        for key in ("tool_call_id", "name"):
            if message.get(key):
                out[key] = message[key]
    return out


def from_portal(messages: list[dict[str, Any]]) -> list[Message]:
    """The portal's messages as the model is sent them (only what the model's wire takes)."""
    history: list[Message] = []
    for found in messages:
        message: Message = {"role": found["role"], "content": found.get("content")}
        for key in ("tool_calls", "tool_call_id", "name"):
            if found.get(key):
                message[key] = found[key]
        history.append(message)
    return history


class PortalChats:
    """The robutler backend of one agent folder for the terminal chat of one profile."""

    def __init__(self, directory: Path, profile: str | None) -> None:
        self.link, self.notice = link_of(directory, profile)
        self.outbox = ChatOutbox(self.link.agent_id, profile) if self.link else None
        self.notes: list[str] = []
        """What the chat should say (once each) about recording: taken by `take_notes`."""
        self._said: set[str] = set()
        self._unreachable = False

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def _note(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            self.notes.append(text)

    def _client(self) -> PortalClient:
        assert self.link is not None
        return PortalClient(self.link.login.portal, self.link.login.access_token, TIMEOUT)

    # -- recording -----------------------------------------------------------------------------

    def record(self, session_id: str, messages: list[Message]) -> None:
        """Queue what the portal does not have yet of this conversation, then send what
        waits; problems become notes, never errors (the turn is kept on this machine)."""
        if self.outbox is None:
            return
        try:
            state = self.outbox.state(session_id)
            queued = state["queued"] if state else 0
            if len(messages) > queued:
                new = [to_portal(m) for m in messages[queued:]]
                self.outbox.queue(session_id, new, len(messages))
        except (OutboxError, OSError) as exc:
            self._note(
                f"this turn is kept on this machine but cannot be queued for the portal: {exc}"
            )
            return
        self.flush()

    def flush(self) -> int:
        """Send every waiting call; how many were recorded (problems become notes)."""
        if self.outbox is None or self.link is None:
            return 0
        agent_id = self.link.agent_id

        def send(session_id: str, chat_id: str | None, call: Call) -> str:
            return client.record_chat(agent_id, session_id, call["messages"], chat_id=chat_id)

        sent = 0
        try:
            with self._client() as client:
                sent = self.outbox.drain(send)
        except PortalUnreachable:
            if not self._unreachable:
                self.notes.append(
                    f"the portal at {self.link.login.portal} does not answer: this conversation "
                    "is kept on this machine and recorded there once it answers"
                )
            self._unreachable = True
            return 0
        except SignInError as exc:
            self._note(f"not recorded on the portal (kept on this machine): {exc}")
        except AgentNotPublished as exc:
            self._note(f"not recorded on the portal (kept on this machine): {exc}")
        except (WebAgentsError, OSError) as exc:
            self._note(f"not recorded on the portal yet (kept on this machine): {exc}")
        for problem in self.outbox.problems:
            self._note(f"skipped: {problem}")
        if self._unreachable and sent:
            self.notes.append("the portal answers again: the waiting turns are recorded there")
            self._unreachable = False
        return sent

    # -- listing and continuing ----------------------------------------------------------------

    def chats(self, limit: int = 20) -> list[SessionSummary] | None:
        """The portal's chats with the agent, newest first (None, with a note, when it cannot
        be asked)."""
        if self.link is None:
            return None
        try:
            with self._client() as client:
                found = client.list_chats(self.link.agent_id, limit)
        except WebAgentsError as exc:
            self._note(f"the portal's conversations are not listed: {exc}")
            return None
        chats: list[SessionSummary] = []
        for chat in found:
            chats.append(
                SessionSummary(
                    id=chat.sessionId if _usable_id(chat.sessionId) else chat.chatId,
                    title=chat.preview or "(no messages)",
                    updated=wire_time(chat.updatedAt),
                    turns=0,
                    where="portal",
                    chat_id=chat.chatId,
                    message_count=chat.messageCount,
                )
            )
        return chats

    def load(self, summary: SessionSummary) -> list[Message]:
        """A chat's messages from the portal, and the outbox told they are all recorded
        there (so that later turns record only what follows, to the same chat)."""
        assert self.link is not None and self.outbox is not None and summary.chat_id
        with self._client() as client:
            messages = from_portal(client.read_chat(self.link.agent_id, summary.chat_id))
        self.outbox.adopt(summary.id, summary.chat_id, len(messages))
        return messages

    def recorded(self, session_id: str) -> int | None:
        """How many of a conversation's messages were queued for the portal from here, once
        all of them were sent (None while some wait, or when it was never recorded)."""
        if self.outbox is None:
            return None
        try:
            state = self.outbox.state(session_id)
        except (OutboxError, OSError):
            return None
        return None if state is None or state["calls"] else state["queued"]


def merged(here: list[SessionSummary], portal: list[SessionSummary]) -> list[SessionSummary]:
    """One list, newest first: a conversation kept here and on the portal appears once,
    marked `both`, with the newer of the two times."""
    by_id = {summary.id: summary for summary in here}
    listed = list(here)
    for chat in portal:
        local = by_id.get(chat.id)
        if local is None:
            listed.append(chat)
            continue
        both = replace(
            local,
            where="both",
            chat_id=chat.chat_id,
            message_count=chat.message_count,
            updated=max(local.updated, chat.updated, key=_instant),
        )
        listed[listed.index(local)] = both
    listed.sort(key=lambda s: _instant(s.updated), reverse=True)
    return listed


def _instant(text: str) -> float:
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _usable_id(value: object) -> bool:
    from ..context import is_conversation_id

    return isinstance(value, str) and is_conversation_id(value)
