"""Response ids as points in a caller's kept conversations (the session skill's files).

A response is one turn of a kept conversation: the input it added and the agent's reply.
Its id says where that turn is, so nothing beside the conversation has to be kept for it:

    resp_<start>_<count>_<digest>_<session id>

`start` is the index of the turn's first input message, `count` how many input messages it
added, and `digest` a hash of the caller's namespace and the conversation up to the end of
the input. An id is looked up only among the caller's own conversations (another caller's
id is a 404 like an unknown one), and it stops naming anything once its conversation no
longer holds the same messages (a client that replaced the history, a deleted turn).
A response that is not kept gets an id that names no conversation.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from ..context import is_conversation_id
from ..model import Message
from ..sessions.session_file import dumps

_ID = re.compile(r"resp_(\d{1,9})_(\d{1,4})_([0-9a-f]{16})_(.+)")


@dataclass(frozen=True, slots=True)
class Point:
    """Where one response is: in conversation `session_id`, input at [start, start+count)."""

    session_id: str
    start: int
    count: int

    @property
    def input_end(self) -> int:
        return self.start + self.count


def response_id(namespace: str, session_id: str, messages: Sequence[Message], count: int) -> str:
    """The id of the turn whose `count` input messages end `messages`."""
    start = len(messages) - count
    return f"resp_{start}_{count}_{_digest(namespace, messages)}_{session_id}"


def unkept_response_id() -> str:
    """An id for a response that is not kept: it names no conversation, so it finds none."""
    return f"resp_{secrets.token_hex(16)}"


def parse_response_id(value: str) -> tuple[Point, str] | None:
    """The point an id names and its digest; None for an id that names none."""
    found = _ID.fullmatch(value)
    if found is None or not is_conversation_id(found.group(4)):
        return None
    start, count = int(found.group(1)), int(found.group(2))
    if count < 1:
        return None
    return Point(found.group(4), start, count), found.group(3)


def locate(namespace: str, value: str, messages: Sequence[Message]) -> Point | None:
    """The point `value` names in `messages` (the caller's conversation it names), or None
    where the conversation does not hold that turn as it was."""
    parsed = parse_response_id(value)
    if parsed is None:
        return None
    point, digest = parsed
    if point.input_end > len(messages):
        return None
    if _digest(namespace, messages[: point.input_end]) != digest:
        return None
    if turn_end(messages, point) is None:
        return None
    return point


def turn_end(messages: Sequence[Message], point: Point) -> int | None:
    """The index after the turn's reply: where the next user message is, or the end. None
    when the turn has no final reply (it ends on a tool call or a tool result)."""
    end = point.input_end
    while end < len(messages) and messages[end].get("role") != "user":
        end += 1
    if end == point.input_end:
        return None
    last = messages[end - 1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return end


def reply_text(messages: Sequence[Message], point: Point) -> str:
    end = turn_end(messages, point)
    assert end is not None  # `locate` found the point
    content = messages[end - 1].get("content")
    return content if isinstance(content, str) else ""


def latest_id(namespace: str, session_id: str, messages: Sequence[Message]) -> str | None:
    """The id of the conversation's latest response (None when it ends on no reply): its
    input is the run of user messages before the replies that end it."""
    end = len(messages)
    start = end
    while start > 0 and messages[start - 1].get("role") != "user":
        start -= 1
    first = start
    while first > 0 and messages[first - 1].get("role") == "user":
        first -= 1
    if start == first or start == end:
        return None
    found = response_id(namespace, session_id, messages[:start], start - first)
    parsed = parse_response_id(found)
    if parsed is None or turn_end(messages, parsed[0]) is None:
        return None
    return found


def previous_id(
    namespace: str, session_id: str, messages: Sequence[Message], point: Point
) -> str | None:
    """The id of the response before `point` in its conversation (None for the first)."""
    return latest_id(namespace, session_id, messages[: point.start])


def _digest(namespace: str, messages: Sequence[Message]) -> str:
    hashed = hashlib.sha256(namespace.encode("utf-8") + b"\0" + dumps(list(messages)))
    return hashed.hexdigest()[:16]
