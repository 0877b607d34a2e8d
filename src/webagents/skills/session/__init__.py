"""The session skill: conversations kept per caller, and its store."""

from .skill import SessionSettings, SessionSkill
from .store import (
    LocalSessionStore,
    SessionError,
    SessionFile,
    SessionLimitError,
    SessionLinkError,
    SessionStore,
    SessionSummary,
    new_session,
    read_session,
)

__all__ = [
    "LocalSessionStore",
    "SessionError",
    "SessionFile",
    "SessionLimitError",
    "SessionLinkError",
    "SessionSettings",
    "SessionSkill",
    "SessionStore",
    "SessionSummary",
    "new_session",
    "read_session",
]
