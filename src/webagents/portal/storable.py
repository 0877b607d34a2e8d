"""What neither database can keep, refused before it reaches one: PostgreSQL's text takes no
NUL (it raises, a plain 500), and neither database takes half of a UTF-16 surrogate pair (a
row that holds one cannot be read back as JSON). JSON kept in a column (an agent's skills, a
chat's tool_calls) is at most MAX_JSON_DEPTH deep: deeper, a writer on the way out (orjson's
255 levels, the recursion of Python's) fails on a row that was taken. Used by the features
that store people's text (agents, chats, the memory store), and by lookups by a name that
could not be stored (is_storable: no row has it, and PostgreSQL raises on a NUL)."""

from __future__ import annotations

from typing import Any

from .errors import BadInput

MAX_JSON_DEPTH = 64
"""Arrays and objects inside a kept JSON value, at most: far past any skill's settings or any
tool call, far short of what breaks a reader."""


def is_storable(text: str) -> bool:
    """Whether a database can hold `text` (and so whether a row can have it)."""
    return "\x00" not in text and not _has_lone_surrogate(text)


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def within_depth(value: Any, depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests at most `depth` arrays and objects (a reader's question about a
    row kept before the bound: it is never an error)."""
    level = [value]
    for _ in range(depth + 1):
        level = [
            item
            for node in level
            if isinstance(node, dict | list)
            for item in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return True
    return False


def check_storable(where: str, text: str | None) -> None:
    """400 `unstorable_text` naming `where`, for a NUL or a lone surrogate in `text`."""
    if text is None:
        return
    if "\x00" in text:
        raise BadInput(
            f"{where} holds a NUL character (U+0000), which the portal cannot keep: remove "
            "it or replace it (with U+FFFD, say) and send the call again",
            code="unstorable_text",
        )
    if _has_lone_surrogate(text):
        raise BadInput(
            f"{where} holds half of a UTF-16 surrogate pair, which is not text: send valid Unicode",
            code="unstorable_text",
        )


def check_storable_json(where: str, value: Any) -> None:
    """check_storable on every string (keys too) inside a JSON value, and its depth at most
    MAX_JSON_DEPTH (`unstorable_text` naming `where` for it too)."""
    _check_json(where, where, value, 0)


def _check_json(top: str, where: str, value: Any, depth: int) -> None:
    if isinstance(value, str):
        check_storable(where, value)
        return
    if not isinstance(value, dict | list):
        return
    if depth >= MAX_JSON_DEPTH:  # said of the whole value: the path to here is no help
        raise BadInput(
            f"{top} nests JSON arrays and objects more than {MAX_JSON_DEPTH} deep, more than "
            "the portal keeps: send a flatter value",
            code="unstorable_text",
        )
    if isinstance(value, dict):
        for key, item in value.items():
            check_storable(f"{where} (a key)", str(key))
            _check_json(top, f"{where}.{key}", item, depth + 1)
    else:
        for index, item in enumerate(value):
            _check_json(top, f"{where}[{index}]", item, depth + 1)
