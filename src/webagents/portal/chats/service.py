"""The rules of chats (P9): turns are recorded as given, in order, without making the agent
answer and without notifying anyone; a chat is one agent's and one user's; a resent call
records nothing twice; a long message comes in parts and is read back whole.

Idempotence is by the sender's message ids: a message (or a part of one) whose id the chat
has already is not recorded again. Messages without an id are appended every time they are
sent (P9's plain `{role, content}`); a client that may resend gives ids.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ...portal_wire.chats import MAX_CONTENT_CHARS, MAX_MESSAGES_PER_CALL, ConversationOut
from ..agents.repository import Agents
from ..agents.service import get_agent
from ..db.tables import Agent, Chat, ChatMessage
from ..errors import BadInput, Conflict, NotFound, PortalError
from ..scope import AccountScope
from ..storable import check_storable as _check_text
from ..storable import check_storable_json, within_depth
from .repository import Chats
from .schemas import (
    MAX_CHAT_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_PARTS,
    ROLES,
    MessageIn,
    RecordIn,
)

PREVIEW_CHARS = 120


class TooLarge(PortalError):
    status = 413
    code = "message_too_long"


def record(db: Session, scope: AccountScope, agent_id: str, given: RecordIn) -> str:
    """Append the call's messages to the chat (found by chatId, else by sessionId, else
    made); the chat's id."""
    agent = get_agent(db, scope, agent_id)
    _check_call(given)
    chats = Chats(db, scope)
    chat = _chat_for(db, chats, agent, given)
    _check_room(chats, chat, given)
    changed = False
    for message in given.messages:
        changed = _record_one(chats, chat, message) or changed
    if changed:
        chat.message_count = chats.count_whole(chat.id)
        chat.preview = preview_of(chats.first_user_content(chat.id))
        chat.updated_at = datetime.now(UTC)
        db.flush()
    return str(chat.id)


def conversations(
    db: Session, scope: AccountScope, agent_id: str, limit: int
) -> list[ConversationOut]:
    agent = get_agent(db, scope, agent_id)
    return [_conversation_out(chat) for chat in Chats(db, scope).newest(agent.id, limit)]


def messages(db: Session, scope: AccountScope, agent_id: str, chat_id: str) -> list[dict[str, Any]]:
    agent = get_agent(db, scope, agent_id)
    chats = Chats(db, scope)
    chat = _chat(chats, agent, chat_id)
    return [message_out(message) for message in chats.messages(chat.id)]


@dataclass(frozen=True)
class ChatListed:
    """A chat in the pages' lists, with its agent's name."""

    chat: ConversationOut
    agent_id: uuid.UUID
    agent_name: str


def all_conversations(db: Session, scope: AccountScope, limit: int) -> list[ChatListed]:
    """The account's chats with all its agents, newest first."""
    names = {agent.id: agent.name for agent in Agents(db, scope).all()}
    return [
        ChatListed(_conversation_out(chat), chat.agent_id, names.get(chat.agent_id, "?"))
        for chat in Chats(db, scope).newest(None, limit)
    ]


def chat_of(
    db: Session, scope: AccountScope, agent_id: str, chat_id: str
) -> tuple[Agent, Chat, list[dict[str, Any]]]:
    """For the pages: the agent, the chat and its messages, or the 404 of either."""
    agent = get_agent(db, scope, agent_id)
    chats = Chats(db, scope)
    chat = _chat(chats, agent, chat_id)
    return agent, chat, [message_out(message) for message in chats.messages(chat.id)]


def message_out(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.client_id is not None:
        out["id"] = message.client_id
    # A value kept before the depth bound of storable (tool_calls nested hundreds deep) is
    # left out: no writer of the answer could encode it, and the rest of the chat still reads.
    out.update((key, value) for key, value in message.extra.items() if within_depth(value))
    return out


def preview_of(content: str | None) -> str:
    text = " ".join((content or "").split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _conversation_out(chat: Chat) -> ConversationOut:
    return ConversationOut(
        chatId=str(chat.id),
        sessionId=chat.session_id,
        updatedAt=chat.updated_at,
        messageCount=chat.message_count,
        preview=chat.preview,
    )


def _no_chat(chat_id: str) -> NotFound:
    return NotFound(
        f"you have no chat {chat_id!r} with this agent: see your chats with "
        "GET /api/agents/{id}/conversations, or leave chatId out to record by sessionId",
        code="chat_not_found",
    )


def _chat(chats: Chats, agent: Agent, chat_id: str, *, for_update: bool = False) -> Chat:
    try:
        wanted = uuid.UUID(chat_id)
    except ValueError:
        raise _no_chat(chat_id) from None
    chat = chats.get(agent.id, wanted, for_update=for_update)
    if chat is None:
        raise _no_chat(chat_id)
    return chat


def _chat_for(db: Session, chats: Chats, agent: Agent, given: RecordIn) -> Chat:
    """The chat a call appends to: by chatId (the sessionId is then only a label), else the
    one of this sessionId, else a new one."""
    if given.chatId is not None:
        return _chat(chats, agent, given.chatId, for_update=True)
    found = chats.of_session(agent.id, given.sessionId)
    if found is not None:
        return found
    now = datetime.now(UTC)
    try:
        with db.begin_nested():
            return chats.add(
                Chat(agent_id=agent.id, session_id=given.sessionId, created_at=now, updated_at=now)
            )
    except IntegrityError:  # another call made it first: append to that one
        made = chats.of_session(agent.id, given.sessionId)
        if made is None:
            raise
        return made


def _check_room(chats: Chats, chat: Chat, given: RecordIn) -> None:
    """A chat holds at most MAX_CHAT_CHARS (counting what this call brings, resends too)."""
    adding = sum(len(m.content or "") for m in given.messages)
    held = chats.total_chars(chat.id)
    if held + adding > MAX_CHAT_CHARS:
        raise TooLarge(
            f"this chat holds {held:,} characters; with this call's {adding:,} it would pass "
            f"the {MAX_CHAT_CHARS:,} a chat may hold: start a new chat (a new sessionId)",
            code="chat_too_long",
        )


def _check_call(given: RecordIn) -> None:
    _check_text("sessionId", given.sessionId)
    count = len(given.messages)
    if count == 0:
        raise BadInput("messages is empty: send at least one message", code="no_messages")
    if count > MAX_MESSAGES_PER_CALL:
        raise BadInput(
            f"{count} messages in one call; at most {MAX_MESSAGES_PER_CALL} a call: send the "
            "rest in more calls (they append to the same chat, by chatId or sessionId)",
            code="too_many_messages",
        )
    for index, message in enumerate(given.messages):
        _check_message(index, message)


def _check_message(index: int, message: MessageIn) -> None:
    where = f"messages[{index}]"
    if message.role not in ROLES:
        raise BadInput(
            f"{where}.role is {message.role!r}: a chat message is one of {', '.join(ROLES)}",
            code="bad_role",
        )
    for name in ("content", "id", "tool_call_id", "name"):
        _check_text(f"{where}.{name}", getattr(message, name))
    if message.content is not None and len(message.content) > MAX_CONTENT_CHARS:
        raise TooLarge(
            f"{where}.content has {len(message.content):,} characters; at most "
            f"{MAX_CONTENT_CHARS:,} a message in one call: send a longer message in parts "
            '(each with the same id and "part": {"index": 0, 1, ..., "of": parts}), over '
            "more calls if needed; it is read back whole"
        )
    if message.tool_calls is not None:
        if message.role != "assistant":
            raise BadInput(f"{where}: only an assistant message has tool_calls", code="bad_tool")
        check_storable_json(f"{where}.tool_calls", message.tool_calls)
        size = len(json.dumps(message.tool_calls, ensure_ascii=False))
        if size > MAX_CONTENT_CHARS:
            raise TooLarge(
                f"{where}.tool_calls is {size:,} characters of JSON; at most "
                f"{MAX_CONTENT_CHARS:,}: shorten the arguments"
            )
    if message.tool_call_id is not None and message.role != "tool":
        raise BadInput(f"{where}: only a tool message has tool_call_id", code="bad_tool")
    if message.content is None and not message.tool_calls:
        raise BadInput(
            f"{where} is empty: give content (a string), or tool_calls", code="empty_message"
        )
    if message.part is not None:
        _check_part(where, message)


def _check_part(where: str, message: MessageIn) -> None:
    part = message.part
    assert part is not None
    if message.id is None:
        raise BadInput(
            f"{where} is a part without an id: give every part of a message the same id",
            code="bad_part",
        )
    if not 1 <= part.of <= MAX_PARTS or not 0 <= part.index < part.of:
        raise BadInput(
            f"{where}.part is index {part.index} of {part.of}: index counts from 0 and is "
            f"below of, which is 1 to {MAX_PARTS}",
            code="bad_part",
        )
    if message.content is None:
        raise BadInput(f"{where} is a part without content", code="bad_part")
    if part.index > 0 and (message.tool_calls or message.tool_call_id or message.name):
        raise BadInput(
            f"{where}: tool_calls, tool_call_id and name go with part 0 of a message",
            code="bad_part",
        )


def _extra(message: MessageIn) -> dict[str, Any]:
    fields = {
        "tool_calls": message.tool_calls,
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _record_one(chats: Chats, chat: Chat, message: MessageIn) -> bool:
    """Record one message or part; False when the chat has it already (a resent call)."""
    if message.id is not None:
        existing = chats.with_client_id(chat.id, message.id)
        if existing is not None:
            return _again(existing, message)
    last = chats.last(chat.id)
    if last is not None and last.parts_received < last.parts_total:
        raise Conflict(
            f"message {last.client_id!r} has {last.parts_received} of its {last.parts_total} "
            f"parts: send part {last.parts_received} (and the rest) before another message",
            code="message_incomplete",
        )
    if message.part is not None and message.part.index != 0:
        raise BadInput(
            f"part {message.part.index} of message {message.id!r} came before its part 0: "
            "send the parts of a message in order",
            code="part_out_of_order",
        )
    chats.add_message(
        chat,
        ChatMessage(
            position=last.position + 1 if last is not None else 0,
            client_id=message.id,
            role=message.role,
            content=message.content,
            extra=_extra(message),
            parts_received=1,
            parts_total=message.part.of if message.part is not None else 1,
            created_at=datetime.now(UTC),
        ),
    )
    return True


def _again(existing: ChatMessage, message: MessageIn) -> bool:
    """A message whose id the chat has: a resend (nothing to do), the next part of it, or a
    different message under a used id (refused: it would be lost silently)."""
    reused = Conflict(
        f"message id {message.id!r} is recorded in this chat already with other content: "
        "give each message its own id",
        code="message_id_reused",
    )
    if existing.role != message.role:
        raise reused
    if message.part is None:
        if existing.parts_total != 1 or (existing.content, existing.extra) != (
            message.content,
            _extra(message),
        ):
            raise reused
        return False
    if message.part.of != existing.parts_total:
        raise Conflict(
            f"message {message.id!r} was begun in {existing.parts_total} parts, not "
            f"{message.part.of}: send it in the same number of parts",
            code="message_id_reused",
        )
    if message.part.index < existing.parts_received:
        return False
    if message.part.index > existing.parts_received:
        raise BadInput(
            f"part {message.part.index} of message {message.id!r} came before its part "
            f"{existing.parts_received}: send the parts of a message in order",
            code="part_out_of_order",
        )
    grown = len(existing.content or "") + len(message.content or "")
    if grown > MAX_MESSAGE_CHARS:
        raise TooLarge(
            f"message {message.id!r} would be {grown:,} characters with part "
            f"{message.part.index}; a message is at most {MAX_MESSAGE_CHARS:,} characters "
            "whole: send the rest as another message"
        )
    existing.content = (existing.content or "") + (message.content or "")
    existing.parts_received += 1
    return True
