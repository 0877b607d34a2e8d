"""The session skill: conversations kept per caller, and its store."""

from .limits import SessionLimitError
from .protocol import SessionStore, SessionSummary
from .session_file import (
    SessionConflict,
    SessionError,
    SessionFile,
    SessionLinkError,
    new_session,
    read_session,
)
from .skill import SessionSettings, SessionSkill
from .store import LocalSessionStore

__all__ = [
    "LocalSessionStore",
    "SessionConflict",
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
