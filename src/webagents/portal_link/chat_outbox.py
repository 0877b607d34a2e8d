"""The owner's turns waiting to be recorded as chats on the portal (P10): a durable outbox.

    ~/.webagents/chat-outbox/<agentId>/<sessionId>.json    one conversation (0600, folders 0700)

A conversation's file holds the portal's chat id once known (`chatId`), how many of the kept
messages were queued (`queued`, so that a resumed conversation queues only what follows), and
the calls the portal has not answered yet (`calls`). Each call is cut to the portal's limits
when it is queued (`portal_calls`), each message with the id it was given then (P9's
idempotency: the portal skips a message whose id the chat has): a call is sent until the
portal answers, and a retry after an answer that was lost records nothing twice.
A conversation's calls go in the order queued; conversations in the order their oldest
waiting call was queued. Files are replaced atomically under a lock; one that is not an
outbox file is reported and never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypedDict

from .._files import exclusive, open_file_at, open_lock, open_private_dir, write_at
from ..context import is_conversation_id
from ..errors import WebAgentsError
from ..home import chat_outbox_dir
from ..portal_wire.chats import MAX_CONTENT_CHARS, MAX_MESSAGES_PER_CALL

FORMAT = 1

PortalMessage = dict[str, Any]


class OutboxError(WebAgentsError):
    """An outbox file is not one this module wrote: it is reported, never overwritten."""


class Call(TypedDict):
    messages: list[PortalMessage]
    """Each with the `id` it was given when queued: the portal skips one it has already."""


class OutboxFile(TypedDict):
    format: int
    sessionId: str
    chatId: str | None
    queued: int
    """How many of the conversation's kept messages are queued or recorded."""
    since: str
    """When the oldest waiting call was queued (the order conversations are sent in)."""
    calls: list[Call]


def portal_calls(messages: list[PortalMessage]) -> list[list[PortalMessage]]:
    """The messages (each with its `id`) as calls within P9's limits: at most
    MAX_MESSAGES_PER_CALL messages a call, a message longer than MAX_CONTENT_CHARS in parts
    (which may span calls)."""
    parts = [part for message in messages for part in message_parts(message)]
    return [
        parts[at : at + MAX_MESSAGES_PER_CALL] for at in range(0, len(parts), MAX_MESSAGES_PER_CALL)
    ]


def message_parts(message: PortalMessage) -> list[PortalMessage]:
    """A message whose content passes MAX_CONTENT_CHARS as the portal takes it: consecutive
    parts with its id and role, `part: {index, of}`, its tool fields with part 0 (the portal
    joins them into one message); a shorter message as itself."""
    content = message.get("content")
    if not isinstance(content, str) or len(content) <= MAX_CONTENT_CHARS:
        return [message]
    pieces = [
        content[at : at + MAX_CONTENT_CHARS] for at in range(0, len(content), MAX_CONTENT_CHARS)
    ]
    of = len(pieces)
    first = {**message, "content": pieces[0], "part": {"index": 0, "of": of}}
    rest = [
        {
            "role": message["role"],
            "id": message["id"],
            "content": piece,
            "part": {"index": index, "of": of},
        }
        for index, piece in enumerate(pieces[1:], 1)
    ]
    return [first, *rest]


class ChatOutbox:
    """One published agent's outbox, under the profile's webagents home."""

    def __init__(self, agent_id: str, profile: str | None = None) -> None:
        self.folder = chat_outbox_dir(agent_id, profile)
        self._base = self.folder.parent.parent
        self._parts = (self.folder.parent.name, self.folder.name)
        self.problems: list[str] = []

    # -- reading -------------------------------------------------------------------------------

    def state(self, session_id: str) -> OutboxFile | None:
        """The conversation's file (None when nothing was ever queued for it)."""
        with self._locked() as dir_fd:
            return self._read(dir_fd, session_id)

    def waiting(self) -> int:
        """How many calls wait to be sent (damaged files are noted in `problems`)."""
        with self._locked() as dir_fd:
            return sum(len(state["calls"]) for state in self._all(dir_fd))

    # -- writing -------------------------------------------------------------------------------

    def queue(self, session_id: str, messages: list[PortalMessage], queued: int) -> None:
        """Queue the conversation's new messages (already in the portal's shape); `queued` is
        how many of its kept messages are queued once these are."""
        with self._locked() as dir_fd:
            state = self._read(dir_fd, session_id) or _new(session_id)
            if not state["calls"]:
                state["since"] = _now()
            named = [{**message, "id": secrets.token_hex(12)} for message in messages]
            for call in portal_calls(named):
                state["calls"].append(Call(messages=call))
            state["queued"] = queued
            self._write(dir_fd, state)

    def adopt(self, session_id: str, chat_id: str, recorded: int) -> bool:
        """A chat taken from the portal as it is: `recorded` of its messages are there. False
        (and nothing changed) while calls of the conversation still wait to be sent."""
        with self._locked() as dir_fd:
            state = self._read(dir_fd, session_id) or _new(session_id)
            if state["calls"]:
                return False
            state["chatId"] = chat_id
            state["queued"] = recorded
            self._write(dir_fd, state)
            return True

    def drain(self, send: Callable[[str, str | None, Call], str]) -> int:
        """Send every waiting call in order with `send(session_id, chat_id, call) -> chat id`,
        keeping each answer before the next call; how many were sent. What `send` raises stops
        the drain (the call stays, to be sent again with its key)."""
        sent = 0
        with self._locked() as dir_fd:
            for state in sorted(self._all(dir_fd), key=lambda s: s["since"]):
                while state["calls"]:
                    call = state["calls"][0]
                    state["chatId"] = send(state["sessionId"], state["chatId"], call)
                    state["calls"].pop(0)
                    self._write(dir_fd, state)
                    sent += 1
        return sent

    # -- files ---------------------------------------------------------------------------------

    def _read(self, dir_fd: int, session_id: str) -> OutboxFile | None:
        name = _name(session_id)
        try:
            fd = open_file_at(dir_fd, name, os.O_RDONLY, where=self.folder / name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OutboxError(f"{self.folder / name} cannot be read ({exc})") from None
        with os.fdopen(fd, "rb") as file:
            data = file.read()
        try:
            state = json.loads(data)
            _check(state, session_id)
        except (ValueError, KeyError, TypeError) as exc:
            raise OutboxError(
                f"{self.folder / name} is not an outbox file of webagents ({exc}); it was left "
                "as it is: remove it to forget the turns it held"
            ) from None
        result: OutboxFile = state
        return result

    def _all(self, dir_fd: int) -> list[OutboxFile]:
        self.problems = []
        found: list[OutboxFile] = []
        for name in sorted(os.listdir(dir_fd)):
            if name.startswith(".") or not name.endswith(".json"):
                continue
            try:
                state = self._read(dir_fd, name[: -len(".json")])
            except OutboxError as exc:
                self.problems.append(str(exc))
                continue
            if state is not None:
                found.append(state)
        return found

    def _write(self, dir_fd: int, state: OutboxFile) -> None:
        data = json.dumps(state, ensure_ascii=False).encode("utf-8")
        write_at(dir_fd, _name(state["sessionId"]), data, locked=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        dir_fd = open_private_dir(self._base, self._parts, create=True)
        assert dir_fd is not None
        try:
            with exclusive(open_lock(dir_fd, self.folder / ".lock")):
                yield dir_fd
        finally:
            os.close(dir_fd)


def _name(session_id: str) -> str:
    if not is_conversation_id(session_id):
        raise OutboxError(f"{session_id!r} is not a conversation id")
    return f"{session_id}.json"


def _new(session_id: str) -> OutboxFile:
    return OutboxFile(
        format=FORMAT, sessionId=session_id, chatId=None, queued=0, since=_now(), calls=[]
    )


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _check(state: Any, session_id: str) -> None:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("not format 1")
    if state["sessionId"] != session_id:
        raise ValueError("it names another conversation")
    if not isinstance(state["chatId"], str | None) or not isinstance(state["queued"], int):
        raise TypeError("chatId or queued is of the wrong type")
    if not isinstance(state["since"], str) or not isinstance(state["calls"], list):
        raise TypeError("since or calls is of the wrong type")
    for call in state["calls"]:
        if not isinstance(call["messages"], list):
            raise TypeError("a call without messages")
