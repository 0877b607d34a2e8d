"""The official `openai` client as the tests' caller, closed at the end of the test that made
it (tests/conftest.py's `_callers_closed`): an open one leaves its socket to the garbage
collector, whose ResourceWarning (an error under filterwarnings = error) fails whichever test
happens to be running when the collector finds it, in another file as often as not."""

from __future__ import annotations

from typing import Any

import openai

_OPEN: list[openai.OpenAI] = []


def caller(base_url: str, api_key: str, **options: Any) -> openai.OpenAI:
    """`openai.OpenAI(base_url=..., api_key=..., **options)`, closed when the test ends."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, **options)
    _OPEN.append(client)
    return client


def close_callers() -> None:
    while _OPEN:
        _OPEN.pop().close()
