"""Agent keys, one per machine (P4): `publish` makes the first with the agent and one more
for each profile that links the folder later (another machine); the memory store and
Connect verify them; the agent's page lists them, with when each was last used, and
revokes them one by one while the others keep working.

The listing and revoking go through `AgentKeys`, made from the owner's AccountScope and
scoped to agents of that account; finding the key a request presents is the
verification itself (`PresentedKeys`) and is asked across accounts, answering only that
key's agent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.orm import Session

from ..db.tables import Agent, AgentKey
from ..errors import BadInput, NotFound
from ..scope import AccountScope, PreAuthLookup, require_scope
from .credentials import digest, new_api_key, shown_prefix

# How stale `last_used_at` may be: a key in use writes at most once in this while, so that
# an agent's every request is not also a write of its key's row.
USE_PRECISION = timedelta(minutes=1)
NAME_RULE = "1-100 characters, no control characters"
DEFAULT_NAME = "first key"


@dataclass(frozen=True)
class MadeKey:
    key: AgentKey
    raw: str  # shown once, to the machine that asked


def check_key_name(given: str | None) -> str:
    name = (given or "").strip() or DEFAULT_NAME
    if len(name) > 100 or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadInput(
            f"an agent key's name is {NAME_RULE}, not {given!r}: choose another with "
            "webagents publish --key-name NAME",
            code="bad_key_name",
        )
    return name


def use_is_stale(key: AgentKey, now: datetime) -> bool:
    return key.last_used_at is None or now - key.last_used_at >= USE_PRECISION


class PresentedKeys(PreAuthLookup):
    """Agent keys by what a request presents: the verification itself, asked across
    accounts, answering only about the keys presented."""

    # The verification's query, built once: it runs for every request an agent key makes.
    _PRESENTED = (
        select(Agent, AgentKey)
        .join(AgentKey, AgentKey.agent_id == Agent.id)
        .where(AgentKey.key_hash == bindparam("key_hash"))
    )

    def presented(self, credential: str) -> tuple[Agent, AgentKey] | None:
        """The agent and key a presented credential is, revoked or not (the caller says
        which)."""
        found = self._session.execute(self._PRESENTED, {"key_hash": digest(credential)}).first()
        return (found[0], found[1]) if found is not None else None

    def live_among(self, key_ids: set[uuid.UUID]) -> set[uuid.UUID]:
        """Which of `key_ids` are keys not revoked (a deleted agent's are gone): what Portal
        Connect asks of the keys its open connections were opened with."""
        if not key_ids:
            return set()
        found = self._session.scalars(
            select(AgentKey.id).where(AgentKey.id.in_(key_ids), AgentKey.revoked_at.is_(None))
        )
        return set(found)

    def note_use(self, key_id: uuid.UUID, now: datetime) -> None:
        """Record a use of a key just verified (see USE_PRECISION); never moves
        `last_used_at` back."""
        self._session.execute(
            update(AgentKey)
            .where(AgentKey.id == key_id)
            .where((AgentKey.last_used_at.is_(None)) | (AgentKey.last_used_at < now))
            .values(last_used_at=now)
        )


class AgentKeys:
    """The keys of one agent of the scope's account (another account's: none at all, and no
    new one: an agent not the scope's is not found here, whoever found it)."""

    def __init__(self, session: Session, scope: AccountScope, agent: Agent) -> None:
        self._session = session
        self._scope = require_scope(scope)
        if agent.user_id != self._scope.user_id:
            raise NotFound("there is no such agent on this portal: check the agent's link")
        self._agent_id = agent.id

    def _base(self) -> Select[AgentKey]:
        return (
            select(AgentKey)
            .join(Agent, Agent.id == AgentKey.agent_id)
            .where(Agent.user_id == self._scope.user_id, AgentKey.agent_id == self._agent_id)
        )

    def make(self, name: str | None) -> MadeKey:
        """A new key for the agent."""
        raw = new_api_key()
        key = AgentKey(
            agent_id=self._agent_id,
            name=check_key_name(name),
            prefix=shown_prefix(raw),
            key_hash=digest(raw),
            created_at=datetime.now(UTC),
        )
        self._session.add(key)
        self._session.flush()
        return MadeKey(key, raw)

    def all(self) -> list[AgentKey]:
        return list(self._session.scalars(self._base().order_by(AgentKey.created_at)))

    def revoke(self, key_id: str) -> AgentKey:
        try:
            wanted = uuid.UUID(key_id)
        except ValueError:
            wanted = None
        key = (
            self._session.scalars(self._base().where(AgentKey.id == wanted)).one_or_none()
            if wanted is not None
            else None
        )
        if key is None:
            raise NotFound("this agent has no such key: see its keys on the agent's page")
        if key.revoked_at is None:
            key.revoked_at = datetime.now(UTC)
            self._session.flush()
        return key
