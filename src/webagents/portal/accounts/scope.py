"""AccountScope: the account a request was verified as, and so everything it may reach.

Only `auth.py` makes one, from a verified identity (a browser session, an API key, or an
administrator at the command line); every scoped repository refuses to be made without one,
and starts every query from it, so no query can run for nobody or for everybody.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

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


def require_scope(scope: object) -> AccountScope:
    if not isinstance(scope, AccountScope):
        raise TypeError(f"a scoped repository needs an AccountScope, not {type(scope).__name__}")
    return scope
