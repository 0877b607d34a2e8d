"""Floods in the log: the first event of a kind in one line, then only how many more came,
at most once a minute, so that thousands of identical lines (or tracebacks) never bury the
rest. The served process's connection limits and its turns out of descriptors use it, and
asyncio's own accept errors are turned into one (`AcceptErrors`)."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable

log = logging.getLogger("webagents.server")

FLOOD_SUMMARY_SECONDS = 60.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class FloodLog:
    """Logs the first of a kind of event, then only how many more came, at most once every
    `every` seconds: thousands of identical lines would bury everything else in the log."""

    def __init__(
        self,
        first: str,
        summary: str,
        *,
        every: float = FLOOD_SUMMARY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self._first = first
        self._summary = summary  # formatted with the count and the interval
        self._every = every
        self._clock = clock
        self._log = logger
        self._unreported = 0
        self._reported_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def event(self, *args: object) -> None:
        now = self._clock()
        since = None if self._reported_at is None else now - self._reported_at
        if since is None or (since >= self._every and not self._unreported):
            self._reported_at = now  # a new flood (or the first): say what it is
            self._log.warning(self._first, *args)
            return
        self._unreported += 1
        if since >= self._every:
            self.flush()
        elif self._timer is None:
            try:  # so that the count of a flood that stops is still told
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(self._every - since, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._unreported:
            self._log.warning(self._summary, self._unreported, round(self._every))
            self._unreported = 0
            self._reported_at = self._clock()


class AcceptErrors(logging.Filter):
    """On the `asyncio` logger: its accept errors for lack of descriptors, as a FloodLog."""

    def __init__(self, files: int) -> None:
        super().__init__()
        self.flood = FloodLog(
            f"cannot accept new connections: %s (the file limit is {files}); they wait until "
            "others close. Lower --max-connections or raise the limit (ulimit -n)",
            "cannot accept new connections: %d more times in the last %d s",
        )

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if (
            isinstance(exc, OSError)
            and exc.errno in _OUT_OF_RESOURCES
            and str(record.msg).startswith("socket.accept()")
        ):
            self.flood.event(exc.strerror)
            return False
        return True
