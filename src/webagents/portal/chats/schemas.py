"""What the chats API takes in (SPEC P9's shapes, camelCase where it says; its answers and
the limits of one call are the wire's: portal_wire/chats.py).

The limits are checked in the service, not here, so that a refusal says what to do (send
more calls, send a long message in parts) instead of naming a pydantic rule."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_PARTS = 10_000
# One message whole (all its parts), and a whole chat: each part rewrites the message.
MAX_MESSAGE_CHARS = 2_000_000
MAX_CHAT_CHARS = 50_000_000
ROLES = ("user", "assistant", "tool", "system")
LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 200


class Part(BaseModel):
    """Which part of a long message this is: `index` from 0, `of` parts in all."""

    model_config = ConfigDict(extra="forbid")

    index: int
    of: int


class MessageIn(BaseModel):
    # Unknown fields are refused: a field the portal would drop silently is a field lost.
    model_config = ConfigDict(extra="forbid")

    role: str
    content: str | None = None
    # The sender's id for the message: a message (or part) whose id the chat has is not
    # recorded again, so a resent call is harmless.
    id: str | None = Field(default=None, min_length=1, max_length=200)
    tool_calls: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_call_id: str | None = Field(default=None, max_length=200)
    name: str | None = Field(default=None, max_length=200)
    part: Part | None = None


class RecordIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sessionId: str = Field(min_length=1, max_length=200)
    messages: list[MessageIn]
    chatId: str | None = None
