"""The model boundary: one abstract method (`complete`), streaming on top of it.

Messages are OpenAI Chat Completions message dicts, the format every client already speaks,
so a conversation can be kept, sent over HTTP and handed to any compatible model unchanged.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .errors import ToolError

Message = dict[str, Any]
"""One OpenAI-style chat message: {"role": ..., "content": ..., "tool_calls": ...}."""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments exactly as the model sent them: a JSON object, or not."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: list[Message]
    """The whole conversation as sent, the system prompt first."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool schemas in OpenAI's {"type": "function", "function": {...}} form."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    """What the endpoint reported; None when it reported nothing."""
    finish_reason: str | None = None

    def to_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        return message


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text as it streams."""

    text: str


class Model(ABC):
    """A chat model. Subclasses implement `complete`; `stream` may be overridden."""

    name: str = "model"

    @abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One model call: the next assistant message for the conversation in `request`."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        """Text deltas as they arrive, then the whole response as the last item."""
        response = await self.complete(request)
        if response.content:
            yield TextDelta(response.content)
        yield response

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most models hold nothing
        """Release connections; the agent calls it when it is closed."""


def parse_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as a dict; ToolError with a model-readable reason otherwise."""
    text = call.arguments.strip() or "{}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise ToolError("arguments must be a JSON object")
    return value


def estimate_tokens(messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
    """A rough token count (about four characters a token), for when no usage is reported."""
    chars = len(json.dumps(messages, ensure_ascii=False))
    if tools:
        chars += len(json.dumps(tools, ensure_ascii=False))
    return max(1, chars // 4)
