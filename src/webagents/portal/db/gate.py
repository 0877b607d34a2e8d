"""How many requests work on the database at once: the gate every request's session passes.

Without it the server's worker threads (anyio's pool of 40) outnumber the database pool, and
under many clients the surplus waited 30 s for a pooled connection and failed (a 500); on
SQLite, every writer blocked a thread in BEGIN IMMEDIATE's busy wait while the one holding the
write lock waited for a free thread to commit in, so all of them failed with "database is
locked". Here a request takes a slot before its session opens and gives it back after its
commit: at most `slots` work at once, as many as the pool holds connections, so a request
that got a slot never waits for a connection nor for a thread. The rest wait in the event
loop, in order, for a slot; past `waiting` of them, or where the wait it would have (the
queue before it times the recent gap between finished requests) is longer than
`wait_seconds`, a request is answered 503 at once, with a Retry-After that says when there
will be room for it (retry_after), instead of piling up (and one still waiting after
`wait_seconds` is answered so then). The portal refuses those before its app parses them
(portal/refusal.py), so that a flood of clients costs it little more than the requests it
serves.

On SQLite the writers also take turns here, one at a time: they would anyway (one write lock
per database), but waiting in SQLite's busy handler sleeps in growing steps and holds a
thread, while waiting here costs nothing and keeps arrival order.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass

from ..errors import PortalError

# The most seconds a refusal asks a client to wait before it tries again (see retry_after).
MAX_RETRY_AFTER_SECONDS = 30
# The weight of the latest gap between finished requests in their running average.
GAP_WEIGHT = 0.1
# How long a thread waits for the writers' turn before it goes on without it (thread_turn).
THREAD_TURN_WAIT_S = 5.0


class Busy(PortalError):
    """Too many requests wait for the database: try again in `retry_after` seconds."""

    status = 503
    code = "server_busy"

    def __init__(self, why: str, retry_after: int) -> None:
        super().__init__(f"the portal is busy: {why}; try again in {retry_after} s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class GateLimits:
    """`portal serve --max-db-requests` and `--max-db-waiting`, and how long one may wait."""

    slots: int = 8
    waiting: int = 64
    wait_seconds: float = 1.0


class DatabaseGate:
    """The slots of requests that work on the database (see the module's docstring)."""

    def __init__(self, limits: GateLimits, *, one_writer: bool) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.slots)
        self._writer = asyncio.Lock() if one_writer else None
        self._waiting = 0
        # Seconds between requests finishing while others wait (an average of the recent
        # ones): the time a newcomer would wait is about that times the queue before it.
        self._gap = 0.0
        self._finished_at: float | None = None
        # The refused clients told to come back, by the second they are due (see
        # retry_after), and how many they are in all.
        self._due: dict[int, int] = {}
        self._promised = 0

    def busy(self) -> Busy | None:
        """The refusal a request arriving now gets at once, or None if it may go on: it
        would have to wait, and more wait already than the limit, or the wait it would have
        is longer than the limit (told now, not after the wait)."""
        if not self._waiting and not self._slots.locked():
            return None
        return self._refusal()

    def _refusal(self) -> Busy | None:
        if self._waiting >= self.limits.waiting:
            why = f"{self._waiting} requests already wait for the database"
        elif (self._waiting + 1) * self._gap > self.limits.wait_seconds:
            why = (
                f"{self._waiting} requests already wait for the database, longer than "
                f"{self.limits.wait_seconds:g} s"
            )
        else:
            return None
        return Busy(why, self.retry_after())

    def retry_after(self) -> int:
        """Seconds a refused client is asked to wait: until the requests before it are
        served at the rate the gate measures (one each `_gap` seconds), those in the gate
        (every slot taken, and those waiting) and the clients refused before it that are not
        due back yet, rounded up to whole seconds (HTTP's), 1 to MAX_RETRY_AFTER_SECONDS.

        So refused clients come back in the order they were refused, about as many each
        second as the gate serves, not all in the same moment to be refused again; and the
        more clients there are, the longer each is told to wait: the refusals a second stay
        about the requests served a second, however many clients there are (told one second,
        every client without a place would come back each second, and the refusals would
        take the time the admitted requests need)."""
        now = time.monotonic()
        self._forget_due(int(now))
        ahead = self.limits.slots + self._waiting + self._promised
        seconds = min(MAX_RETRY_AFTER_SECONDS, max(1, math.ceil(ahead * self._gap)))
        due = math.ceil(now + seconds)  # forgotten once that second has come
        self._due[due] = self._due.get(due, 0) + 1
        self._promised += 1
        return seconds

    def _forget_due(self, second: int) -> None:
        """Forget the promises of seconds that have come: those clients are back, or not."""
        if self._due and min(self._due) <= second:
            for past in [due for due in self._due if due <= second]:
                self._promised -= self._due.pop(past)

    @asynccontextmanager
    async def enter(self, *, writes: bool) -> AsyncIterator[None]:
        """Hold a slot (and, for a writer on SQLite, the writers' turn) for the block."""
        async with AsyncExitStack() as held:
            turns: list[asyncio.Semaphore | asyncio.Lock] = [self._slots]
            if writes and self._writer is not None:
                turns.insert(0, self._writer)  # a writer waiting its turn holds no slot
            if not self._waiting and not any(turn.locked() for turn in turns):
                for turn in turns:  # free, and no one waits before this one: taken at once
                    await held.enter_async_context(turn)
            else:
                await self._queue(held, turns)
            try:
                yield
            finally:
                self._finished()

    async def _queue(
        self, held: AsyncExitStack, turns: list[asyncio.Semaphore | asyncio.Lock]
    ) -> None:
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        self._waiting += 1
        try:
            async with asyncio.timeout(self.limits.wait_seconds):
                for turn in turns:
                    await held.enter_async_context(turn)
        except TimeoutError:
            raise Busy(
                f"no request finished with the database within {self.limits.wait_seconds:g} s",
                self.retry_after(),
            ) from None
        finally:
            self._waiting -= 1

    @contextmanager
    def thread_turn(
        self, loop: asyncio.AbstractEventLoop | None, *, wait: float = THREAD_TURN_WAIT_S
    ) -> Iterator[None]:
        """The writers' turn (SQLite) for a thread outside the event loop `loop`: the embedding
        worker storing vectors takes it in line with the requests' writers, and holds it for
        the block, instead of racing them for SQLite's lock (bench/README.md: its vectors
        waited hundreds of ms behind a burst of puts). It takes no slot and is never refused.
        Without a writers' line (PostgreSQL), without a running loop, or when the turn has not
        come within `wait` seconds, the block runs without it (SQLite's lock is then tried for
        as before: dialect._begin_trying)."""
        if self._writer is None or loop is None or not loop.is_running():
            yield
            return
        writer, taken, release = self._writer, threading.Event(), asyncio.Event()

        async def hold() -> None:
            async with writer:
                taken.set()
                await release.wait()  # set by the thread when its block is over

        try:
            asyncio.run_coroutine_threadsafe(hold(), loop)
        except RuntimeError:  # the loop closed meanwhile: no requests to take turns with
            yield
            return
        taken.wait(wait)
        try:
            yield
        finally:
            # Also when the turn never came: it is given back as soon as it is taken.
            with suppress(RuntimeError):  # the loop closed: its lock with it
                loop.call_soon_threadsafe(release.set)

    def _finished(self) -> None:
        now = time.monotonic()
        if self._waiting and self._finished_at is not None:
            self._gap += (now - self._finished_at - self._gap) * GAP_WEIGHT
        elif not self._waiting:
            self._gap *= 1 - GAP_WEIGHT  # no queue: what it measured fades
        self._finished_at = now
