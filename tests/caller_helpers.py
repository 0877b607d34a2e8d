"""Callers that arrive without end (a bridge's channel senders, an issuer's JWT callers: one
with open sign-up mints them), as the limits tests of memory and sessions take them: (the
setting that caps them, how the refusal names them, the nth newcomer)."""

from __future__ import annotations

from collections.abc import Callable

from webagents import Caller

NEWCOMERS: list[tuple[str, str, Callable[[int], Caller]]] = [
    ("channel_senders", "channel senders", lambda n: Caller.channel("telegram", str(n))),
    (
        "jwt_callers",
        "callers verified by a JWT issuer",
        lambda n: Caller.verified(f"user{n}@example.com", issuer="https://id.example.com"),
    ),
]
