"""How many callers of a kind whose names come from elsewhere may keep anything.

API keys name the callers the owner listed, but two kinds of caller are named by someone
else: a channel bridge names its senders, and a JWT issuer names its callers (one with open
sign-up mints as many as anyone asks for). Each such caller gets a folder of its own, with its
own limits; without a cap on how many folders, one bridge or issuer could still fill the disk.
So the notes store and the conversations store each cap the namespaces of every such kind
(`channel_senders`, `jwt_callers`): past the cap, a new caller of that kind is refused (the
callers that keep something go on), and the owner's log says so once per kind.

An issuer with `plain_identity: true` names `caller:<identity>` namespaces, which cannot be
told from an API key's: it is trusted like the owner's keys and is not counted here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from .caller import CHANNEL_PREFIX, JWT_PREFIX


@dataclass(frozen=True, slots=True)
class Kind:
    prefix: str
    """How the namespaces of the kind start."""
    who: str
    """The kind's callers, in a message."""
    setting: str
    """The setting that caps them (the same name in the memory and session skills)."""


KINDS = (
    Kind(f"caller:{CHANNEL_PREFIX}", "channel senders", "channel_senders"),
    Kind(f"caller:{JWT_PREFIX}", "callers verified by a JWT issuer", "jwt_callers"),
)


def kind_of(namespace: str) -> Kind | None:
    return next((kind for kind in KINDS if namespace.startswith(kind.prefix)), None)


class Newcomers:
    """The caps of one store on new namespaces of each kind (None: no cap)."""

    def __init__(
        self, caps: dict[str, int | None], *, log: logging.Logger, skill: str, kept: str
    ) -> None:
        self.caps = caps
        """The cap of each kind, by its setting's name."""
        self._log = log
        self._skill = skill
        self._kept = kept
        self._logged: set[str] = set()

    def refusal(self, namespace: str, count: Callable[[Kind], int]) -> str | None:
        """Why a new namespace is refused (the start of a message for the caller), or None
        when it is not of a capped kind or its kind has room. `count`: how many namespaces of
        a kind the store has."""
        kind = kind_of(namespace)
        cap = self.caps.get(kind.setting) if kind is not None else None
        if kind is None or cap is None:
            return None
        found = count(kind)
        if found < cap:
            return None
        if kind.setting not in self._logged:  # once, not for every refused caller
            self._logged.add(kind.setting)
            self._log.warning(
                "%s: refusing the %s of new %s: %d %s have %s, the most this agent keeps "
                "(the %s skill's %s setting)",
                self._skill,
                self._kept,
                kind.who,
                found,
                kind.who,
                self._kept,
                self._skill,
                kind.setting,
            )
        return f"this agent keeps {self._kept} for at most {cap} {kind.who}, and has them all"
