"""The conversations kept per caller: the files, their store and its limits.

Below both the session skill and the portal link (which mirrors conversations to the
portal), so that neither has to import the other's package to reach them.
"""

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
from .store import LocalSessionStore

__all__ = [
    "LocalSessionStore",
    "SessionConflict",
    "SessionError",
    "SessionFile",
    "SessionLimitError",
    "SessionLinkError",
    "SessionStore",
    "SessionSummary",
    "new_session",
    "read_session",
]
