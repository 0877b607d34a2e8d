"""Memory notices: an agent's memory changed, and every Portal Connect connection of that
agent is told (`{"type": "memory_changed", "cursor": ...}`), so that each process serving
the agent pulls at once instead of at its next `sync_seconds` (SPEC P12: one memory for
every process of an agent).

The commit's thread hands the change to the event loop (`from_thread`); per agent one
telling runs at a time and takes the latest cursor when it starts, so a burst of writes is
a few notices, not one per write. A telling tells the connections held here (each holds at
most one notice waiting, live.py) and, on PostgreSQL, each other process that holds one
(the directory), over the bus; that process tells its own (`tell_here`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from .live import Registry

log = logging.getLogger("webagents.portal.connect")

Elsewhere = Callable[[uuid.UUID, int], Awaitable[None]]
"""Tell the other portal processes holding the agent's connections (none on SQLite)."""


class MemoryNotices:
    def __init__(self, registry: Registry, elsewhere: Elsewhere | None = None) -> None:
        self._registry = registry
        self._elsewhere = elsewhere
        self._loop: asyncio.AbstractEventLoop | None = None
        self._latest: dict[uuid.UUID, int] = {}
        self._telling: dict[uuid.UUID, asyncio.Task[None]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the connections live on (the app's, at its start)."""
        self._loop = loop

    def from_thread(self, agent_id: uuid.UUID, cursor: int) -> None:
        """A committed change, from any thread (changes.py's listener); dropped before the
        app started or after it stopped, when no connection is there to tell."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self.changed, agent_id, cursor)
        except RuntimeError:  # the loop closed meanwhile
            return

    def changed(self, agent_id: uuid.UUID, cursor: int) -> None:
        """The agent's memory is at `cursor` now (on the loop)."""
        self._latest[agent_id] = max(cursor, self._latest.get(agent_id, 0))
        if agent_id not in self._telling:
            self._telling[agent_id] = asyncio.create_task(
                self._tell(agent_id), name="connect-memory-notice"
            )

    async def _tell(self, agent_id: uuid.UUID) -> None:
        try:
            while (cursor := self._latest.pop(agent_id, None)) is not None:
                self.tell_here(agent_id, cursor)
                if self._elsewhere is not None:
                    try:
                        await self._elsewhere(agent_id, cursor)
                    except Exception as exc:  # the agents' sync_seconds still pull it
                        log.warning("connect: a memory notice was not sent on (%s)", exc)
        finally:
            del self._telling[agent_id]

    def tell_here(self, agent_id: uuid.UUID, cursor: int) -> None:
        for connection in self._registry.of(agent_id):
            connection.memory_changed(cursor)

    async def idle(self) -> None:
        """Every telling under way has ended."""
        while self._telling:
            await asyncio.gather(*self._telling.values(), return_exceptions=True)

    async def stop(self) -> None:
        """The app stops: the tellings under way end now (a database that does not answer
        must not hold the stop), and later changes are not handed to the closing loop."""
        self._loop = None
        tellings = list(self._telling.values())
        for telling in tellings:
            telling.cancel()
        await asyncio.gather(*tellings, return_exceptions=True)
