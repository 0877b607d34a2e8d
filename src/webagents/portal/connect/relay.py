"""The relay: a request for an agent goes to one of its connections, here or (PostgreSQL)
at the process that holds one, and its reply frames come back to the caller.

In this process, requests go round the agent's live connections. With none here, on
PostgreSQL, the directory names the processes that hold one, and the request travels over
the bus (LISTEN/NOTIFY) to one of them, which relays it as its own and sends each reply
frame back the same way. On SQLite the portal is one process, and there is no bus.

The bus and the heartbeat start with the first connection (or the first request relayed
elsewhere): a process that never holds one touches nothing. At each heartbeat the keys of the
connections held here are looked up, and a connection whose key was revoked since it opened
(or whose agent was deleted) is ended: the key's machine is cut off from the relay within a
heartbeat, as it is from the memory store at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from ..db.tables import CONNECTION_HEARTBEAT
from ..errors import PortalError
from ..settings import PortalSettings
from ..tokens import agent_keys
from . import protocol
from .bus import Bus
from .directory import RELAY, Directory, Holder
from .live import LiveConnection, Registry, Reply
from .notices import MemoryNotices, bus_notice

log = logging.getLogger("webagents.portal.connect")


class AgentOffline(PortalError):
    status = 503
    code = "agent_offline"


def offline(agent_name: str) -> AgentOffline:
    return AgentOffline(
        f"the agent {agent_name!r} is not connected to the portal now: its owner must run "
        "`webagents serve` (or `webagents daemon`) in the agent's published folder"
    )


class Relay:
    # Bounded waits: for the start of a reply, then between its frames.
    first_frame_timeout: float = 60.0
    idle_timeout: float = 300.0

    def __init__(self, sessions: sessionmaker[Session], settings: PortalSettings) -> None:
        self.process_id = uuid.uuid4()
        self.registry = Registry()
        self.directory = Directory(sessions, self.process_id, RELAY)
        self._sessions = sessions
        self._settings = settings
        self._bus: Bus | None = None
        self._bus_lock = asyncio.Lock()
        self._heartbeat: asyncio.Task[None] | None = None
        self._waiting: dict[str, Reply] = {}  # requests of ours answered by another process
        self._serving: dict[str, LiveConnection] = {}  # another process's requests, here
        self.notices = MemoryNotices(self.registry, self._notice_elsewhere)

    def start(self) -> None:
        """On the app's loop, at its start: memory notices go to this loop from then on."""
        self.notices.bind(asyncio.get_running_loop())

    @property
    def spans_processes(self) -> bool:
        return not self._settings.is_sqlite

    async def stop(self) -> None:
        await self.notices.stop()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.directory.forget_process)
        if self._bus is not None:
            await self._bus.stop()

    # The agents' side -------------------------------------------------------------------

    async def connected(self, connection: LiveConnection) -> None:
        if self.spans_processes:  # listening before any process can learn of this one
            await self._ensure_bus()
        self.registry.add(connection)
        await asyncio.to_thread(self.directory.add, connection.id, connection.agent_id)
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._beat(), name="connect-heartbeat")

    async def disconnected(self, connection: LiveConnection) -> None:
        self.registry.remove(connection)
        connection.drop()
        with contextlib.suppress(Exception):  # the heartbeat's staleness covers a failure
            await asyncio.to_thread(self.directory.remove, connection.id)

    # The callers' side ------------------------------------------------------------------

    async def send(
        self,
        agent_id: uuid.UUID,
        agent_name: str,
        assertion: str,
        body: dict[str, Any] | None,
        call: protocol.Call = protocol.CHAT_COMPLETIONS,
    ) -> Reply:
        """Relay a request; its Reply (an AgentOffline when no connection is anywhere)."""
        request_id = uuid.uuid4().hex
        connection = self.registry.pick(agent_id)
        if connection is not None:
            held = connection
            reply = Reply(request_id, lambda: held.cancel(request_id))
            held.open(request_id, assertion, body, reply.put, call)
            return reply
        if self.spans_processes:
            holders = await asyncio.to_thread(self.directory.holders, agent_id)
            if holders:
                return await self._send_elsewhere(
                    random.choice(holders), request_id, agent_id, assertion, body, call
                )
        raise offline(agent_name)

    async def _send_elsewhere(
        self,
        holder: Holder,
        request_id: str,
        agent_id: uuid.UUID,
        assertion: str,
        body: dict[str, Any] | None,
        call: protocol.Call,
    ) -> Reply:
        bus = await self._ensure_bus()

        def cancel() -> None:
            if self._waiting.pop(request_id, None) is not None:
                bus.post(holder.process_id, {"kind": "cancel", "id": request_id})

        async def still_there() -> bool:
            live = await asyncio.to_thread(self.directory.is_live, holder)
            if not live:
                self._waiting.pop(request_id, None)
            return live

        reply = Reply(request_id, cancel, still_there)
        self._waiting[request_id] = reply
        bus.post(
            holder.process_id,
            {
                "kind": "request",
                "id": request_id,
                "from": str(self.process_id),
                "agent_id": str(agent_id),
                "connection_id": str(holder.connection_id),
                "assertion": assertion,
                "body": body,
                "call": [call.method, call.path, call.query],
            },
        )
        return reply

    # Between processes ------------------------------------------------------------------

    async def _ensure_bus(self) -> Bus:
        async with self._bus_lock:
            if self._bus is None:
                bus = Bus(self._settings.database_url, self.process_id, self._on_bus)
                await bus.start()
                self._bus = bus
            return self._bus

    async def _notice_elsewhere(self, agent_id: uuid.UUID, cursor: int) -> None:
        """A memory notice for the processes holding the agent's other connections."""
        if not self.spans_processes:
            return
        holders = await asyncio.to_thread(self.directory.holders, agent_id)
        if not holders:
            return
        bus = await self._ensure_bus()
        notice = bus_notice(agent_id, cursor)
        for process_id in {holder.process_id for holder in holders}:
            bus.post(process_id, notice)

    def _notice_from_bus(self, message: dict[str, Any]) -> None:
        cursor = message.get("cursor")
        try:
            agent_id = uuid.UUID(str(message.get("agent_id")))
        except ValueError:
            return
        if isinstance(cursor, int):
            self.notices.tell_here(agent_id, cursor)

    def _on_bus(self, message: dict[str, Any]) -> None:
        if message.get("kind") == "memory_changed":
            self._notice_from_bus(message)
            return
        kind, request_id = message.get("kind"), message.get("id")
        if not isinstance(request_id, str):
            return
        if kind == "frame":
            frame = message.get("frame")
            reply = self._waiting.get(request_id)
            if reply is not None and isinstance(frame, dict):
                if frame.get("type") in ("end", "error"):
                    del self._waiting[request_id]
                reply.put(frame)
        elif kind == "cancel":
            serving = self._serving.pop(request_id, None)
            if serving is not None:
                serving.cancel(request_id)
        elif kind == "request":
            self._serve_for_another(request_id, message)

    def _serve_for_another(self, request_id: str, message: dict[str, Any]) -> None:
        bus = self._bus
        assert bus is not None
        try:
            origin = uuid.UUID(str(message["from"]))
            agent_id = uuid.UUID(str(message["agent_id"]))
            wanted = uuid.UUID(str(message["connection_id"]))
        except (KeyError, ValueError):
            return
        connection = self.registry.get(wanted)
        if connection is None or connection.agent_id != agent_id or connection.closed:
            connection = self.registry.pick(agent_id)
        if connection is None:
            refusal = protocol.error(
                request_id, 503, offline("this agent").message, AgentOffline.code
            )
            bus.post(origin, {"kind": "frame", "id": request_id, "frame": refusal})
            return
        held = connection

        def back(frame: dict[str, Any]) -> None:
            if frame.get("type") in ("end", "error"):
                self._serving.pop(request_id, None)
            bus.post(origin, {"kind": "frame", "id": request_id, "frame": frame})

        self._serving[request_id] = held
        body = message.get("body")
        assertion = str(message.get("assertion", ""))
        try:
            held.open(
                request_id,
                assertion,
                body if isinstance(body, dict) else None,
                back,
                _call_of(message.get("call")),
            )
        except PortalError as exc:  # the agent is busy: the caller's process answers it
            back(protocol.error(request_id, exc.status, exc.message, exc.code))

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(CONNECTION_HEARTBEAT.total_seconds())
            try:
                await asyncio.to_thread(self.directory.renew)
            except Exception as exc:
                log.warning("connect: renewing this process's connections failed (%s)", exc)
            try:
                await self._end_revoked()
            except Exception as exc:  # the next heartbeat asks again
                log.warning("connect: checking the connections' keys failed (%s)", exc)

    async def _end_revoked(self) -> None:
        held = [c for c in self.registry.all() if c.key_id is not None and not c.closed]
        if not held:
            return
        live = await asyncio.to_thread(self._live_keys, {c.key_id for c in held if c.key_id})
        for connection in held:
            if connection.key_id not in live:
                log.info(
                    "connect: a key of %s was revoked: its connection is ended",
                    connection.agent_name,
                )
                connection.end()

    def _live_keys(self, key_ids: set[uuid.UUID]) -> set[uuid.UUID]:
        with self._sessions() as db:
            return agent_keys.PresentedKeys(db).live_among(key_ids)


def _call_of(sent: Any) -> protocol.Call:
    """The call a request from another process names (POST chat/completions from a process
    of a version before calls travelled)."""
    if isinstance(sent, list) and len(sent) == 3 and all(isinstance(p, str) for p in sent):
        return protocol.Call(*sent)
    return protocol.CHAT_COMPLETIONS
