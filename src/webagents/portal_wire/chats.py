"""The chats API's answers (SPEC P9's shapes, camelCase where it says)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

MAX_MESSAGES_PER_CALL = 50
MAX_CONTENT_CHARS = 100_000
"""What one call that records turns may carry (P9): a longer conversation takes more calls,
a longer message goes in parts."""


class Recorded(BaseModel):
    """`POST .../conversations`: the chat the turns went to."""

    chatId: str


class ConversationOut(BaseModel):
    chatId: str
    sessionId: str
    updatedAt: datetime
    messageCount: int
    preview: str


class Conversations(BaseModel):
    """`GET .../conversations`, newest first."""

    conversations: list[ConversationOut]


class ChatMessages(BaseModel):
    """Messages in order: `role` and `content`, and `id`, `tool_calls`, `tool_call_id`,
    `name` where they were given (absent otherwise)."""

    messages: list[dict[str, Any]]
