"""The session skill's store: conversations kept per caller (the skill itself comes next)."""

from .store import (
    LocalSessionStore,
    SessionError,
    SessionFile,
    SessionStore,
    SessionSummary,
    new_session,
)

__all__ = [
    "LocalSessionStore",
    "SessionError",
    "SessionFile",
    "SessionStore",
    "SessionSummary",
    "new_session",
]
