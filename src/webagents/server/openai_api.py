"""The request side of the Chat Completions API: what a client may send, checked strictly.

The body is read as OpenAI defines it. Options that only steer a model (temperature, top_p,
...) are accepted and left to the agent's own settings, and the reply names them
(reply_headers.py); what the agent cannot honour (client tools, several choices, images) is
refused with a 400 that says so.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..context import is_conversation_id
from ..errors import validation_problems
from ..model import MAX_NESTING, Message
from .api_errors import ApiError


def check_session_id(value: str) -> str:
    """S7: 1-128 characters of A-Z a-z 0-9 . _ - (and never only dots, nor `..`)."""
    if not is_conversation_id(value):
        raise ValueError(
            "metadata.session_id must be 1-128 characters of A-Z a-z 0-9 . _ - "
            "(and not contain '..')"
        )
    return value


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str | None:
        if self.content is None or isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise ValueError(f"only text content is supported, not {part.type!r} parts")
            texts.append(part.text)
        return "".join(texts)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class AgentRequest(BaseModel):
    """What every request to a served agent checks, whichever API it comes by (Chat
    Completions, Responses): the client adds no tools, and a `metadata.session_id` is a
    conversation id. The fields are the subclasses' own, in their own order."""

    @field_validator("tools", check_fields=False)
    @classmethod
    def _no_client_tools(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value:
            raise ValueError("the agent runs its own tools; a request cannot add tools")
        return value

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _session_id(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value and "session_id" in value:
            check_session_id(value["session_id"])
        return value


class ChatRequest(AgentRequest):
    """POST /v1/chat/completions, as OpenAI defines it (options for the model are not applied:
    they are the agent's own; the reply's X-Webagents-Ignored header names them)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, str] | None = None
    n: int | None = None
    tools: list[dict[str, Any]] | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError("an agent gives one answer: n must be 1")
        return value

    @property
    def session_id(self) -> str | None:
        return (self.metadata or {}).get("session_id")


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or an ApiError(400) that says what is wrong."""
    # orjson refuses what could not be sent on or kept later: invalid UTF-8, lone surrogates,
    # nesting deeper than 1024; numbers beyond 64 bits become floats.
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", "invalid_body")
    check_nesting(data)
    return data


def check_nesting(data: dict[str, Any], limit: int = MAX_NESTING) -> None:
    """ApiError(400) naming the limit when `data` nests deeper than `limit` levels (the body
    itself is level 1; tool call arguments travel as a JSON string, bounded on their own).

    Walked with a list, not recursion, so that the check itself cannot run out of stack.
    """
    pending: list[tuple[Any, int, tuple[str, ...]]] = [(data, 1, ())]
    while pending:
        value, depth, where = pending.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if not isinstance(item, dict | list):
                continue
            path = (*where, str(key)) if len(where) < 6 else where
            if depth + 1 > limit:
                shown = ".".join(path) + (".…" if len(where) >= 6 else "")
                raise ApiError(
                    400,
                    f"invalid request: {shown}: JSON nests deeper than {limit} levels of arrays "
                    f"and objects, the most a request may; send flatter data (tool call "
                    "arguments are a JSON string)",
                    "too_deep",
                )
            pending.append((item, depth + 1, path))


def requested_model(data: dict[str, Any]) -> str:
    """The body's `model`, read before the rest so that the agent can verify the caller first."""
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "invalid request: model: the agent's name is required", "invalid_request"
        )
    return model


def validate_request(data: dict[str, Any]) -> ChatRequest:
    """The whole request checked, or an ApiError(400) naming every problem."""
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(
            exc, unknown=lambda where: f"{where}: unknown field", wrong=lambda w, m: f"{w}: {m}"
        )
        raise ApiError(400, f"invalid request: {problems}", "invalid_request") from None


_CALLER_SYSTEM = "[The caller's own {role} message; it is the caller's text, not the agent's]\n"


def conversation_messages(request: ChatRequest) -> list[Message]:
    """The request's messages as the agent's conversation, the new user message last.

    The agent's system prompt is its own and stays byte-identical (R5): a system or developer
    message the client sends becomes a user message framed as the caller's, so it carries no
    more weight than the caller does (and the reply's X-Webagents-Client-System says so).
    """
    messages: list[Message] = []
    for index, message in enumerate(request.messages):
        try:
            text = message.text()
        except ValueError as exc:
            raise ApiError(400, f"messages.{index}: {exc}", "unsupported_content") from None
        if message.role in ("system", "developer"):
            messages.append(
                {"role": "user", "content": _CALLER_SYSTEM.format(role=message.role) + (text or "")}
            )
        elif message.role == "user":
            messages.append({"role": "user", "content": text or ""})
        elif message.role == "assistant":
            kept: Message = {"role": "assistant", "content": text}
            if message.tool_calls:
                kept["tool_calls"] = message.tool_calls
            messages.append(kept)
        else:
            messages.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text or ""}
            )
    if request.messages[-1].role != "user":
        raise ApiError(400, "the last message must be the user's (role: user)", "invalid_messages")
    return messages
