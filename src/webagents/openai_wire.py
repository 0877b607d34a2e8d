"""The Chat Completions wire format: response bodies and SSE chunks, as OpenAI sends them.

Shared by the served agent (`webagents serve`) and the scripted model server of
`webagents.testing`, so both speak exactly what the official client parses.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .model import ModelResponse, ToolCall, Usage

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Completion:
    """The identity of one completion: every chunk of a stream repeats it."""

    model: str
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def body(self, response: ModelResponse) -> dict[str, Any]:
        """A whole `chat.completion` object."""
        message = response.to_message()
        message["refusal"] = None
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": response.finish_reason or "stop",
                }
            ],
            "usage": (response.usage or Usage()).as_dict(),
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        """One `chat.completion.chunk` SSE event."""
        return self._event(
            {
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ]
            }
        )

    def usage_chunk(self, usage: Usage) -> bytes:
        """The final chunk a client asks for with stream_options.include_usage."""
        return self._event({"choices": [], "usage": usage.as_dict()})

    def tool_call_chunks(self, index: int, call: ToolCall) -> list[bytes]:
        return [
            self.chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            ),
            self.chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}
            ),
        ]

    def _event(self, payload: dict[str, Any]) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            **payload,
        }
        return b"data: " + json_bytes(body) + b"\n\n"


def json_bytes(value: Any) -> bytes:
    """`value` as JSON in UTF-8. Text that is not Unicode (a lone surrogate, which no UTF-8
    can hold) goes as its JSON escape, `\\ud800`, as a model endpoint sends it; only inside a
    JSON string can such a character be, so the escape is always where JSON allows one."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace")


def error_body(message: str, type: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: {"error": {"message", "type", "code"}}."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


def error_event(message: str, type: str, code: str | None = None) -> bytes:
    """An error after a stream has begun: the status is already sent, so it goes in the stream."""
    return f"data: {json.dumps(error_body(message, type, code))}\n\n".encode()
