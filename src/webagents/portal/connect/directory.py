"""Who holds an agent's connections, in the database, for every portal process to see.

Each process writes only its own rows (one per WebSocket it holds) and renews them while it
lives (`renew`, every CONNECTION_HEARTBEAT: db/tables.py); a row not renewed for
CONNECTION_STALE is of a process that died without saying so, and is neither trusted nor
kept. Every call is one short session: the relay never holds a session for a WebSocket's
lifetime."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from ..db.tables import CONNECTION_STALE, AgentConnection, RelayPayload
from ..scope import SystemScope, require_system_scope
from .bus import channel_of

# A payload row nobody took (its receiver died) is dropped after this.
PAYLOAD_KEPT = timedelta(minutes=5)
RELAY = SystemScope("connect directory")


@dataclass(frozen=True)
class Holder:
    process_id: uuid.UUID
    connection_id: uuid.UUID


class Directory:
    """Every agent's connections, for Portal Connect's relay (a background job's scope:
    whoever asks was verified by the relay before it asks)."""

    def __init__(
        self, sessions: sessionmaker[Session], process_id: uuid.UUID, scope: SystemScope
    ) -> None:
        self._sessions = sessions
        self._scope = require_system_scope(scope)
        self.process_id = process_id

    def add(self, connection_id: uuid.UUID, agent_id: uuid.UUID) -> None:
        now = datetime.now(UTC)
        with self._sessions.begin() as db:
            db.add(
                AgentConnection(
                    id=connection_id,
                    agent_id=agent_id,
                    process_id=self.process_id,
                    since=now,
                    seen_at=now,
                )
            )

    def remove(self, connection_id: uuid.UUID) -> None:
        with self._sessions.begin() as db:
            db.execute(
                delete(AgentConnection).where(
                    AgentConnection.id == connection_id,
                    AgentConnection.process_id == self.process_id,
                )
            )

    def renew(self) -> None:
        """This process's rows are alive; rows of dead processes and old payloads go."""
        now = datetime.now(UTC)
        with self._sessions.begin() as db:
            db.execute(
                update(AgentConnection)
                .where(AgentConnection.process_id == self.process_id)
                .values(seen_at=now)
            )
            db.execute(
                delete(AgentConnection).where(AgentConnection.seen_at < now - CONNECTION_STALE)
            )
            db.execute(delete(RelayPayload).where(RelayPayload.created_at < now - PAYLOAD_KEPT))

    def holders(self, agent_id: uuid.UUID) -> list[Holder]:
        """The live connections of the agent held by other processes."""
        fresh = datetime.now(UTC) - CONNECTION_STALE
        with self._sessions() as db:
            rows = db.execute(
                select(AgentConnection.process_id, AgentConnection.id).where(
                    AgentConnection.agent_id == agent_id,
                    AgentConnection.seen_at >= fresh,
                    AgentConnection.process_id != self.process_id,
                )
            ).all()
        return [Holder(process_id, connection_id) for process_id, connection_id in rows]

    def notify(self, process_ids: set[uuid.UUID], message: str) -> None:
        """Send a short bus message (bus.py's channels, NOTIFY's limit: a few hundred bytes
        here) to each process, from a process that runs no bus of its own (a worker)."""
        with self._sessions.begin() as db:
            for process_id in process_ids:
                db.execute(select(func.pg_notify(channel_of(process_id), message)))

    def is_live(self, holder: Holder) -> bool:
        fresh = datetime.now(UTC) - CONNECTION_STALE
        with self._sessions() as db:
            found = db.scalar(
                select(AgentConnection.id).where(
                    AgentConnection.id == holder.connection_id,
                    AgentConnection.process_id == holder.process_id,
                    AgentConnection.seen_at >= fresh,
                )
            )
        return found is not None

    def forget_process(self) -> None:
        """At shutdown: this process holds nothing any more."""
        with self._sessions.begin() as db:
            db.execute(delete(AgentConnection).where(AgentConnection.process_id == self.process_id))
