"""Who may call an agent, and as whom: the one place the portal decides it, for every path
to the agent (a token for its `auth` skill, a request relayed over Portal Connect, and what
the agent's own verifier asks the portal).

The owner always calls as `owner`; another portal user calls as `user` only where the owner
allowed others (`allowOthers`), and is refused on every path where not.
"""

from __future__ import annotations

import uuid
from typing import Literal

from sqlalchemy.orm import Session

from ..db.tables import Agent
from ..errors import Forbidden, NotFound
from ..scope import AccountScope
from .repository import PublicAgents

Tier = Literal["owner", "user"]


def not_allowed(name: str) -> Forbidden:
    return Forbidden(
        f"the owner of {name!r} has not allowed other users to call it: ask them to allow "
        "others on the agent's page in the portal",
        code="not_allowed",
    )


def tier_of(agent: Agent, scope: AccountScope) -> Tier:
    """As whom this account calls the agent; a 403 where its owner has not allowed others."""
    if agent.user_id == scope.user_id:
        return "owner"
    if agent.allow_others:
        return "user"
    raise not_allowed(agent.name)


def allows_others(db: Session, agent_id: str) -> bool:
    """What the agent's verifier asks before it serves a user's token: the owner's choice as
    it stands now (a token minted before the owner turned others off names no new choice).
    An unknown agent is a 404, as for any other question about it."""
    try:
        wanted = uuid.UUID(agent_id)
    except ValueError:
        wanted = None
    found = PublicAgents(db).allows_others(wanted) if wanted is not None else None
    if found is None:
        raise NotFound("there is no such agent on this portal: check the agent's link")
    return found
