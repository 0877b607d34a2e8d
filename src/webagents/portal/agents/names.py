"""Agent names, which are public addresses (`/agents/<name>/chat/completions`): unique on the
portal, and a name an agent gives up (renamed or deleted) stays its owner's for KEPT_FOR.

Why: callers keep calling an old address. Had another account taken the name at once, those
calls (with the callers' tokens, meant for the old agent) would reach the new owner's agent.
While the name is kept, its address answers 404 (no agent has it) and only the account that
gave it up may take it again; after KEPT_FOR anyone may (docs/portal.md says so).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from ..scope import AccountScope
from .repository import Agents

KEPT_FOR = timedelta(days=30)


def free_for(db: Session, scope: AccountScope, name: str) -> bool:
    """May this account give an agent `name` now?"""
    agents = Agents(db, scope)
    return not agents.name_taken(name) and not agents.name_kept_for_another(name, datetime.now(UTC))


def retire(db: Session, scope: AccountScope, name: str) -> None:
    Agents(db, scope).keep_name(name, datetime.now(UTC) + KEPT_FOR)


def taken_by_owner(db: Session, scope: AccountScope, name: str) -> None:
    """The name is an agent's again (its owner took it back, or a free name was taken)."""
    Agents(db, scope).release_name(name)
