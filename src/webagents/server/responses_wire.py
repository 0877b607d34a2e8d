"""The answer side of OpenAI's Responses API: `response` objects, their items, and the typed
server-sent events of a streamed one, in the shapes the official clients parse."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import Message, Usage
from .api_errors import ApiError


@dataclass
class ResponseShape:
    """What every form of one response says about it, whatever its status."""

    id: str
    model: str
    store: bool
    previous_response_id: str | None = None
    conversation_id: str | None = None
    instructions: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: int = field(default_factory=lambda: int(time.time()))
    item_id: str = field(default_factory=lambda: f"msg_{secrets.token_hex(16)}")

    def body(
        self,
        status: str,
        text: str | None = None,
        usage: Usage | None = None,
        error: ApiError | None = None,
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": [] if text is None else [self.message(text, "completed")],
            "output_text": text or "",
            "error": None if error is None else failure(error),
            "incomplete_details": None,
            "instructions": self.instructions,
            "metadata": self.metadata,
            "parallel_tool_calls": False,
            "temperature": None,
            "top_p": None,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "previous_response_id": self.previous_response_id,
            "conversation": None if self.conversation_id is None else {"id": self.conversation_id},
            "store": self.store,
            "usage": None if usage is None else usage_body(usage),
        }

    def message(self, text: str | None, status: str) -> dict[str, Any]:
        """The one output item: the agent's reply (its tool calls stay inside the agent)."""
        return {
            "type": "message",
            "id": self.item_id,
            "role": "assistant",
            "status": status,
            "content": [] if text is None else [output_text(text)],
        }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def failure(error: ApiError) -> dict[str, str]:
    """A failed response's `error` (OpenAI's codes for it are few: the message says more)."""
    code = "rate_limit_exceeded" if error.status == 429 else "server_error"
    return {"code": code, "message": error.message}


def message_item(index: int, message: Message) -> dict[str, Any] | None:
    """A kept message as a conversation item (None for what stays inside the agent: tool
    calls and their results)."""
    role = message.get("role")
    content = message.get("content")
    if role not in ("user", "assistant") or not isinstance(content, str):
        return None
    part = output_text(content) if role == "assistant" else {"type": "input_text", "text": content}
    return {
        "type": "message",
        "id": f"msg_{index}",
        "role": role,
        "status": "completed",
        "content": [part],
    }


def item_list(
    messages: Sequence[Message], first: int, *, after: str | None, limit: int, order: str
) -> dict[str, Any]:
    """A page of items, as the clients' cursor pages read it (`after`: the last item's id
    of the previous page). `first`: the index of `messages[0]` in its conversation."""
    items = [item for i, m in enumerate(messages) if (item := message_item(first + i, m))]
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else "",
        "last_id": page[-1]["id"] if page else "",
        "has_more": len(items) > limit,
    }


class Events:
    """A streamed response's events, numbered in the order they are sent."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self._sequence = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    def opening(self) -> list[bytes]:
        begun = self.shape.body("in_progress")
        return [
            self.event("response.created", response=begun),
            self.event("response.in_progress", response=begun),
            self.event(
                "response.output_item.added",
                output_index=0,
                item=self.shape.message(None, "in_progress"),
            ),
            self.event("response.content_part.added", **self._where(), part=output_text("")),
        ]

    def delta(self, text: str) -> bytes:
        return self.event("response.output_text.delta", **self._where(), delta=text, logprobs=[])

    def closing(self, text: str, usage: Usage) -> list[bytes]:
        return [
            self.event("response.output_text.done", **self._where(), text=text, logprobs=[]),
            self.event("response.content_part.done", **self._where(), part=output_text(text)),
            self.event(
                "response.output_item.done",
                output_index=0,
                item=self.shape.message(text, "completed"),
            ),
            self.event("response.completed", response=self.shape.body("completed", text, usage)),
        ]

    def failed(self, error: ApiError) -> bytes:
        return self.event("response.failed", response=self.shape.body("failed", error=error))

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.shape.item_id, "output_index": 0, "content_index": 0}
