"""The wire between the portal and an agent: JSON text frames with a `type` (docs/portal.md,
"Portal Connect"). The frames both sides read are portal_wire/connect.py's; built here."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from ...portal_wire.connect import ErrorFrame, Hello, MemoryChanged

# A bad or missing agent key when the handshake could not be refused before the upgrade.
CLOSE_UNAUTHORIZED = 4401
# The largest WebSocket message the portal takes from an agent (uvicorn closes with 1009).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
CLOSE_TOO_MANY = 4429  # the agent holds as many connections as the portal allows
# Frames of a reply, from the agent; `error` also comes from the portal itself.
REPLY_TYPES = frozenset({"start", "data", "end", "error"})


def hello(agent_id: uuid.UUID, agent_name: str, public_url: str, connection_id: uuid.UUID) -> str:
    frame = Hello(
        type="hello",
        agent_id=str(agent_id),
        agent_name=agent_name,
        public_url=public_url,
        connection_id=str(connection_id),
    )
    return _dump(frame.model_dump())


@dataclass(frozen=True, slots=True)
class Call:
    """What a relayed request asks of the agent: `method` at `path` below `/agents/<name>/`,
    with the caller's `query` (as it came, percent-encoded)."""

    method: str = "POST"
    path: str = "chat/completions"
    query: str = ""


CHAT_COMPLETIONS = Call()


def request(
    request_id: str, assertion: str, body: dict[str, Any] | None, call: Call = CHAT_COMPLETIONS
) -> str:
    """A request frame. An agent of a version before `method` and `path` reads every frame as
    POST chat/completions; a GET or DELETE carries no body."""
    frame: dict[str, Any] = {
        "type": "request",
        "id": request_id,
        "assertion": assertion,
        "method": call.method,
        "path": call.path,
    }
    if call.query:
        frame["query"] = call.query
    if body is not None:
        frame["body"] = body
    return _dump(frame)


def cancel(request_id: str) -> str:
    return _dump({"type": "cancel", "id": request_id})


def memory_changed(cursor: int) -> str:
    return _dump(MemoryChanged(cursor=str(cursor)).model_dump())


def error(request_id: str, status: int, message: str, code: str) -> dict[str, Any]:
    """A reply's failure as a frame (the portal's own carry a `code` too)."""
    return ErrorFrame(id=request_id, status=status, message=message, code=code).model_dump()


def parse(text: str) -> dict[str, Any] | None:
    """A frame from the agent, or None for anything that is not a JSON object with a type."""
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("type"), str):
        return None
    return found


def _dump(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)
