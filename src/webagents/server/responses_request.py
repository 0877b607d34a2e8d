"""The request side of OpenAI's Responses API (`POST /v1/responses`), checked strictly.

`input` is a string or a list of message items with text content; what the agent cannot
honour (client tools, images, function call outputs) is a 400 that says so. The agent's
system prompt is its own and stays byte-identical turn to turn (R5): the client's
`instructions`, and its system or developer items, become user messages framed as the
caller's text, added before the input, so they carry no more weight than the caller does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import validation_problems
from ..model import Message
from .api_errors import ApiError
from .openai_api import AgentRequest, check_session_id

_FRAMED = "[The caller's own {what}; it is the caller's text, not the agent's]\n"
_TEXT_PARTS = ("input_text", "output_text", "text")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class InputItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.type not in _TEXT_PARTS or part.text is None:
                raise ValueError(f"only text content is supported, not {part.type!r} parts")
            texts.append(part.text)
        return "".join(texts)


class ConversationRef(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str


class ResponsesRequest(AgentRequest):
    """POST /v1/responses, as OpenAI defines it (options that steer a model are the agent's
    own and are not applied)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(default=None, min_length=1)
    input: str | list[InputItem]
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    conversation: str | ConversationRef | None = None
    store: bool = True
    stream: bool = False
    metadata: dict[str, str] | None = None
    tools: list[dict[str, Any]] | None = None

    @property
    def conversation_id(self) -> str | None:
        """The kept conversation the request names (`conversation`, or metadata.session_id
        as for Chat Completions)."""
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation or (self.metadata or {}).get("session_id")


def validate_responses_request(data: dict[str, Any]) -> ResponsesRequest:
    """The whole request checked, or an ApiError(400) naming every problem."""
    try:
        request = ResponsesRequest.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(
            exc, unknown=lambda where: f"{where}: unknown field", wrong=lambda w, m: f"{w}: {m}"
        )
        raise ApiError(400, f"invalid request: {problems}", "invalid_request") from None
    named = request.conversation
    named_id = named.id if isinstance(named, ConversationRef) else named
    session_id = (request.metadata or {}).get("session_id")
    if request.previous_response_id is not None and (named_id or session_id):
        raise ApiError(
            400,
            "invalid request: send previous_response_id or conversation (or "
            "metadata.session_id), not both: a response already names its conversation",
            "invalid_request",
        )
    if not request.store and (request.previous_response_id or named_id or session_id):
        # Whichever field names it (metadata.session_id too): what the turn added would not
        # be kept, so it cannot go on a kept conversation (docs/responses.md).
        raise ApiError(
            400,
            "store: false cannot continue a kept conversation (what it added would not be "
            "kept); send store: true, or the whole conversation as input without an id",
            "invalid_request",
        )
    if named_id is not None and session_id is not None and named_id != session_id:
        raise ApiError(
            400,
            "invalid request: conversation and metadata.session_id name different "
            "conversations; send one",
            "invalid_request",
        )
    if named_id is not None:
        try:
            check_session_id(named_id)
        except ValueError:
            raise ApiError(
                400,
                "invalid request: conversation: a conversation id is 1-128 characters of "
                "A-Z a-z 0-9 . _ - (POST /v1/conversations makes one)",
                "invalid_request",
            ) from None
    return request


def input_messages(request: ResponsesRequest) -> list[Message]:
    """The turn's new messages, the user's input last: the framed instructions first, then
    the input items in order."""
    messages: list[Message] = []
    if request.instructions:
        messages.append(_framed("instructions for this turn", request.instructions))
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
        return messages
    if not request.input:
        raise ApiError(400, "invalid request: input: give at least one message", "invalid_input")
    for index, item in enumerate(request.input):
        try:
            text = item.text()
        except ValueError as exc:
            raise ApiError(400, f"input.{index}: {exc}", "unsupported_content") from None
        if item.role in ("system", "developer"):
            messages.append(_framed(f"{item.role} message", text))
        else:
            messages.append({"role": item.role, "content": text})
    if request.input[-1].role != "user":
        raise ApiError(400, "the last input item must be the user's (role: user)", "invalid_input")
    return messages


def _framed(what: str, text: str) -> Message:
    return {"role": "user", "content": _FRAMED.format(what=what) + text}
