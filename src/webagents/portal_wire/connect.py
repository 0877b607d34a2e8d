"""Portal Connect's frames (SPEC P12, docs/portal.md "Portal Connect"): JSON text messages
with a `type`, on the WebSocket an agent keeps open to `<portal>/ws`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Hello(BaseModel):
    """The portal's first frame: which agent the key is, and where callers reach it. Only
    `type` is required of it: the agent also takes the hello of a portal that names no agent
    (the agent id is then the folder's own) or gives no public address."""

    type: Literal["hello"]
    agent_id: str | None = None
    agent_name: str = ""
    public_url: str = ""
    connection_id: str = ""


class Cancel(BaseModel):
    """The caller went away: the agent stops the relayed request `id`."""

    type: Literal["cancel"]
    id: str


class ErrorFrame(BaseModel):
    """A relayed request's failure, from the agent or from the portal itself (then with a
    `code` the portal's clients know)."""

    type: Literal["error"] = "error"
    id: str
    status: int
    message: str
    code: str


class MemoryChanged(BaseModel):
    """The agent's memory store changed (a write through any of its processes, the owner's
    pages, a forget, a restore, retention): its feed is at `cursor` (a sync cursor, opaque,
    as `action=sync` answers it). The agent pulls; a process already there pulls nothing."""

    type: Literal["memory_changed"] = "memory_changed"
    cursor: str


PONG = '{"type":"pong"}'
"""The answer to a ping, the agent's and the portal's: a frame with nothing but its type."""
