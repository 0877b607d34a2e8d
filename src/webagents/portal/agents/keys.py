"""The rules of an agent's keys, one per machine (P4): its owner lists them, adds one for
another machine (`webagents publish` there) and revokes one; another account's agent is a
404 like every agent of another account."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ..db.tables import AgentKey
from ..scope import AccountScope
from ..tokens.agent_keys import AgentKeys
from .schemas import KeyMade, KeyOut
from .service import get_agent


def key_out(key: AgentKey) -> KeyOut:
    return KeyOut(
        id=key.id,
        name=key.name,
        prefix=key.prefix,
        createdAt=key.created_at,
        lastUsedAt=key.last_used_at,
        revokedAt=key.revoked_at,
    )


def list_keys(db: Session, scope: AccountScope, agent_id: str) -> list[AgentKey]:
    agent = get_agent(db, scope, agent_id)
    return AgentKeys(db, scope, agent).all()


def add_key(db: Session, scope: AccountScope, agent_id: str, name: str | None) -> KeyMade:
    agent = get_agent(db, scope, agent_id)
    made = AgentKeys(db, scope, agent).make(name)
    return KeyMade(key=key_out(made.key), rawApiKey=made.raw)


def revoke_key(db: Session, scope: AccountScope, agent_id: str, key_id: str) -> AgentKey:
    agent = get_agent(db, scope, agent_id)
    return AgentKeys(db, scope, agent).revoke(key_id)
