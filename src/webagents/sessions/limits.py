"""How much the session store keeps for each caller: the counting and the refusals.

Per caller, at most `caller_sessions` conversations of `caller_session_bytes` bytes (the owner:
`owner_sessions`, `owner_session_bytes`), and at most `channel_senders` channel senders and
`jwt_callers` JWT callers with any (`newcomers`). What passes a limit is a `SessionLimitError`
whose message tells the caller what to do; the owner's log says which limit was reached, once.
The store asks here before it makes a caller's folder or keeps a conversation, under its lock.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..caller import OWNER_NAMESPACE
from ..newcomers import Kind, Newcomers
from .session_file import SessionError

log = logging.getLogger("webagents.session")


class SessionLimitError(SessionError):
    """A new conversation would pass a limit of how many are kept; the message, meant for the
    caller, says which and what to do."""


class SessionLimits:
    """The limits of one agent's kept conversations (None: no limit)."""

    def __init__(
        self,
        *,
        caller_sessions: int | None = None,
        owner_sessions: int | None = None,
        caller_session_bytes: int | None = None,
        owner_session_bytes: int | None = None,
        channel_senders: int | None = None,
        jwt_callers: int | None = None,
    ) -> None:
        self.caller_sessions = caller_sessions
        self.owner_sessions = owner_sessions
        self.caller_session_bytes = caller_session_bytes
        self.owner_session_bytes = owner_session_bytes
        self.newcomers = Newcomers(
            {"channel_senders": channel_senders, "jwt_callers": jwt_callers},
            log=log,
            skill="session",
            kept="conversations",
        )
        self._logged: set[str] = set()
        """Limits already logged as reached (once each, not for every refused request)."""

    def check_room(self, namespace: str, dir_fd: int, where: Path) -> None:
        """Refuse a new conversation in the caller's folder `dir_fd` (at `where`, for the log)
        once it keeps as many as its limit."""
        cap = self.owner_sessions if namespace == OWNER_NAMESPACE else self.caller_sessions
        if cap is None:
            return
        kept = sum(
            1
            for entry in os.scandir(dir_fd)
            if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False)
        )
        if kept < cap:
            return
        self._log_once(
            namespace,
            "session: %s keeps %d conversations, the most this agent keeps for one caller",
            where,
            kept,
        )
        whose = "its owner" if namespace == OWNER_NAMESPACE else "each caller"
        raise SessionLimitError(
            f"this agent keeps at most {cap} conversations for {whose}, and yours are all "
            "kept; continue one of them (its metadata.session_id), or send no "
            "metadata.session_id to be answered without keeping the conversation"
        )

    def check_bytes(
        self, namespace: str, dir_fd: int, where: Path, session_id: str | None, size: int
    ) -> None:
        """Refuse a save that makes the caller's kept conversations pass their bytes limit
        (see `over_bytes`), with a message for the caller; the owner's log says so once."""
        over = self.over_bytes(namespace, dir_fd, session_id, size)
        if over is None:
            return
        cap, total, after = over
        owner = namespace == OWNER_NAMESPACE
        self._log_once(
            f"{namespace} bytes",
            "session: %s: a conversation was not kept: this caller's would take %d bytes, and "
            "this agent keeps at most %d for %s (the session skill's %s setting)",
            where,
            after,
            cap,
            "its owner" if owner else "one caller",
            "owner_session_bytes" if owner else "caller_session_bytes",
        )
        made = (
            f"yours take {total}"
            if session_id is None
            else f"keeping this turn would make {after}, so it was not kept"
        )
        raise SessionLimitError(
            f"this agent keeps at most {cap} bytes of conversations for "
            f"{'its owner' if owner else 'each caller'}, and {made}; send a shorter "
            "conversation under a kept metadata.session_id (what a request carries replaces "
            "what was kept), or send no metadata.session_id to be answered without keeping "
            "the conversation"
        )

    def over_bytes(
        self, namespace: str, dir_fd: int, session_id: str | None, size: int
    ) -> tuple[int, int, int] | None:
        """(limit, bytes kept, bytes after) when a save passes the caller's bytes limit:
        `session_id`'s file and journal would take `size` bytes (None: a new conversation,
        over once what is kept fills the limit). A save that keeps no more than before (a
        shorter conversation under the same id) is never over.

        The folder is read afresh each time, under the lock: another process may have kept
        conversations meanwhile, and a journal grows without the folder changing."""
        owner = namespace == OWNER_NAMESPACE
        cap = self.owner_session_bytes if owner else self.caller_session_bytes
        if cap is None:
            return None
        sizes = _kept_bytes(dir_fd)
        total = sum(sizes.values())
        if session_id is None:
            return (cap, total, total) if total >= cap else None
        after = total - sizes.get(session_id, 0) + size
        return (cap, total, after) if after > cap and after > total else None

    def check_newcomer(self, namespace: str, count: Callable[[Kind], int]) -> None:
        """Refuse a new channel sender's or JWT caller's folder past `channel_senders` or
        `jwt_callers` (a bridge or an issuer could otherwise make folders without end).
        `count`: how many callers of a kind have a folder."""
        refused = self.newcomers.refusal(namespace, count)
        if refused is not None:
            raise SessionLimitError(
                f"{refused}; send no metadata.session_id to be answered without keeping the "
                "conversation"
            )

    def _log_once(self, what: str, message: str, *args: object) -> None:
        if what not in self._logged:
            self._logged.add(what)
            log.warning(message, *args)


def _kept_bytes(dir_fd: int) -> dict[str, int]:
    """The bytes of each conversation kept in a folder (its file and its journal), by id."""
    sizes: dict[str, int] = {}
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".json"):
                session_id = name[: -len(".json")]
            elif name.startswith(".") and name.endswith(".journal"):
                session_id = name[1 : -len(".journal")]
            else:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                sizes[session_id] = sizes.get(session_id, 0) + info.st_size
    return sizes
