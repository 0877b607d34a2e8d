"""The offline model behind `--offline` and `make demo`: canned answers, no network, no key.

It answers in sentences that say it is offline, keeps a note when told "remember that ..."
and lists them when asked "what do you remember" (through the memory skill's tools, so the
demo shows them at work), and summarises a conversation when compaction asks. A part of the
runtime (the CLI uses it), not of the test fakes in `webagents.testing`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from .compaction import SUMMARISER
from .model import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
    estimate_tokens,
)

OFFLINE_NOTICE = (
    "offline: replies come from the scripted model in webagents.offline, not a real one "
    "(set OPENAI_API_KEY or OPENAI_BASE_URL to talk to a real model)"
)
OFFLINE_REMEMBER = "remember that"
"""A message starting so makes the offline model keep the rest as a note (memory_write)."""
OFFLINE_RECALL = "what do you remember"
"""This message makes the offline model list the notes (memory_list)."""
OFFLINE_MEMORY_HINT = (
    f'memory works offline too: say "{OFFLINE_REMEMBER} <something>", '
    f'then "{OFFLINE_RECALL}" (also in a new conversation)'
)
"""Said beside the notice for an agent with the memory skill, so the demo shows it at work."""


def pieces(text: str) -> list[str]:
    """Split text the way a streaming model sends it: a few characters at a time."""
    return re.findall(r"\S*\s*", text)[:-1] or [text]


def offline_reply(request: ModelRequest, call_id: str = "call_offline") -> ModelResponse:
    """The offline model's answer to a request (no usage: the caller estimates it)."""
    first: Message = request.messages[0] if request.messages else {}
    if str(first.get("content") or "").startswith(SUMMARISER):  # asked for a summary
        record = json.loads(str(request.messages[-1]["content"]).split("\n", 1)[1])
        said = [str(m["content"])[:60] for m in record["conversation"] if m.get("content")]
        return _text("(offline summary) Earlier, it was said: " + "; ".join(said[:5])[:300])
    last: Message = request.messages[-1] if request.messages else {}
    if last.get("role") == "tool":
        return _text(f"Done. The tool said: {str(last.get('content'))[:300]}")
    text = str(last.get("content") or "").strip()
    offered = [t["function"]["name"] for t in request.tools if t.get("type") == "function"]
    remember = re.match(r"(?i)^remember(?: that)?\s+(.+)$", text)
    if remember and "memory_write" in offered:
        content = remember.group(1)
        words = re.findall(r"[a-z0-9]+", content.lower())[:3] or ["note"]
        note = {"key": "-".join(words), "content": content, "description": content[:80]}
        return _calling(ToolCall(call_id, "memory_write", json.dumps(note)))
    if re.match(r"(?i)^what do you (remember|know)", text) and "memory_list" in offered:
        return _calling(ToolCall(call_id, "memory_list", "{}"))
    turns = sum(1 for m in request.messages if m.get("role") == "user")
    return _text(
        f"(offline scripted model, turn {turns}) You said: {text!r}. I can't think offline, "
        "but everything around me works: the chat, the slash commands and my skills' tools."
    )


def _text(text: str) -> ModelResponse:
    return ModelResponse(text, (), None, "stop")


def _calling(call: ToolCall) -> ModelResponse:
    return ModelResponse(None, (call,), None, "tool_calls")


class OfflineModel(Model):
    """The demo's model: answers in canned sentences and uses a few tools when asked."""

    name = "offline-scripted"

    def __init__(self) -> None:
        self._calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self._calls += 1
        answer = offline_reply(request, call_id=f"call_{self._calls}_0")
        usage = Usage(
            estimate_tokens(request.messages, request.tools),
            max(1, len(answer.content or "") // 4 + 10 * len(answer.tool_calls)),
        )
        return ModelResponse(answer.content, answer.tool_calls, usage, answer.finish_reason)

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        response = await self.complete(request)
        for piece in pieces(response.content or ""):
            yield TextDelta(piece)
            await asyncio.sleep(0)  # a turn of the loop per piece, as a network would give
        yield response
