"""What a client is told when a turn fails: enough to act on, no internals (shared by
every API the server speaks)."""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable
from typing import TypeVar

from ..errors import ModelError, TurnLimitError
from ..sessions import SessionConflict, SessionError, SessionLimitError, SessionLinkError
from .api_errors import ApiError
from .flood import FloodLog

log = logging.getLogger("webagents.server")

T = TypeVar("T")
_OUT_OF_FILES = FloodLog(
    "a turn failed for lack of file descriptors (%s): it was answered 503 server_busy, as are "
    "others until some close. Lower --max-connections or raise the file limit (ulimit -n)",
    "out of file descriptors: %d more turns answered 503 in the last %d s",
)


async def run_turn(turn: Awaitable[T]) -> T:
    try:
        return await turn
    except Exception as exc:
        raise runtime_error(exc) from exc


def runtime_error(exc: Exception) -> ApiError:
    """What the client is told when a turn fails: enough to act on, no internals."""
    if isinstance(exc, ApiError):
        return exc
    strerror = _out_of_descriptors(exc)
    if strerror is not None:  # the model client's, or the agent's files: a flood, not a bug
        _OUT_OF_FILES.event(strerror)
        return ApiError(
            503,
            "the server has too much to do at once to take this turn (it is out of open "
            "files); try again shortly",
            "server_busy",
        )
    if isinstance(exc, ModelError):
        log.error("the model failed: %s", exc)
        return ApiError(502, "the agent's model endpoint failed; try again later", "model_error")
    if isinstance(exc, SessionLimitError):
        return ApiError(429, str(exc), "session_limit")  # the store logged it for the owner
    if isinstance(exc, SessionLinkError):
        log.error("%s", exc)  # the path is for the log, not the client
        return ApiError(
            500,
            "this caller's kept conversations cannot be read or kept safely here (the agent's "
            "owner is told); send no metadata.session_id to be answered without keeping it",
            "session_unsafe",
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        log.error("the disk is full: %s", exc)
        return ApiError(
            507,
            "the agent's disk is full, so the conversation was not kept; try again later",
            "insufficient_storage",
        )
    if isinstance(exc, SessionConflict):  # not damage: another request went first
        return ApiError(
            409,
            f"the kept conversation {exc.session_id!r} went on meanwhile (another request "
            "added to it while this one ran), so this change was not kept: read it again and "
            "send this one again",
            "conversation_changed",
        )
    if isinstance(exc, SessionError):
        log.error("%s", exc)  # the path is for the log, not the client
        return ApiError(
            409,
            "this session's kept conversation cannot be read or replaced (its file is "
            "damaged); continue under a new metadata.session_id",
            "session_unreadable",
        )
    if isinstance(exc, TurnLimitError):
        log.error("%s", exc)
        return ApiError(500, "the agent did not finish within its turn limit", "turn_limit")
    log.error("a turn failed", exc_info=exc)
    return ApiError(500, "the agent failed with an internal error", "internal_error")


def _out_of_descriptors(exc: BaseException) -> str | None:
    """The error text where `exc`, or what it was raised from (a ModelError hides the socket
    error it came from), is the process or the system running out of file descriptors."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EMFILE, errno.ENFILE):
            return current.strerror or str(current)
        current = current.__cause__ or current.__context__
    return None
