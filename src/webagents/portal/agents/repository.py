"""All SQL of agents. `Agents` is scoped: made from an AccountScope, it sees that account's
agents only (and answers yes or no about names, which are unique across accounts).
`PublicAgents` finds an agent by what a caller presents, before anyone is verified."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from ..db.tables import Agent, AgentConnection, RetiredAgentName
from ..scope import AccountScope, PreAuthLookup, require_scope
from ..storable import is_storable


class Agents:
    def __init__(self, session: Session, scope: AccountScope) -> None:
        self._session = session
        self._scope = require_scope(scope)

    def _base(self) -> Select[Agent]:
        return select(Agent).where(Agent.user_id == self._scope.user_id)

    def all(self) -> list[Agent]:
        return list(self._session.scalars(self._base().order_by(Agent.name)))

    def get(self, agent_id: uuid.UUID) -> Agent | None:
        return self._session.scalars(self._base().where(Agent.id == agent_id)).one_or_none()

    def add(self, agent: Agent) -> Agent:
        agent.user_id = self._scope.user_id
        self._session.add(agent)
        self._session.flush()
        return agent

    def connections_since(self, agent: Agent, seen_after: datetime) -> list[datetime]:
        """When each live Portal Connect connection of the agent opened (one per `webagents
        serve` process), oldest first: the rows its portal process renewed after
        `seen_after` (connect/directory.py keeps them, for every portal process to see)."""
        return list(
            self._session.scalars(
                select(AgentConnection.since)
                .join(Agent, Agent.id == AgentConnection.agent_id)
                .where(
                    Agent.user_id == self._scope.user_id,
                    AgentConnection.agent_id == agent.id,
                    AgentConnection.seen_at >= seen_after,
                )
                .order_by(AgentConnection.since)
            )
        )

    def remove(self, agent: Agent) -> None:
        self._session.delete(agent)
        self._session.flush()

    # Names: public addresses, unique on the portal (names.py). These questions are asked
    # across accounts, and answer only yes or no.

    def name_taken(self, name: str) -> bool:
        """Has any account's agent this name?"""
        return self._session.scalar(select(Agent.id).where(Agent.name == name)) is not None

    def name_kept_for_another(self, name: str, now: datetime) -> bool:
        """Is `name` given up lately by another account, and still kept for it?"""
        found = self._session.scalar(
            select(RetiredAgentName.name).where(
                RetiredAgentName.name == name,
                RetiredAgentName.user_id != self._scope.user_id,
                RetiredAgentName.reserved_until > now,
            )
        )
        return found is not None

    def keep_name(self, name: str, until: datetime) -> None:
        """Keep a name this account gave up for it until `until` (a later retirement renews)."""
        self._session.execute(delete(RetiredAgentName).where(RetiredAgentName.name == name))
        self._session.add(
            RetiredAgentName(name=name, user_id=self._scope.user_id, reserved_until=until)
        )
        self._session.flush()

    def release_name(self, name: str) -> None:
        """The name is an agent's again: kept for nobody."""
        self._session.execute(delete(RetiredAgentName).where(RetiredAgentName.name == name))


class PublicAgents(PreAuthLookup):
    """Any account's agent by what a caller presents before anyone is verified: its public
    name, or its id (the agent's verifier asking its owner's choice)."""

    def named(self, name: str) -> Agent | None:
        """Whom a caller asks a token for, or talks to through Portal Connect."""
        if not is_storable(name):  # no row has it, and PostgreSQL would raise on a NUL
            return None
        return self._session.scalars(select(Agent).where(Agent.name == name)).one_or_none()

    def allows_others(self, agent_id: uuid.UUID) -> bool | None:
        """The owner's choice whether users other than the owner may call; None: no agent."""
        found = self._session.scalar(select(Agent.allow_others).where(Agent.id == agent_id))
        return None if found is None else bool(found)
