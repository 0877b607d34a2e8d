"""All SQL of agents, scoped: made from an AccountScope, it sees that account's agents only."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from ..accounts.scope import AccountScope, require_scope
from ..db.tables import Agent, RetiredAgentName
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

    def remove(self, agent: Agent) -> None:
        self._session.delete(agent)
        self._session.flush()


def name_taken(session: Session, name: str) -> bool:
    """Agent names are unique on the portal (they name public endpoints): this one question
    is asked across accounts, and answers only yes or no."""
    return session.scalar(select(Agent.id).where(Agent.name == name)) is not None


def name_kept_for_another(session: Session, name: str, user_id: uuid.UUID, now: datetime) -> bool:
    """Is `name` given up lately by an account other than `user_id`, and still kept for it?
    Asked across accounts, like name_taken, and answers only yes or no."""
    found = session.scalar(
        select(RetiredAgentName.name).where(
            RetiredAgentName.name == name,
            RetiredAgentName.user_id != user_id,
            RetiredAgentName.reserved_until > now,
        )
    )
    return found is not None


def keep_name(session: Session, name: str, user_id: uuid.UUID, until: datetime) -> None:
    """Keep a name given up by `user_id` for it until `until` (a later retirement renews)."""
    session.execute(delete(RetiredAgentName).where(RetiredAgentName.name == name))
    session.add(RetiredAgentName(name=name, user_id=user_id, reserved_until=until))
    session.flush()


def release_name(session: Session, name: str) -> None:
    session.execute(delete(RetiredAgentName).where(RetiredAgentName.name == name))


def agent_named(session: Session, name: str) -> Agent | None:
    """Any account's agent by its public name: whom a caller asks a token for."""
    if not is_storable(name):  # no row has it, and PostgreSQL would raise on a NUL
        return None
    return session.scalars(select(Agent).where(Agent.name == name)).one_or_none()
