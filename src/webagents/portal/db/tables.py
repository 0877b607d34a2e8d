"""Every table of the portal, under one MetaData with a naming convention.

Portable types only (Uuid, DateTime with time zone, String), so that SQLite and PostgreSQL
share one schema; constraint names come from the convention, so migrations can name them on
both databases (SQLite's batch mode needs the names).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A moment, always in UTC: PostgreSQL keeps the zone, SQLite does not (it would hand
    back naive times), so the zone is put back on reading and required on writing."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("the portal keeps times with their zone: give an aware datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        moment: datetime = value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UtcDateTime}  # noqa: RUF012 (SQLAlchemy reads it here)


class User(Base):
    """A person with an account (P1)."""

    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    username: Mapped[str] = mapped_column(String(32), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class BrowserSession(Base):
    """A signed-in browser: the cookie holds a random token, the table only its SHA-256, so
    that any portal process can check it and a leaked table signs no one in."""

    __tablename__ = "browser_sessions"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    # Shown on the account's sessions page, so that its owner knows which one to end.
    address: Mapped[str | None] = mapped_column(String(64))
    last_used_at: Mapped[datetime | None] = mapped_column()


class ApiKey(Base):
    """A user's `rok_...` key: shown once, kept as its SHA-256, revoked by date."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column()


class SignInAttempt(Base):
    """A failed sign-in, kept in the database so that every portal process counts it."""

    __tablename__ = "sign_in_attempts"
    __table_args__ = (
        Index(None, "username", "at"),
        Index(None, "address", "at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    username: Mapped[str] = mapped_column(String(64))
    address: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)


class SigningKey(Base):
    """A key the portal signs access tokens with (P2). A new key is published (in the JWKS)
    from `created_at` and signs from `activates_at`, so verifiers can fetch it first; a key
    replaced by a newer one stays published until the last token it signed has expired.
    The private key never leaves this table."""

    __tablename__ = "signing_keys"

    kid: Mapped[str] = mapped_column(String(64), primary_key=True)
    algorithm: Mapped[str] = mapped_column(String(16))
    private_pem: Mapped[str] = mapped_column(Text)
    public_jwk: Mapped[dict[str, str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    activates_at: Mapped[datetime] = mapped_column()


class IssuedToken(Base):
    """An access token the portal issued for its own API, by its `jti`: revoked at logout,
    and checked by every process. Rows go once the token has expired."""

    __tablename__ = "issued_tokens"

    jti: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    expires_at: Mapped[datetime] = mapped_column(index=True)
    revoked_at: Mapped[datetime | None] = mapped_column()
    # The API key it was given for (POST /api/auth/cli/token): revoking the key ends it.
    api_key_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("api_keys.id", ondelete="CASCADE"), index=True
    )
    # A command line's sign-in (`cli`: /cli/auth, `device`: the device grant, `key`: an API
    # key exchanged) is listed on the account's sessions page with these; a token for an
    # agent has no kind (the agent verifies it alone, and it lives minutes).
    kind: Mapped[str | None] = mapped_column(String(16))
    issued_at: Mapped[datetime | None] = mapped_column()
    address: Mapped[str | None] = mapped_column(String(64))
    last_used_at: Mapped[datetime | None] = mapped_column()


class Invite(Base):
    """An invitation to sign up (`webagents portal invite`), for a portal whose sign-up is
    `invite`: the code is shown once, kept as its SHA-256, and good for one account."""

    __tablename__ = "invites"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column()
    used_by: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )


class SignUp(Base):
    """An account made on the sign-up page, by address, kept for the sign-up limit's window
    (every portal process counts them); nothing links it to the account."""

    __tablename__ = "sign_ups"
    __table_args__ = (Index(None, "address", "at"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    address: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)


class DeviceCode(Base):
    """A pending device authorization (RFC 8628): the device polls with `device_code` (kept
    as its SHA-256), a signed-in person approves `user_code` on the /device page."""

    __tablename__ = "device_codes"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    device_code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_code: Mapped[str] = mapped_column(String(16), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE")
    )
    denied: Mapped[bool] = mapped_column(default=False)
    consumed_at: Mapped[datetime | None] = mapped_column()
    last_polled_at: Mapped[datetime | None] = mapped_column()


class Agent(Base):
    """An agent published by its owner (P4). Its name is unique on the portal (it names the
    agent's public endpoint); its keys, one per machine, are in `agent_keys`."""

    __tablename__ = "agents"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    instructions: Mapped[str] = mapped_column(Text, default="")
    model: Mapped[str | None] = mapped_column(String(200))
    skills: Mapped[list[Any] | dict[str, Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Portal Connect: may users other than the owner call it at its public endpoint (P12).
    allow_others: Mapped[bool] = mapped_column(default=False)


class AgentKey(Base):
    """One machine's key for an agent (`rawApiKey`, shown once, kept as its SHA-256): the
    first comes with the agent, and each profile that links the folder later (another
    machine) gets its own, named after that machine, so that one can be revoked and the
    others keep working. `last_used_at` is coarse (see tokens.agent_keys): a busy agent does
    not write on every request."""

    __tablename__ = "agent_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column()


class RetiredAgentName(Base):
    """A name an agent gave up (renamed or deleted): reserved for its owner until
    `reserved_until`, so that no other account takes it while callers still use the old
    address (issue 21: calls to the old URL reached the new owner's agent)."""

    __tablename__ = "retired_agent_names"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    reserved_until: Mapped[datetime] = mapped_column()


# The memory store (SPEC P5, P6). Full-text search has a dialect-only part that the models do
# not declare (SQLite's FTS5 table `memory_fts` and its triggers, PostgreSQL's `search_vector`
# column and GIN index): migration 0006 makes it, and db.migrate leaves it out of comparisons.


class MemoryEntry(Base):
    """An agent's note in one namespace. Its id is uuid5(URL, "<agent>\n<namespace>\n<key>"),
    so the row is the (namespace, key) itself: a forgotten entry stays as a tombstone
    (`deleted_at`), so that sync can tell it, and a later put brings the same row back."""

    __tablename__ = "memory_entries"
    __table_args__ = (
        UniqueConstraint("agent_id", "namespace", "key"),
        Index(None, "agent_id", "cursor"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    agent_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("agents.id", ondelete="CASCADE"))
    namespace: Mapped[str] = mapped_column(String(300))
    key: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text)
    content_sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column()
    deleted_at: Mapped[datetime | None] = mapped_column()
    # The change number of its latest change (the agent's feed, MemoryFeed.last_cursor).
    cursor: Mapped[int] = mapped_column(BigInteger)


class MemoryVersion(Base):
    """One change of an entry, kept so nothing is lost (P6): a put keeps what was written, a
    delete what was forgotten. `by` is `agent`, `sync` or `owner:<username>`."""

    __tablename__ = "memory_versions"
    __table_args__ = (Index(None, "agent_id", "entry_id", "cursor"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    agent_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("agents.id", ondelete="CASCADE"))
    entry_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    namespace: Mapped[str] = mapped_column(String(300))
    key: Mapped[str] = mapped_column(String(64))
    op: Mapped[str] = mapped_column(String(8))
    description: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text)
    content_sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(100))
    by: Mapped[str] = mapped_column(String(100))
    at: Mapped[datetime] = mapped_column()  # when the change happened (the writer's `at`)
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)
    cursor: Mapped[int] = mapped_column(BigInteger)


class MemoryFeed(Base):
    """Each agent's change counter. Writers of one agent take turns on this row (its UPDATE
    holds the row lock until commit), so cursors are given in commit order and a reader
    that saw cursor N has seen every change before it. `vectors_version` grows when the
    embedding worker stores vectors, so search caches know they are stale."""

    __tablename__ = "memory_feeds"

    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
    )
    last_cursor: Mapped[int] = mapped_column(BigInteger, default=0)
    vectors_version: Mapped[int] = mapped_column(BigInteger, default=0)
    # The agent's live entries and their content's bytes, kept by every change under this
    # row's lock: what the quotas are checked against (memory/quotas.py).
    entries: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    # The content's bytes of every version the agent's entries keep (forgotten entries'
    # included, the current text of each live entry too): without it, overwriting or
    # writing and forgetting would grow the store past every quota.
    version_bytes: Mapped[int] = mapped_column(BigInteger, default=0)


class MemoryVector(Base):
    """An entry's embedding (float32 bytes, unit length) by the model `model`, made from the
    entry as it was at `entry_cursor`: a vector whose model or cursor differs from now is
    due again (the queue is this table beside memory_entries, so any process can work it)."""

    __tablename__ = "memory_vectors"
    __table_args__ = (Index(None, "agent_id", "model"),)

    entry_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("memory_entries.id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("agents.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(200))
    entry_cursor: Mapped[int] = mapped_column(BigInteger)
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    embedded_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryRetention(Base):
    """How long an agent's memory keeps entries not updated (P6), in days: for one namespace,
    or for every caller's namespace at once (`caller:*`; a caller's own rule comes first)."""

    __tablename__ = "memory_retention"
    __table_args__ = (UniqueConstraint("agent_id", "namespace"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    namespace: Mapped[str] = mapped_column(String(300))
    days: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Chat(Base):
    """A conversation of one portal user with one of their agents (P9): recorded turn by
    turn by the agent's session skill, read by /resume elsewhere and by the chat pages. A
    session id names one chat per agent and user, so a client that lost the chat's id
    appends to the same chat instead of forking it."""

    __tablename__ = "chats"
    __table_args__ = (
        UniqueConstraint("agent_id", "user_id", "session_id"),
        Index(None, "user_id", "updated_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("users.id", ondelete="CASCADE"))
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    session_id: Mapped[str] = mapped_column(String(200))
    # Whole messages only (a message still missing parts is not counted or shown).
    message_count: Mapped[int] = mapped_column(default=0)
    preview: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChatMessage(Base):
    """One message of a chat at its position. `client_id` is the id the sender gave it (what
    makes a resent call record nothing twice); a long message comes in parts, appended to
    `content` in order until `parts_received` reaches `parts_total`."""

    __tablename__ = "chat_messages"
    __table_args__ = (
        UniqueConstraint("chat_id", "position"),
        UniqueConstraint("chat_id", "client_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    chat_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("chats.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column()
    client_id: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text)
    # tool_calls, tool_call_id, name: what the chat page and a resumed model need of tools.
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    parts_received: Mapped[int] = mapped_column(default=1)
    parts_total: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# Portal Connect (SPEC P12): who holds an agent's WebSocket, and relayed payloads too large
# for a NOTIFY. Written by the connect feature alone, each in a short session of its own.


# How often a portal process renews its connections' rows, and when a row not renewed is of
# a dead process: connect/directory.py keeps the rows, the agent's page counts them.
CONNECTION_HEARTBEAT = timedelta(seconds=5)
CONNECTION_STALE = CONNECTION_HEARTBEAT * 4


class AgentConnection(Base):
    """A live WebSocket of an agent, held by the portal process `process_id`. The process
    renews `seen_at` every CONNECTION_HEARTBEAT while it lives; a row not renewed for
    CONNECTION_STALE is of a dead process and is neither trusted nor kept."""

    __tablename__ = "agent_connections"
    __table_args__ = (Index(None, "agent_id", "seen_at"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)  # the connection id
    agent_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("agents.id", ondelete="CASCADE"))
    process_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    since: Mapped[datetime] = mapped_column(default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class RelayPayload(Base):
    """A relay message between portal processes too large for NOTIFY's 8000 bytes: the
    NOTIFY carries this row's id, and the receiver takes (deletes) the row."""

    __tablename__ = "relay_payloads"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
