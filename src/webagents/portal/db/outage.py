"""The database failing under a running portal (PostgreSQL down or restarting, its disk or
SQLite's full, SQLite locked past its wait, no pooled connection in time): which errors mean
that, and the one line in the log that says so, and the one that says it is back.

Such a request is answered 503 with Retry-After (app.py), as JSON on the API, never a 500 nor
a closed connection: nothing was kept, and the same request later will likely succeed. The
portal recovers by itself: PostgreSQL's pool tests a connection that was idle before use and
replaces a dead one (dialect.prepare_postgresql), and one found dead in use makes it replace
all of them.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger("webagents.portal")

# Seconds an answer for an unavailable database asks the client to wait before it retries:
# a restart of the database server takes a few.
RETRY_AFTER_SECONDS = 5
UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)


def reason(exc: BaseException) -> str:
    """The database's own words, on one line, without SQLAlchemy's statement and link."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


class Outage:
    """Whether the database is failing now, told in the log once when it starts and once
    when it ends, however many requests (from any thread) meet it meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing = False

    def began(self, exc: BaseException) -> None:
        with self._lock:
            if self._failing:
                return
            self._failing = True
        log.error(
            "the database is unavailable (%s): requests are answered 503 until it answers again",
            reason(exc),
        )

    def ended(self) -> None:
        if not self._failing:  # the usual case, without the lock
            return
        with self._lock:
            if not self._failing:
                return
            self._failing = False
        log.warning("the database answers again")
