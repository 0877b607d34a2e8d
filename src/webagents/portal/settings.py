"""The portal's settings, checked once at start: the database, sessions, sign-in limits,
the memory store's quotas (enforced by memory/quotas.py).

The database URL comes from `--database`, else `WEBAGENTS_PORTAL_DATABASE_URL`, else a
SQLite file under the profile's `~/.webagents/portal/` (folder 0700, file 0600).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .._files import ensure_private_dir, ensure_private_file
from ..errors import ConfigError
from ..home import webagents_home
from .db.gate import GateLimits

DATABASE_ENV = "WEBAGENTS_PORTAL_DATABASE_URL"
DEFAULT_PORT = 8700
MB = 1024 * 1024


def portal_dir(profile: str | None = None) -> Path:
    """Where the embedded portal keeps its database: `~/.webagents/portal/`."""
    return webagents_home(profile) / "portal"


@dataclass(frozen=True)
class MemoryQuotas:
    """The bounds, as `webagents portal serve` sets them (defaults: sized for notes, not
    for files: an agent's 10,000 notes of 10 KB would be 100 MB)."""

    agent_entries: int = 10_000
    agent_bytes: int = 100 * MB
    user_entries: int = 50_000
    user_bytes: int = 500 * MB
    versions_per_entry: int = 20
    # Versions hold each note's current text too: three times the live bytes leaves room
    # for a few versions of every note, and for notes forgotten within retention.
    agent_version_bytes: int = 300 * MB
    user_version_bytes: int = 1500 * MB


DEFAULT_QUOTAS = MemoryQuotas()

# The options of `portal serve` that set each bound: messages name them.
OPTIONS = {
    "agent_entries": "--memory-agent-entries",
    "agent_bytes": "--memory-agent-bytes",
    "user_entries": "--memory-user-entries",
    "user_bytes": "--memory-user-bytes",
    "versions_per_entry": "--memory-versions",
    "agent_version_bytes": "--memory-agent-version-bytes",
    "user_version_bytes": "--memory-user-version-bytes",
}

_SIZE = re.compile(r"(\d+)\s*([KMG]B?|B)?", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": MB, "G": 1024 * MB}


def parse_size(given: str) -> int:
    """A size as an option gives it: bytes, or with K, M or G (1024-based): `100MB`;
    ValueError with what is expected otherwise."""
    found = _SIZE.fullmatch(given.strip())
    if found is None or int(found.group(1)) < 1:
        raise ValueError(f"a size like 100MB, 512K or 1G (or bytes: 1048576), not {given!r}")
    unit = (found.group(2) or "").upper().removesuffix("B")
    return int(found.group(1)) * _UNITS[unit]


@dataclass(frozen=True)
class PortalSettings:
    database_url: str
    session_lifetime: timedelta = timedelta(days=14)
    # Failed sign-ins allowed within the window before every attempt is answered 429:
    # per account and address pair (guessing one password; the owner at another address
    # is not locked out) and per address (trying many accounts).
    sign_in_window: timedelta = timedelta(minutes=15)
    sign_in_failures_per_account: int = 5
    sign_in_failures_per_address: int = 20
    # Who may make an account on the sign-up page (`portal serve --sign-up`): anyone
    # (`open`), whoever holds an invitation (`invite`, made by `webagents portal invite`), or
    # nobody (`closed`: the administrator adds users with `webagents portal adduser`).
    sign_up: str = "open"
    # Accounts one address may make on the sign-up page within the window.
    sign_ups_per_address: int = 5
    sign_up_window: timedelta = timedelta(hours=1)
    # Access tokens (P2): how long one is valid, and how long a rotated-in key is published
    # before it signs (verifiers cache the JWKS for at most JWKS_MAX_AGE).
    token_lifetime: timedelta = timedelta(hours=24)
    # A token for calling an agent: the agent verifies it offline (JWKS) and cannot see a
    # logout or a revoked key, so it is short-lived; the CLI asks for a new one as needed.
    agent_token_lifetime: timedelta = timedelta(minutes=15)
    key_publish_ahead: timedelta = timedelta(minutes=10)
    # The portal's address as clients reach it (the tokens' issuer). `portal serve` always
    # sets one; None (an app made in code): tokens.service.LOCAL_ISSUER, never a Host header.
    public_url: str | None = None
    # The memory store's embedding model (`portal serve --embeddings`): local, openai[:MODEL]
    # or none (full-text search only). `serve` defaults to local; made in code, none.
    embeddings: str = "none"
    # The largest request body the portal reads (413 above it), before any route parses it.
    max_body_bytes: int = 10 * 1024 * 1024
    # Portal Connect: how many WebSockets one agent may hold open at once (all processes).
    max_connections_per_agent: int = 16
    # The memory store's quotas (`portal serve --memory-...`): entries, bytes, versions.
    memory_quotas: MemoryQuotas = DEFAULT_QUOTAS
    # How many requests work on the database at once (the pool holds as many connections),
    # how many more may wait for a turn and for how long; beyond, 503 (db/gate.py).
    db_gate: GateLimits = field(default_factory=GateLimits)

    @property
    def url(self) -> URL:
        return make_url(self.database_url)

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"


def resolve_settings(database: str | None = None, *, profile: str | None = None) -> PortalSettings:
    """Settings from the command line and the environment, checked; the SQLite file made."""
    given = database or os.environ.get(DATABASE_ENV) or None
    if given is None:
        path = ensure_private_dir(portal_dir(profile)) / "portal.db"
        _private_sqlite_file(path)
        return PortalSettings(database_url=_sqlite_url(path))
    url = check_database_url(given)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(url.database or "").expanduser()
        _private_sqlite_file(path)
        return PortalSettings(database_url=_sqlite_url(path))
    return PortalSettings(database_url=url.render_as_string(hide_password=False))


def check_database_url(given: str) -> URL:
    """The URL if the portal can use it; otherwise a ConfigError that names the fix."""
    where = "--database or " + DATABASE_ENV
    try:
        url = make_url(given)
    except ArgumentError:
        raise ConfigError(
            f"the portal database URL ({where}) is not a URL: write sqlite:///PATH/portal.db "
            "or postgresql+psycopg://USER:PASSWORD@HOST/DATABASE"
        ) from None
    backend, driver = url.get_backend_name(), url.get_driver_name()
    if backend == "sqlite" and driver == "pysqlite":
        if url.database in (None, "", ":memory:"):
            raise ConfigError(
                f"the portal database ({where}) must be a file, not an in-memory SQLite "
                "database: write sqlite:///PATH/portal.db"
            )
        return url
    if backend == "postgresql" and driver == "psycopg":
        return url
    if backend == "postgresql":
        raise ConfigError(
            f"the portal talks to PostgreSQL through psycopg 3: write postgresql+psycopg://... "
            f"instead of {url.drivername}://... ({where})"
        )
    raise ConfigError(
        f"the portal keeps its data in SQLite or PostgreSQL, not {backend!r} ({where}): write "
        "sqlite:///PATH/portal.db or postgresql+psycopg://USER:PASSWORD@HOST/DATABASE"
    )


SIGN_UP_MODES = ("open", "invite", "closed")


def check_sign_up(given: str) -> str:
    """`--sign-up` (or WEBAGENTS_PORTAL_SIGN_UP): one of SIGN_UP_MODES."""
    chosen = given.strip().lower()
    if chosen not in SIGN_UP_MODES:
        raise ConfigError(
            f"--sign-up (or WEBAGENTS_PORTAL_SIGN_UP) is open, invite or closed, not {given!r}"
        )
    return chosen


def check_public_url(given: str | None) -> str | None:
    """The portal's public address without a trailing slash; None stays None."""
    if given is None:
        return None
    parts = urlsplit(given.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ConfigError(
            f"--public-url (or WEBAGENTS_PORTAL_PUBLIC_URL) must be the address clients use, "
            f"like https://portal.example.com, not {given!r}"
        )
    return given.strip().rstrip("/")


def _private_sqlite_file(path: Path) -> None:
    """The database file 0600 before SQLite opens it (its -wal/-shm files take its mode);
    a missing folder is made 0700, an existing one left as its owner set it."""
    if not path.parent.exists():
        ensure_private_dir(path.parent)
    if not path.parent.is_dir():
        raise ConfigError(f"{path.parent} is not a folder: give a database file in a folder")
    ensure_private_file(path)


def _sqlite_url(path: Path) -> str:
    return URL.create("sqlite+pysqlite", database=str(path.resolve())).render_as_string()
