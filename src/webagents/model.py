"""The model boundary: one abstract method (`complete`), streaming on top of it.

Messages are OpenAI Chat Completions message dicts, the format every client already speaks,
so a conversation can be kept, sent over HTTP and handed to any compatible model unchanged.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from .errors import ToolError

Message = dict[str, Any]
"""One OpenAI-style chat message: {"role": ..., "content": ..., "tool_calls": ...}."""

MAX_NESTING = 64
"""Levels of JSON arrays and objects the agent takes from outside, the outermost counted: a
request's body (server/openai_api.py) and a model's tool call arguments alike.

A Chat Completions request needs about six levels (body, messages, message, tool_calls, call,
function), a tool's arguments a few. The bound keeps every later step that walks the data
(copies, JSON encoders, the session file, a tool's validation) far from Python's recursion
limit.
"""


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


_TOO_DEEP = (
    f"arguments nest deeper than {MAX_NESTING} levels of arrays and objects, the most a tool "
    "call may; send flatter arguments"
)


def parse_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as a dict; ToolError with a model-readable reason otherwise.

    Arguments are their JSON text, or (from a model that hands them over so) the object
    itself, taken as that object through the same checks."""
    given: object = call.arguments
    if isinstance(given, dict):
        try:
            given = json.dumps(given)
        except RecursionError:
            raise ToolError(_TOO_DEEP) from None
        except (TypeError, ValueError):  # a set, a circular reference: no JSON object
            raise ToolError(
                "arguments must be a JSON object; these hold values JSON has not"
            ) from None
    if not isinstance(given, str):
        raise ToolError(f"arguments must be a JSON object or its text, not {json_kind(given)}")
    text = given.strip() or "{}"
    # Counted before parsing: json.loads recurses once a level and fails with RecursionError
    # (not a JSON error) on a few thousand levels, which a model can write.
    opened = text.count("[") + text.count("{")  # a bound on the depth, found quicker
    if opened > MAX_NESTING and json_nesting(text) > MAX_NESTING:
        raise ToolError(_TOO_DEEP)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(value, dict):
        raise ToolError("arguments must be a JSON object")
    return value


def json_kind(value: object) -> str:
    """What a JSON value is, as an error names it: "a string", "null", "an object"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"  # not JSON at all: from a Model written in Python


# A JSON string, to the end of the text when it is not closed (a parser stops there anyway):
# never failing, the search stays linear however the quotes fall.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_JSON_BRACKET = re.compile(r"[][{}]")
_LEVEL = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_nesting(text: str) -> int:
    """How many levels of arrays and objects a JSON text nests, counted without parsing it
    (so without recursion): never fewer than a parser meets before it finishes or fails."""
    brackets = _JSON_BRACKET.findall(_JSON_STRING.sub("", text))
    return max(accumulate(map(_LEVEL.__getitem__, brackets)), default=0)


def unicode_text(text: str) -> str:
    """`text` as Unicode: each lone surrogate (half of a UTF-16 pair, which a JSON `\\ud800`
    escape can give but no UTF-8 can hold) replaced with U+FFFD, and a pair that arrived as
    its two halves joined into the character it stands for."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def estimate_tokens(messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
    """A rough token count (about four characters a token), for when no usage is reported."""
    chars = len(json.dumps(messages, ensure_ascii=False))
    if tools:
        chars += len(json.dumps(tools, ensure_ascii=False))
    return max(1, chars // 4)
