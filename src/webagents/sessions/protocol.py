"""What every store of conversations offers (`SessionStore`), and what a listing of them
shows (`SessionSummary`): the local store (`store.py`) implements it, and a second backend
(the portal) can implement the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .session_file import SessionFile, Version


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    title: str
    updated: str
    turns: int
    where: str = "here"
    """Where it is kept: here (this machine), portal, or both (backend: robutler)."""
    chat_id: str | None = None
    """The portal's chat, for one kept there."""
    message_count: int | None = None
    """How many messages the portal has of it (where it counts turns)."""


class SessionStore(Protocol):
    """Where conversations are kept; a second backend (the portal) implements the same."""

    def load(self, namespace: str, session_id: str) -> SessionFile | None: ...

    def open(self, namespace: str, session_id: str) -> tuple[SessionFile, Version] | None: ...

    def save(
        self,
        namespace: str,
        session: SessionFile,
        *,
        since: Version | None = None,
        replace: bool = False,
    ) -> Version: ...

    def recent(self, namespace: str, limit: int = 20) -> list[SessionSummary]: ...
