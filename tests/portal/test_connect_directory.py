"""Who holds an agent's connections (P12, several processes): a row is trusted while its
process renews it; the rows of a process that died without saying so expire and go."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import select, update

from webagents.portal import admin
from webagents.portal.agents import service as agents
from webagents.portal.agents.schemas import AgentIn
from webagents.portal.connect.directory import RELAY, Directory, Holder
from webagents.portal.db.engine import make_sessions
from webagents.portal.db.tables import CONNECTION_STALE, AgentConnection
from webagents.portal.settings import PortalSettings

from .conftest import PASSWORD


def test_p12_a_dead_processes_connections_are_not_trusted(fresh_database_url: str) -> None:
    engine = admin.open_database(PortalSettings(database_url=fresh_database_url))
    try:
        alice = admin.add_user(engine, "alice", PASSWORD)
        with admin.transaction(engine) as session:
            agent_id = agents.create_agent(session, alice, AgentIn(name="helper")).agent.id
        sessions = make_sessions(engine)
        holder, asker = (
            Directory(sessions, uuid.uuid4(), RELAY),
            Directory(sessions, uuid.uuid4(), RELAY),
        )
        connection = uuid.uuid4()
        holder.add(connection, agent_id)
        held = Holder(holder.process_id, connection)
        assert (asker.holders(agent_id), asker.is_live(held)) == ([held], True)
        assert holder.holders(agent_id) == []  # a process asks about the others only
        # The holder stops renewing (it died): once CONNECTION_STALE has passed, nobody trusts
        # the row.
        with sessions.begin() as session:
            session.execute(
                update(AgentConnection).values(seen_at=datetime.now(UTC) - CONNECTION_STALE * 2)
            )
        assert (asker.holders(agent_id), asker.is_live(held)) == ([], False)
        asker.renew()  # a live process's heartbeat removes it
        with sessions() as session:
            assert session.scalars(select(AgentConnection)).all() == []
    finally:
        engine.dispose()
