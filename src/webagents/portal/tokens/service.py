"""Access tokens (P2): issued as RS256 JWTs with the signing key's `kid`, verified against
the published keys only; and key rotation, which publishes a new key before it signs."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from sqlalchemy.orm import Session

from ..db.tables import SigningKey
from ..errors import Unauthorized
from ..settings import PortalSettings
from . import keys as signing
from .repository import IssuedTokens, SigningKeys

# The audience of tokens for the portal's own API (tokens for an agent name the agent).
PORTAL_AUDIENCE = "webagents-portal"
JWKS_MAX_AGE = 300
# The issuer of a portal made without a public address: the one clients use by default.
LOCAL_ISSUER = "http://127.0.0.1:8700"


@dataclass(frozen=True)
class AccessToken:
    token: str
    claims: dict[str, Any]


def issuer_of(settings: PortalSettings) -> str:
    """The tokens' issuer: the configured public address, never one a request names (a Host
    header chose it before, so a client could have tokens issued in another portal's name).
    `portal serve` always configures one (its bound address when --public-url is not
    given, said at start); an app made in code without one uses LOCAL_ISSUER."""
    return (settings.public_url or LOCAL_ISSUER).rstrip("/")


def ensure_signing_key(db: Session) -> None:
    """The first key, when there is none (at start, and before the first token)."""
    repository = SigningKeys(db)
    if not repository.all():
        now = datetime.now(UTC)
        repository.add(signing.new_signing_key(now, activates_at=now))


def rotate(db: Session, settings: PortalSettings, activate_in: timedelta | None) -> SigningKey:
    """A new key, published now and signing after `activate_in` (default: the time
    verifiers may keep the old JWKS); keys whose tokens have all expired are removed."""
    now = datetime.now(UTC)
    ahead = settings.key_publish_ahead if activate_in is None else activate_in
    repository = SigningKeys(db)
    new = repository.add(signing.new_signing_key(now, activates_at=now + ahead))
    everything = repository.all()
    keep = {key.kid for key in signing.published(everything, now, settings.token_lifetime)}
    repository.remove([key.kid for key in everything if key.kid not in keep])
    return new


def jwks(db: Session, settings: PortalSettings) -> dict[str, list[dict[str, str]]]:
    keys = signing.published(SigningKeys(db).all(), datetime.now(UTC), settings.token_lifetime)
    return {"keys": [dict(key.public_jwk) for key in keys]}


def issue(
    db: Session,
    settings: PortalSettings,
    *,
    issuer: str,
    subject: uuid.UUID,
    username: str,
    audience: str = PORTAL_AUDIENCE,
    extra: dict[str, str] | None = None,
    api_key_id: uuid.UUID | None = None,
    sign_in: tuple[str, str] | None = None,
) -> AccessToken:
    """A signed token; one given for an API key (`api_key_id`) dies with that key. A
    command line's sign-in names its kind and address (`sign_in`): the account's sessions
    page lists it, and its owner can end it there."""
    key = signing.signer(SigningKeys(db).all(), datetime.now(UTC))
    if key is None:
        ensure_signing_key(db)
        key = signing.signer(SigningKeys(db).all(), datetime.now(UTC))
        assert key is not None
    now = datetime.now(UTC)
    lifetime = (
        settings.token_lifetime if audience == PORTAL_AUDIENCE else settings.agent_token_lifetime
    )
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": str(subject),
        "username": username,
        "aud": audience,
        "iat": int(now.timestamp()),
        "exp": int((now + lifetime).timestamp()),
        "jti": uuid.uuid4().hex,
        **(extra or {}),
    }
    token = jwt.encode(
        claims, signing.private_key(key), algorithm=key.algorithm, headers={"kid": key.kid}
    )
    IssuedTokens(db).record(claims["jti"], subject, now + lifetime, now, api_key_id, sign_in)
    return AccessToken(token, claims)


def revoke(db: Session, claims: dict[str, Any], user_id: uuid.UUID) -> None:
    """End a token before it expires (logout): every process refuses it from now on."""
    IssuedTokens(db).revoke(str(claims.get("jti", "")), user_id, datetime.now(UTC))


def verify(
    db: Session, settings: PortalSettings, token: str, *, issuer: str, audience: str
) -> dict[str, Any]:
    """The claims of a token this portal signed for `audience`; a 401 for anything else."""
    refused = "this token was not issued by this portal for this use: run webagents login"
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.PyJWTError:
        raise Unauthorized(f"{refused} (it is not a JWT)") from None
    now = datetime.now(UTC)
    known = {
        key.kid: key
        for key in signing.published(SigningKeys(db).all(), now, settings.token_lifetime)
    }
    key = known.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise Unauthorized(f"{refused} (unknown signing key)")
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            jwt.PyJWK(dict(key.public_jwk)),
            algorithms=[signing.ALGORITHM],
            audience=audience,
            issuer=issuer,
            options={"require": ["exp", "iat", "iss", "aud", "sub", "jti"]},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized(
            "your sign-in expired: run webagents login", code="token_expired"
        ) from None
    except jwt.PyJWTError as exc:
        raise Unauthorized(f"{refused} ({exc})") from None
    if not IssuedTokens(db).is_live(str(claims.get("jti", "")), str(claims.get("sub", ""))):
        raise Unauthorized(
            "this sign-in was ended (webagents logout, or its API key was revoked): "
            "run webagents login",
            code="token_revoked",
        )
    return claims
