"""All SQL of accounts.

`Directory` holds the lookups that come before anyone is verified (a username at sign-in,
a token or key by its hash), for auth.py and the sign-up and sign-in services alone.
`ApiKeys` is scoped: made from an AccountScope, it sees that account's keys only.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

from sqlalchemy import Select, delete, func, select, text
from sqlalchemy.orm import Session

from ..db.tables import ApiKey, BrowserSession, SignInAttempt, User
from .scope import AccountScope, require_scope

# The space of the sign-in locks among PostgreSQL's advisory locks (two-key form, apart from
# the migration's one-key lock): "wa" "si".
_SIGN_IN_LOCKS = 0x77617369


class Directory:
    def __init__(self, session: Session) -> None:
        self._session = session

    def user_named(self, username: str) -> User | None:
        return self._session.scalars(select(User).where(User.username == username)).one_or_none()

    def add_user(self, username: str, password_hash: str) -> User:
        user = User(username=username, password_hash=password_hash)
        self._session.add(user)
        self._session.flush()
        return user

    def add_browser_session(self, user: User, token_hash: str, expires_at: datetime) -> None:
        self._session.add(
            BrowserSession(user_id=user.id, token_hash=token_hash, expires_at=expires_at)
        )
        self._session.flush()

    def user_of_browser_session(self, token_hash: str, now: datetime) -> User | None:
        return self._session.scalars(
            select(User)
            .join(BrowserSession, BrowserSession.user_id == User.id)
            .where(BrowserSession.token_hash == token_hash, BrowserSession.expires_at > now)
        ).one_or_none()

    def end_browser_session(self, token_hash: str) -> None:
        self._session.execute(delete(BrowserSession).where(BrowserSession.token_hash == token_hash))

    def user_of_api_key(self, key_hash: str) -> tuple[User, uuid.UUID] | None:
        """The user of a live key, and the key's id."""
        found = self._session.execute(
            select(User, ApiKey.id)
            .join(ApiKey, ApiKey.user_id == User.id)
            .where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
        ).one_or_none()
        return (found[0], found[1]) if found is not None else None

    # Failed sign-ins, counted across every portal process.

    def hold_sign_ins_of(self, username: str) -> None:
        """Make this transaction the only one signing `username` in until it ends, so that
        counting the failures, checking the password and recording a failure are one step
        across every portal process (else N racing guesses all pass the count). SQLite needs
        nothing: its writing transactions (BEGIN IMMEDIATE) already take turns. PostgreSQL
        takes a transaction-scoped advisory lock keyed on the normalised username."""
        if self._session.get_bind().dialect.name != "postgresql":
            return
        key = int.from_bytes(hashlib.sha256(username.encode()).digest()[:4], "big", signed=True)
        self._session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"),
            {"space": _SIGN_IN_LOCKS, "key": key},
        )

    def failures_since(
        self, since: datetime, *, username: str | None = None, address: str | None = None
    ) -> int:
        query = select(func.count()).select_from(SignInAttempt).where(SignInAttempt.at > since)
        if username is not None:
            query = query.where(SignInAttempt.username == username)
        if address is not None:
            query = query.where(SignInAttempt.address == address)
        return self._session.scalar(query) or 0

    def add_failure(self, username: str, address: str, at: datetime) -> None:
        self._session.add(SignInAttempt(username=username, address=address, at=at))
        self._session.flush()

    def forget_failures(self, *, before: datetime) -> None:
        self._session.execute(delete(SignInAttempt).where(SignInAttempt.at <= before))

    def forget_failures_of(self, username: str, address: str) -> None:
        self._session.execute(
            delete(SignInAttempt).where(
                SignInAttempt.username == username, SignInAttempt.address == address
            )
        )


class ApiKeys:
    """One account's API keys."""

    def __init__(self, session: Session, scope: AccountScope) -> None:
        self._session = session
        self._scope = require_scope(scope)

    def _base(self) -> Select[ApiKey]:
        return select(ApiKey).where(ApiKey.user_id == self._scope.user_id)

    def all(self) -> list[ApiKey]:
        return list(self._session.scalars(self._base().order_by(ApiKey.created_at, ApiKey.id)))

    def get(self, key_id: uuid.UUID) -> ApiKey | None:
        return self._session.scalars(self._base().where(ApiKey.id == key_id)).one_or_none()

    def add(self, name: str, prefix: str, key_hash: str) -> ApiKey:
        key = ApiKey(user_id=self._scope.user_id, name=name, prefix=prefix, key_hash=key_hash)
        self._session.add(key)
        self._session.flush()
        return key
