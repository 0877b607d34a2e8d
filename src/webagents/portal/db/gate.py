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
`wait_seconds`, a request is answered 503 with Retry-After at once, which a client can act
on, instead of piling up (and one still waiting after `wait_seconds` is answered so then).

On SQLite the writers also take turns here, one at a time: they would anyway (one write lock
per database), but waiting in SQLite's busy handler sleeps in growing steps and holds a
thread, while waiting here costs nothing and keeps arrival order.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from ..errors import PortalError

# The most seconds a refusal asks a client to wait before it tries again (see retry_after).
MAX_RETRY_AFTER_SECONDS = 10
# The weight of the latest gap between finished requests in their running average.
GAP_WEIGHT = 0.1


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
        # What a refused client is asked to wait, at most (see retry_after), and the
        # refusals and finished requests of this second, which set it for the next.
        self._spread = 1
        self._second = 0
        self._refused = 0
        self._served = 0

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
        """Seconds a refused client is asked to wait, at random up to a spread that doubles
        each second in which the portal refused more requests than it served, and shrinks by
        one each second it refused fewer than a quarter. Were refused clients all told one
        second, they would all come back in the same moment, most to be refused again, and
        the refusals would take the time the admitted requests need."""
        self._count_second()
        self._refused += 1
        return random.randint(1, self._spread)

    def _count_second(self) -> None:
        second = int(time.monotonic())
        if second == self._second:
            return
        if second != self._second + 1:
            self._spread = 1  # a second or more with nothing refused nor served: no crowd
        elif self._refused > self._served:
            self._spread = min(MAX_RETRY_AFTER_SECONDS, self._spread * 2)
        elif self._refused * 4 < self._served:
            self._spread = max(1, self._spread - 1)
        self._second, self._refused, self._served = second, 0, 0

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

    def _finished(self) -> None:
        self._count_second()
        self._served += 1
        now = time.monotonic()
        if self._waiting and self._finished_at is not None:
            self._gap += (now - self._finished_at - self._gap) * GAP_WEIGHT
        elif not self._waiting:
            self._gap *= 1 - GAP_WEIGHT  # no queue: what it measured fades
        self._finished_at = now
