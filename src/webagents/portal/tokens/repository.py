"""All SQL of tokens. The signing keys are the portal's own, not an account's: no scope."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ..db.tables import SigningKey


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
