"""Who a credential is: the only code that turns one into an AccountScope or AgentScope
(dependencies.py hands it a request's cookie or Authorization header).

A browser is its session cookie; an API call is `Authorization: Bearer` with a `rok_...`
key or an access token the portal signed; the
command line's administrator names a user; signing in is a password (`password_scope`), and
a new account is its maker's (`account_made`). A bearer credential that fails is a 401, never
a request by nobody.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from ..db.tables import AgentKey, User
from ..errors import NotFound, Unauthorized
from ..scope import AccountScope, AgentScope, mint, mint_agent
from ..settings import PortalSettings
from ..tokens import agent_keys
from ..tokens import service as tokens
from ..tokens.credentials import API_KEY_PREFIX, digest
from .passwords import verify_password
from .repository import PreAuth, touch


class SignInRequired(Unauthorized):
    """A page that needs a signed-in browser: the pages answer it with the sign-in page."""

    code = "sign_in_required"


# How often a session's or sign-in's "last used" is written, at most (seconds).
LAST_USED_EVERY = 60.0


def _scope_of(user: User) -> AccountScope:
    return mint(user.id, user.username)


def password_scope(user: User | None, password: str) -> AccountScope | None:
    """The account whose password this is, or None: a wrong password, or no such user
    (checked against a stand-in hash then, so the answer takes as long either way)."""
    if not verify_password(user.password_hash if user else None, password) or user is None:
        return None
    return _scope_of(user)


def account_made(user: User) -> AccountScope:
    """The account a sign-up or the administrator's adduser has just made: its maker is
    who it is (sign-up then signs them in)."""
    return _scope_of(user)


def browser_scope(db: Session, token: str | None) -> AccountScope | None:
    if not token:
        return None
    now = datetime.now(UTC)
    found = PreAuth(db).browser_session(digest(token), now)
    if found is None:
        return None
    user, session = found
    touch(db, session, now, LAST_USED_EVERY)
    return _scope_of(user)


_SEND_API_KEY = (
    "send your API key as 'Authorization: Bearer rok_...' "
    "(make one on the portal's API keys page, or with webagents portal apikey)"
)
_SEND_AGENT_KEY = (
    "send the agent's key as 'Authorization: Bearer rok_...' (the key webagents publish "
    "kept for the agent, or WEBAGENTS_AGENT_TOKEN)"
)


def _bearer(authorization: str | None, missing: str = _SEND_API_KEY) -> str:
    scheme, _, credential = (authorization or "").partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise Unauthorized(missing)
    return credential


def api_key_scope(db: Session, authorization: str | None) -> AccountScope:
    """The account of a `rok_...` key; nothing else is accepted."""
    credential = _bearer(authorization)
    if not credential.startswith(API_KEY_PREFIX):
        raise Unauthorized("this credential is not a portal API key (rok_...)")
    found = PreAuth(db).user_of_api_key(digest(credential))
    if found is None:
        raise Unauthorized("this API key is unknown or was revoked: make a new one on the portal")
    user, key_id = found
    return mint(user.id, user.username, key_id)


def bearer_scope(
    db: Session, settings: PortalSettings, authorization: str | None, *, issuer: str
) -> AccountScope:
    """The account of a `rok_...` key or of an access token this portal signed for its API."""
    credential = _bearer(authorization)
    if credential.startswith(API_KEY_PREFIX):
        return api_key_scope(db, authorization)
    claims = tokens.verify(db, settings, credential, issuer=issuer, audience=tokens.PORTAL_AUDIENCE)
    preauth = PreAuth(db)
    issued = preauth.issued_token(str(claims["jti"]))
    if issued is not None and issued.kind is not None:
        touch(db, issued, datetime.now(UTC), LAST_USED_EVERY)
    try:
        user = preauth.user_by_id(uuid.UUID(str(claims["sub"])))
    except ValueError:
        user = None
    if user is None:
        raise Unauthorized("the account of this token no longer exists: run webagents login")
    return _scope_of(user)


def agent_key_scope(db: Session, authorization: str | None) -> AgentScope:
    """The agent whose key (`rawApiKey` from publish) this is, its use noted; a user's key
    or access token is refused: they speak for a person, and the memory store is the
    agent's. A revoked key is refused with the command that gives the machine a new one."""
    return agent_and_key(db, authorization)[0]


def agent_key_scope_read_only(db: Session, authorization: str | None) -> AgentScope:
    """As agent_key_scope, its use not noted: for a session that only reads, which never
    writes (db/engine.py's `read_only`)."""
    return _agent_and_key(db, authorization)[0]


def agent_and_key(db: Session, authorization: str | None) -> tuple[AgentScope, AgentKey]:
    """As agent_key_scope, with the key itself: Portal Connect keeps it for as long as the
    connection it opened lives, and ends the connection when the key is revoked."""
    scope, key = _agent_and_key(db, authorization)
    now = datetime.now(UTC)
    if agent_keys.use_is_stale(key, now):
        agent_keys.PresentedKeys(db).note_use(key.id, now)
    return scope, key


def _agent_and_key(db: Session, authorization: str | None) -> tuple[AgentScope, AgentKey]:
    credential = _bearer(authorization, _SEND_AGENT_KEY)
    found = agent_keys.PresentedKeys(db).presented(credential)
    if found is not None:
        agent, key = found
        if key.revoked_at is not None:
            raise Unauthorized(
                f"this machine's key for the agent {agent.name!r} ({key.name!r}) was revoked "
                "on the portal: run webagents publish in the agent's folder to give this "
                "machine a new key",
                code="agent_key_revoked",
            )
        return mint_agent(agent.id, agent.user_id, agent.name), key
    hashed = digest(credential)
    if credential.startswith(API_KEY_PREFIX) and PreAuth(db).user_of_api_key(hashed):
        raise Unauthorized(
            "this is a user's API key, and the memory store needs an agent key: use the key "
            "webagents publish kept for the agent (or WEBAGENTS_AGENT_TOKEN)",
            code="agent_key_required",
        )
    if not credential.startswith(API_KEY_PREFIX):
        raise Unauthorized(
            "an access token speaks for a user, and the memory store needs an agent key: use "
            "the key webagents publish kept for the agent (or WEBAGENTS_AGENT_TOKEN)",
            code="agent_key_required",
        )
    raise Unauthorized(
        "this agent key is unknown (the agent was deleted, or the key is wrong): use the "
        "key webagents publish kept for the agent (or WEBAGENTS_AGENT_TOKEN)"
    )


def administrator_scope(db: Session, username: str) -> AccountScope:
    """For the command line, whose user holds the database itself."""
    from .schemas import normalize_username

    user = PreAuth(db).user_named(normalize_username(username))
    if user is None:
        raise NotFound(f"no user {username!r}: add one with webagents portal adduser {username}")
    return _scope_of(user)
