"""The scopes every query of the portal runs in, and so everything it may reach.

An AccountScope (the account a request was verified as) or an AgentScope (an agent verified
by its key) is made only by `accounts/auth.py`, from a verified identity; every scoped
repository refuses to be made without one, and starts every query from it, so no query can
run for nobody or for everybody. A SystemScope names a background job that works across
accounts (the embedding worker, the retention sweeper, Portal Connect's directory): unscoped
access is `grep -rn SystemScope`. The lookups that come before anyone is verified (a username
at sign-in, a token, key or code by its hash) are `PreAuthLookup`s, and nothing else is.
Every feature's repositories are made from these, so this module sits below them all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

_MINT = object()


@dataclass(frozen=True)
class AccountScope:
    user_id: uuid.UUID
    username: str
    _minted: object = field(default=None, repr=False, compare=False)
    # The API key the request was verified by, if it was one (tokens given for it die with it).
    api_key_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self._minted is not _MINT:
            raise TypeError(
                "an AccountScope is made only by accounts.auth, from a verified identity"
            )


def mint(user_id: uuid.UUID, username: str, api_key_id: uuid.UUID | None = None) -> AccountScope:
    """For accounts.auth alone: the identity has been verified there."""
    return AccountScope(user_id, username, _MINT, api_key_id)


@dataclass(frozen=True)
class AgentScope:
    """An agent verified by its key (the `rawApiKey` publish was given): its own memory
    store and nothing else. Made only by accounts.auth, like AccountScope."""

    agent_id: uuid.UUID
    user_id: uuid.UUID  # the agent's owner
    agent_name: str
    _minted: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._minted is not _MINT:
            raise TypeError("an AgentScope is made only by accounts.auth, from a verified key")


def mint_agent(agent_id: uuid.UUID, user_id: uuid.UUID, agent_name: str) -> AgentScope:
    """For accounts.auth alone: the agent's key has been verified there."""
    return AgentScope(agent_id, user_id, agent_name, _MINT)


@dataclass(frozen=True)
class SystemScope:
    """A background job's: it reads and writes across agents, for none of them in
    particular. `job` names it (in logs and in a grep)."""

    job: str


class PreAuthLookup:
    """The base of a repository of lookups made before anyone is verified (by a username,
    a hash or a code): what authentication and sign-up find their way in by."""

    def __init__(self, session: Session) -> None:
        self._session = session


def require_scope(scope: object) -> AccountScope:
    if not isinstance(scope, AccountScope):
        raise TypeError(f"a scoped repository needs an AccountScope, not {type(scope).__name__}")
    return scope


def require_agent_scope(scope: object) -> AgentScope:
    if not isinstance(scope, AgentScope):
        raise TypeError(f"an agent's store needs an AgentScope, not {type(scope).__name__}")
    return scope


def require_system_scope(scope: object) -> SystemScope:
    if not isinstance(scope, SystemScope):
        raise TypeError(
            f"a background job's repository needs a SystemScope, not {type(scope).__name__}"
        )
    return scope
