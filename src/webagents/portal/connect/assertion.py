"""The assertion a relayed request carries: who the caller is, signed by the portal for one
agent (an RS256 JWT with `kid`, verified by the agent against /.well-known/jwks.json).

`typ: connect` keeps it apart from the agent tokens users hold (same audience): an agent
takes only this as a relay's caller, and the portal's API never takes it as a bearer token
(its audience is an agent's, and it is not an issued token)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from sqlalchemy.orm import Session

from ..tokens import keys as signing
from ..tokens import service as tokens
from ..tokens.repository import SigningKeys

LIFETIME = timedelta(seconds=60)
TYP = "connect"


def sign(
    db: Session,
    *,
    issuer: str,
    agent_id: uuid.UUID,
    user_id: uuid.UUID,
    username: str,
    tier: str,
    channel: str | None = None,
) -> str:
    """A fresh assertion (a new `jti` each time) valid for LIFETIME."""
    now = datetime.now(UTC)
    key = signing.signer(SigningKeys(db).all(), now)
    if key is None:
        tokens.ensure_signing_key(db)
        now = datetime.now(UTC)  # the new key is valid from its making, after the first `now`
        key = signing.signer(SigningKeys(db).all(), now)
        assert key is not None
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": f"agent:{agent_id}",
        "sub": str(user_id),
        "username": username,
        "tier": tier,
        "typ": TYP,
        "jti": uuid.uuid4().hex,
        "iat": int(now.timestamp()),
        "exp": int((now + LIFETIME).timestamp()),
    }
    if channel is not None:
        claims["channel"] = channel
    return jwt.encode(
        claims, signing.private_key(key), algorithm=key.algorithm, headers={"kid": key.kid}
    )
