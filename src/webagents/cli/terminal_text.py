"""Text that others wrote (a model, a tool, a kept title), made safe to show on a terminal."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text from a model or a tool, without the control characters a terminal would obey
    (escape sequences could clear the screen or rewrite what was shown)."""
    return _CONTROL.sub("", text)
