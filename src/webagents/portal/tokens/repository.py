"""All SQL of tokens: lookups before anyone is verified (a token is verified by them). The
signing keys are the portal's own, not an account's."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, select, update

from ..db.tables import ApiKey, IssuedToken, SigningKey
from ..scope import PreAuthLookup


class SigningKeys(PreAuthLookup):
    """The keys every token is verified by, before anyone is known."""

    def all(self) -> list[SigningKey]:
        return list(self._session.scalars(select(SigningKey)))

    def add(self, key: SigningKey) -> SigningKey:
        self._session.add(key)
        self._session.flush()
        return key

    def remove(self, kids: list[str]) -> None:
        if kids:
            self._session.execute(delete(SigningKey).where(SigningKey.kid.in_(kids)))


class IssuedTokens(PreAuthLookup):
    """The tokens issued, by jti: what a revocation (logout) is checked against."""

    def record(
        self,
        jti: str,
        user_id: uuid.UUID,
        expires_at: datetime,
        now: datetime,
        api_key_id: uuid.UUID | None = None,
        sign_in: tuple[str, str] | None = None,
    ) -> None:
        self._session.execute(delete(IssuedToken).where(IssuedToken.expires_at <= now))
        kind, address = sign_in if sign_in is not None else (None, None)
        self._session.add(
            IssuedToken(
                jti=jti,
                user_id=user_id,
                expires_at=expires_at,
                api_key_id=api_key_id,
                kind=kind,
                issued_at=now,
                address=address[:64] if address else None,
            )
        )
        self._session.flush()

    def is_live(self, jti: str, subject: str) -> bool:
        """Issued to `subject` under this jti, not revoked, and (if it was given for an API
        key) its key not revoked. The subject is part of the question: a token whose jti is
        live but names another user is not the token that was issued."""
        try:
            user_id = uuid.UUID(subject)
        except ValueError:
            return False
        found = self._session.execute(
            select(IssuedToken.revoked_at, ApiKey.revoked_at)
            .outerjoin(ApiKey, ApiKey.id == IssuedToken.api_key_id)
            .where(IssuedToken.jti == jti, IssuedToken.user_id == user_id)
        ).first()
        return found is not None and found[0] is None and found[1] is None

    def revoke(self, jti: str, user_id: uuid.UUID, now: datetime) -> None:
        self._session.execute(
            update(IssuedToken)
            .where(IssuedToken.jti == jti, IssuedToken.user_id == user_id)
            .values(revoked_at=now)
        )
