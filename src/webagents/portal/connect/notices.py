"""Memory notices: an agent's memory changed, and every Portal Connect connection of that
agent is told (`{"type": "memory_changed", "cursor": ...}`), so that each process serving
the agent pulls at once instead of at its next `sync_seconds` (SPEC P12: one memory for
every process of an agent).

The commit's thread hands the change to the event loop (`from_thread`); per agent one
telling runs at a time and takes the latest cursor when it starts, so a burst of writes is
a few notices, not one per write. A telling tells the connections held here (each holds at
most one notice waiting, live.py) and, on PostgreSQL, each other process that holds one
(the directory), over the bus; that process tells its own (`tell_here`).

A `portal worker` on PostgreSQL holds no connection and runs no bus, yet its retention sweeps
change memory: its JobNotices send the same bus message to the processes holding the agent's
connections. (On SQLite a separate worker's changes reach the agents at their next sync: one
process serves, with no bus to tell it.)"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from ..scope import SystemScope
from .directory import Directory
from .live import Registry

log = logging.getLogger("webagents.portal.connect")

Elsewhere = Callable[[uuid.UUID, int], Awaitable[None]]
"""Tell the other portal processes holding the agent's connections (none on SQLite)."""


def bus_notice(agent_id: uuid.UUID, cursor: int) -> dict[str, Any]:
    """The bus message that tells a process to tell its connections of the agent."""
    return {"kind": "memory_changed", "agent_id": str(agent_id), "cursor": cursor}


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


class JobNotices:
    """The memory changes a `portal worker` commits (PostgreSQL), told to the processes that
    hold the agent's connections. A listener for memory/changes.py: the committing job
    thread only records the agent's latest cursor; a thread of its own looks up the holders
    and sends, so a sweep of many entries of one agent is one message per holder."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._directory = Directory(sessions, uuid.uuid4(), SystemScope("worker notices"))
        self._latest: dict[uuid.UUID, int] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="memory-notices", daemon=True)

    def start(self) -> JobNotices:
        self._thread.start()
        return self

    def __call__(self, agent_id: uuid.UUID, cursor: int) -> None:
        with self._lock:
            self._latest[agent_id] = max(cursor, self._latest.get(agent_id, 0))
        self._wake.set()

    def stop(self) -> None:
        """After the jobs stopped: what they changed last is told, then the thread ends."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                self._wake.clear()
                latest, self._latest = self._latest, {}
            for agent_id, cursor in latest.items():
                try:
                    holders = {h.process_id for h in self._directory.holders(agent_id)}
                    if holders:
                        notice = json.dumps(bus_notice(agent_id, cursor), separators=(",", ":"))
                        self._directory.notify(holders, notice)
                except Exception as exc:  # the agents' sync_seconds still pull it
                    log.warning("connect: a memory notice was not sent on (%s)", exc)
            if self._stopping:
                return
