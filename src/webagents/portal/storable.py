"""What neither database can keep, refused before it reaches one: PostgreSQL's text takes no
NUL (it raises, a plain 500), and neither database takes half of a UTF-16 surrogate pair (a
row that holds one cannot be read back as JSON). Used by the features that store people's
text (chats, the memory store)."""

from __future__ import annotations

from typing import Any

from .errors import BadInput


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
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(
            f"{where} holds half of a UTF-16 surrogate pair, which is not text: send valid Unicode",
            code="unstorable_text",
        ) from None


def check_storable_json(where: str, value: Any) -> None:
    """check_storable on every string (keys too) inside a JSON value."""
    if isinstance(value, str):
        check_storable(where, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable(f"{where} (a key)", str(key))
            check_storable_json(f"{where}.{key}", item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_storable_json(f"{where}[{index}]", item)
