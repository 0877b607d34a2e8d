"""All SQL of accounts.

`PreAuth` holds the lookups that come before anyone is verified (a username at sign-in,
a token or key by its hash, an invitation by its code), for auth.py and the sign-up and
sign-in services alone. `ApiKeys` and `SignIns` are scoped: made from an AccountScope, they
see that account's keys, and its browser sessions and command-line sign-ins, only.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.orm import Session

from ..db import dialect
from ..db.tables import (
    ApiKey,
    BrowserSession,
    Invite,
    IssuedToken,
    SignInAttempt,
    SignUp,
    User,
)
from ..scope import AccountScope, PreAuthLookup, require_scope

# The space of the sign-in locks among PostgreSQL's advisory locks (dialect.hold_lock): "wa"
# "si", and "wa" "su" for sign-ups by address.
_SIGN_IN_LOCKS = 0x77617369
_SIGN_UP_LOCKS = 0x77617375
# Kinds of issued tokens that are a command line's sign-in (listed, and ended, by the user).
CLI_KINDS = ("cli", "device", "key")


class PreAuth(PreAuthLookup):
    """The lookups before anyone is verified, and what signing in and up write."""

    def user_by_id(self, user_id: uuid.UUID) -> User | None:
        """The user an access token names (its signature verified by the caller)."""
        return self._session.get(User, user_id)

    def issued_token(self, jti: str) -> IssuedToken | None:
        """The record of a token this portal issued, by its id (to note its use)."""
        return self._session.get(IssuedToken, jti)

    def user_named(self, username: str) -> User | None:
        return self._session.scalars(select(User).where(User.username == username)).one_or_none()

    def add_user(self, username: str, password_hash: str) -> User:
        user = User(username=username, password_hash=password_hash)
        self._session.add(user)
        self._session.flush()
        return user

    def add_browser_session(
        self, user_id: uuid.UUID, token_hash: str, expires_at: datetime, address: str
    ) -> None:
        self._session.add(
            BrowserSession(
                user_id=user_id,
                token_hash=token_hash,
                expires_at=expires_at,
                address=address[:64],
                last_used_at=None,
            )
        )
        self._session.flush()

    def browser_session(self, token_hash: str, now: datetime) -> tuple[User, BrowserSession] | None:
        """The user of a live browser session, and the session."""
        found = self._session.execute(
            select(User, BrowserSession)
            .join(BrowserSession, BrowserSession.user_id == User.id)
            .where(BrowserSession.token_hash == token_hash, BrowserSession.expires_at > now)
        ).one_or_none()
        return (found[0], found[1]) if found is not None else None

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
        across every portal process (else N racing guesses all pass the count)."""
        dialect.hold_lock(self._session, _SIGN_IN_LOCKS, username)

    def hold_sign_ups_from(self, address: str) -> None:
        """The same for sign-ups from one address: counted and made one at a time."""
        dialect.hold_lock(self._session, _SIGN_UP_LOCKS, address)

    def sign_ups_since(self, since: datetime, address: str) -> int:
        query = select(func.count()).select_from(SignUp)
        query = query.where(SignUp.address == address[:64], SignUp.at > since)
        return self._session.scalar(query) or 0

    def add_sign_up(self, address: str, at: datetime, *, forget_before: datetime) -> None:
        self._session.execute(delete(SignUp).where(SignUp.at <= forget_before))
        self._session.add(SignUp(address=address[:64], at=at))
        self._session.flush()

    # Invitations to sign up.

    def add_invite(self, code_hash: str, now: datetime, expires_at: datetime) -> Invite:
        invite = Invite(code_hash=code_hash, created_at=now, expires_at=expires_at)
        self._session.add(invite)
        self._session.flush()
        return invite

    def invite_usable(self, code_hash: str, now: datetime) -> bool:
        found = self._session.scalar(
            select(Invite.id).where(
                Invite.code_hash == code_hash, Invite.used_at.is_(None), Invite.expires_at > now
            )
        )
        return found is not None

    def take_invite(self, code_hash: str, user_id: uuid.UUID, now: datetime) -> bool:
        """Use the invitation for this account; False when it is unknown, used or expired
        (two sign-ups racing for one code: one takes it)."""
        done = self._session.execute(
            update(Invite)
            .where(Invite.code_hash == code_hash, Invite.used_at.is_(None), Invite.expires_at > now)
            .values(used_at=now, used_by=user_id)
        )
        return bool(getattr(done, "rowcount", 0) == 1)

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


class SignIns:
    """One account's ways in that it can end: browser sessions and command-line sign-ins
    (access tokens from /cli/auth, the device grant, or an API key exchanged)."""

    def __init__(self, session: Session, scope: AccountScope) -> None:
        self._session = session
        self._scope = require_scope(scope)

    def browsers(self, now: datetime) -> list[BrowserSession]:
        return list(
            self._session.scalars(
                select(BrowserSession)
                .where(
                    BrowserSession.user_id == self._scope.user_id, BrowserSession.expires_at > now
                )
                .order_by(BrowserSession.created_at.desc(), BrowserSession.id)
            )
        )

    def command_lines(self, now: datetime) -> list[IssuedToken]:
        return list(
            self._session.scalars(
                select(IssuedToken)
                .where(
                    IssuedToken.user_id == self._scope.user_id,
                    IssuedToken.kind.in_(CLI_KINDS),
                    IssuedToken.revoked_at.is_(None),
                    IssuedToken.expires_at > now,
                )
                .order_by(IssuedToken.issued_at.desc(), IssuedToken.jti)
            )
        )

    def end_browser(self, session_id: uuid.UUID) -> bool:
        done = self._session.execute(
            delete(BrowserSession).where(
                BrowserSession.id == session_id, BrowserSession.user_id == self._scope.user_id
            )
        )
        return bool(getattr(done, "rowcount", 0) == 1)

    def end_command_line(self, jti: str, now: datetime) -> bool:
        done = self._session.execute(
            update(IssuedToken)
            .where(
                IssuedToken.jti == jti,
                IssuedToken.user_id == self._scope.user_id,
                IssuedToken.kind.in_(CLI_KINDS),
                IssuedToken.revoked_at.is_(None),
            )
            .values(revoked_at=now)
        )
        return bool(getattr(done, "rowcount", 0) == 1)

    def end_all(self, now: datetime, *, keep_browser: uuid.UUID | None = None) -> None:
        """End every browser session (but `keep_browser`) and every token of the account
        still live."""
        browsers = delete(BrowserSession).where(BrowserSession.user_id == self._scope.user_id)
        if keep_browser is not None:
            browsers = browsers.where(BrowserSession.id != keep_browser)
        self._session.execute(browsers)
        self._session.execute(
            update(IssuedToken)
            .where(
                IssuedToken.user_id == self._scope.user_id,
                IssuedToken.revoked_at.is_(None),
                IssuedToken.expires_at > now,
            )
            .values(revoked_at=now)
        )

    def user(self) -> User:
        """The account itself (its password hash, to check the current password)."""
        return self._session.get_one(User, self._scope.user_id)

    def set_password_hash(self, password_hash: str) -> None:
        self._session.execute(
            update(User).where(User.id == self._scope.user_id).values(password_hash=password_hash)
        )


def touch(session: Session, row: BrowserSession | IssuedToken, now: datetime, every: float) -> None:
    """Note when a session or sign-in was last used, at most once in `every` seconds (a
    write on every request would serialise them on SQLite for nothing)."""
    if row.last_used_at is not None and (now - row.last_used_at).total_seconds() < every:
        return
    row.last_used_at = now
    session.flush()
