"""All SQL of chats, scoped: made from an AccountScope, it sees that account's chats only.
Messages are reached through their chat, so every query starts from the account too."""

from __future__ import annotations

import uuid

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from ..db.tables import Chat, ChatMessage
from ..scope import AccountScope, require_scope


class Chats:
    def __init__(self, session: Session, scope: AccountScope) -> None:
        self._session = session
        self._scope = require_scope(scope)

    def _base(self) -> Select[Chat]:
        return select(Chat).where(Chat.user_id == self._scope.user_id)

    def _messages(self, chat_id: uuid.UUID) -> Select[ChatMessage]:
        return (
            select(ChatMessage)
            .join(Chat, Chat.id == ChatMessage.chat_id)
            .where(Chat.user_id == self._scope.user_id, ChatMessage.chat_id == chat_id)
        )

    def newest(self, agent_id: uuid.UUID | None, limit: int) -> list[Chat]:
        """Newest first: of one agent, or of all the account's agents."""
        query = self._base()
        if agent_id is not None:
            query = query.where(Chat.agent_id == agent_id)
        order = (Chat.updated_at.desc(), Chat.created_at.desc(), Chat.id)
        return list(self._session.scalars(query.order_by(*order).limit(limit)))

    def get(
        self, agent_id: uuid.UUID, chat_id: uuid.UUID, *, for_update: bool = False
    ) -> Chat | None:
        query = self._base().where(Chat.agent_id == agent_id, Chat.id == chat_id)
        if for_update:  # appends to one chat take turns (positions stay unique)
            query = query.with_for_update()
        return self._session.scalars(query).one_or_none()

    def of_session(self, agent_id: uuid.UUID, session_id: str) -> Chat | None:
        query = self._base().where(Chat.agent_id == agent_id, Chat.session_id == session_id)
        return self._session.scalars(query.with_for_update()).one_or_none()

    def add(self, chat: Chat) -> Chat:
        chat.user_id = self._scope.user_id
        self._session.add(chat)
        self._session.flush()
        return chat

    def messages(self, chat_id: uuid.UUID) -> list[ChatMessage]:
        """Whole messages in order (one still missing parts is not shown)."""
        query = self._messages(chat_id).where(ChatMessage.parts_received == ChatMessage.parts_total)
        return list(self._session.scalars(query.order_by(ChatMessage.position)))

    def last(self, chat_id: uuid.UUID) -> ChatMessage | None:
        query = self._messages(chat_id).order_by(ChatMessage.position.desc()).limit(1)
        return self._session.scalars(query).one_or_none()

    def with_client_id(self, chat_id: uuid.UUID, client_id: str) -> ChatMessage | None:
        query = self._messages(chat_id).where(ChatMessage.client_id == client_id)
        return self._session.scalars(query).one_or_none()

    def first_user_content(self, chat_id: uuid.UUID) -> str | None:
        query = (
            self._messages(chat_id)
            .where(
                ChatMessage.role == "user",
                ChatMessage.parts_received == ChatMessage.parts_total,
            )
            .order_by(ChatMessage.position)
            .limit(1)
        )
        found = self._session.scalars(query).one_or_none()
        return found.content if found is not None else None

    def total_chars(self, chat_id: uuid.UUID) -> int:
        """The characters of the chat's messages' content, all together."""
        query = (
            select(func.coalesce(func.sum(func.length(ChatMessage.content)), 0))
            .join(Chat, Chat.id == ChatMessage.chat_id)
            .where(Chat.user_id == self._scope.user_id, ChatMessage.chat_id == chat_id)
        )
        return int(self._session.scalar(query) or 0)

    def count_whole(self, chat_id: uuid.UUID) -> int:
        query = (
            select(func.count())
            .select_from(ChatMessage)
            .join(Chat, Chat.id == ChatMessage.chat_id)
            .where(
                Chat.user_id == self._scope.user_id,
                ChatMessage.chat_id == chat_id,
                ChatMessage.parts_received == ChatMessage.parts_total,
            )
        )
        return int(self._session.scalar(query) or 0)

    def add_message(self, chat: Chat, message: ChatMessage) -> ChatMessage:
        if chat.user_id != self._scope.user_id:
            raise PermissionError("a message is added only to a chat of this scope")
        message.chat_id = chat.id
        self._session.add(message)
        self._session.flush()
        return message
