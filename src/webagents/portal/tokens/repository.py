"""All SQL of tokens. The signing keys are the portal's own, not an account's: no scope."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ..db.tables import IssuedToken, SigningKey


class SigningKeys:
    def __init__(self, session: Session) -> None:
        self._session = session

    def all(self) -> list[SigningKey]:
        return list(self._session.scalars(select(SigningKey)))

    def add(self, key: SigningKey) -> SigningKey:
        self._session.add(key)
        self._session.flush()
        return key

    def remove(self, kids: list[str]) -> None:
        if kids:
            self._session.execute(delete(SigningKey).where(SigningKey.kid.in_(kids)))


class IssuedTokens:
    """The tokens issued, by jti: what a revocation (logout) is checked against."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def record(self, jti: str, user_id: uuid.UUID, expires_at: datetime, now: datetime) -> None:
        self._session.execute(delete(IssuedToken).where(IssuedToken.expires_at <= now))
        self._session.add(IssuedToken(jti=jti, user_id=user_id, expires_at=expires_at))
        self._session.flush()

    def is_live(self, jti: str) -> bool:
        found = self._session.get(IssuedToken, jti)
        return found is not None and found.revoked_at is None

    def revoke(self, jti: str, user_id: uuid.UUID, now: datetime) -> None:
        self._session.execute(
            update(IssuedToken)
            .where(IssuedToken.jti == jti, IssuedToken.user_id == user_id)
            .values(revoked_at=now)
        )
