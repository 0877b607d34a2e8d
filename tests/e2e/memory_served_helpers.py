"""Driving a served agent's memory tools in tests, and reading its index."""

from __future__ import annotations

import json
from typing import Any

from tests.openai_callers import caller
from webagents.model import ModelRequest
from webagents.testing import Reply, call, call_unoffered

from .serving import Process


def _driver(request: ModelRequest) -> Any:
    """`CALL tool {json}` calls a tool and answers with its result; `PROMPT` answers with the
    system prompt; anything else is echoed."""
    last = request.messages[-1]
    if last["role"] == "tool":
        return Reply("RESULT " + last["content"])
    text = last["content"]
    if text.startswith("CALL "):
        _, tool, arguments = text.split(" ", 2)
        offered = {t["function"]["name"] for t in request.tools}
        if tool not in offered:  # a confused model calls what it was not offered
            return call_unoffered(tool, json.loads(arguments))
        return call(tool, json.loads(arguments))
    if text == "PROMPT":
        return Reply(request.messages[0]["content"])
    return Reply("echo " + text)


def say(
    process: Process,
    key: str,
    text: str,
    session: str | None = None,
    history: list[dict[str, str]] | None = None,
) -> str:
    client = caller(f"{process.url}/v1", key, max_retries=0)
    messages = [*(history or []), {"role": "user", "content": text}]
    reply = client.chat.completions.create(
        model="keeper",
        messages=messages,  # type: ignore[arg-type]
        metadata={"session_id": session} if session else None,  # type: ignore[arg-type]
    )
    return reply.choices[0].message.content or ""


def tool(process: Process, credential: str, name: str, **arguments: Any) -> Any:
    answer = say(process, credential, f"CALL {name} {json.dumps(arguments)}")
    assert answer.startswith("RESULT "), answer
    result = answer.removeprefix("RESULT ")
    return json.loads(result) if not result.startswith("Error") else result


def index_lines(prompt: str) -> list[str]:
    """The lines of the ## Memory block after its header and two lines of introduction."""
    lines = prompt.splitlines()
    return lines[lines.index("## Memory") + 3 :]
