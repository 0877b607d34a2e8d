"""The rules of accounts, shared by the pages, the API and the command line. Services flush,
never commit: the request's (or the command's) transaction does."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.tables import ApiKey
from ..errors import Conflict, NotFound, Unauthorized
from ..scope import AccountScope
from ..settings import PortalSettings
from ..tokens.credentials import digest, new_api_key, new_session_token, shown_prefix
from . import limits
from .auth import account_made, password_scope
from .password_policy import check_password
from .passwords import hash_password
from .repository import ApiKeys, PreAuth
from .schemas import (
    ApiKeyOut,
    NewApiKey,
    check_key_name,
    check_username,
    normalize_username,
)


@dataclass(frozen=True)
class SignedIn:
    """A new browser session: `token` goes in the cookie, only its hash in the table."""

    scope: AccountScope
    token: str


def add_user(db: Session, username: str, password: str) -> AccountScope:
    username = check_username(username)
    password = check_password(password, username)
    directory = PreAuth(db)
    if directory.user_named(username) is not None:
        raise Conflict(f"the username {username!r} is taken: choose another", code="username_taken")
    try:
        with db.begin_nested():  # two sign-ups racing for one name: the loser gets the 409
            user = directory.add_user(username, hash_password(password))
    except IntegrityError:
        raise Conflict(
            f"the username {username!r} is taken: choose another", code="username_taken"
        ) from None
    return account_made(user)


def sign_in(
    db: Session, settings: PortalSettings, username: str, password: str, address: str
) -> SignedIn:
    username = normalize_username(username)
    directory = PreAuth(db)
    directory.hold_sign_ins_of(username)  # until the request's transaction ends
    now = datetime.now(UTC)
    limits.check_allowed(directory, settings, username, address, now)
    scope = password_scope(directory.user_named(username), password)
    if scope is None:
        limits.record_failure(directory, settings, username, address, now)
        raise Unauthorized("wrong username or password", code="wrong_password")
    limits.record_success(directory, username, address)
    return new_browser_session(db, settings, scope, address)


def sign_out(db: Session, token: str | None) -> None:
    if token:
        PreAuth(db).end_browser_session(digest(token))


def new_browser_session(
    db: Session, settings: PortalSettings, scope: AccountScope, address: str
) -> SignedIn:
    token = new_session_token()
    expires = datetime.now(UTC) + settings.session_lifetime
    PreAuth(db).add_browser_session(scope.user_id, digest(token), expires, address)
    return SignedIn(scope, token)


def _key_out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut.model_validate(key, from_attributes=True)


def list_keys(db: Session, scope: AccountScope) -> list[ApiKeyOut]:
    return [_key_out(key) for key in ApiKeys(db, scope).all()]


def create_key(db: Session, scope: AccountScope, name: str) -> NewApiKey:
    name = check_key_name(name)
    key = new_api_key()
    row = ApiKeys(db, scope).add(name, shown_prefix(key), digest(key))
    return NewApiKey(key=key, api_key=_key_out(row))


def revoke_key(db: Session, scope: AccountScope, key_id: str) -> ApiKeyOut:
    """Revoke one of the account's keys; another's key, or none, is a 404 alike."""
    try:
        wanted = uuid.UUID(key_id)
    except ValueError:
        wanted = None
    key = ApiKeys(db, scope).get(wanted) if wanted is not None else None
    if key is None:
        raise NotFound("you have no such API key: see your keys on the API keys page")
    if key.revoked_at is None:
        key.revoked_at = datetime.now(UTC)
        db.flush()
    return _key_out(key)
