"""The portal from the command line: open and migrate its database, run a transaction, and
the administrator's accounts (adduser, apikey, passwd, invite). `webagents portal ...` calls
these."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from ..errors import ConfigError
from .accounts import service, sessions, sign_up
from .accounts.auth import administrator_scope
from .accounts.schemas import NewApiKey
from .db.engine import make_engine, make_sessions
from .db.migrate import upgrade
from .db.tables import SigningKey
from .scope import AccountScope
from .settings import PortalSettings
from .tokens.service import ensure_signing_key, rotate


def open_database(settings: PortalSettings) -> Engine:
    """The engine of a migrated database; a database that cannot be reached says why."""
    engine = make_engine(settings)
    try:
        upgrade(engine)
    except OperationalError as exc:
        engine.dispose()
        shown = settings.url.render_as_string(hide_password=True)
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise ConfigError(
            f"cannot open the portal database {shown}: {reason}; check --database "
            "(or WEBAGENTS_PORTAL_DATABASE_URL) and that the database server is running"
        ) from None
    with transaction(engine) as session:
        ensure_signing_key(session)
    return engine


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    with make_sessions(engine)() as session, session.begin():
        yield session


def add_user(engine: Engine, username: str, password: str) -> AccountScope:
    with transaction(engine) as session:
        return service.add_user(session, username, password)


def set_password(engine: Engine, username: str, password: str) -> AccountScope:
    """A new password for the user; every session and command-line sign-in of it ends."""
    with transaction(engine) as session:
        scope = administrator_scope(session, username)
        sessions.set_password(session, scope, password)
        return scope


def new_invite(engine: Engine, lifetime: timedelta) -> tuple[str, datetime]:
    with transaction(engine) as session:
        return sign_up.new_invite(session, lifetime)


def new_api_key(engine: Engine, username: str, name: str) -> NewApiKey:
    with transaction(engine) as session:
        return service.create_key(session, administrator_scope(session, username), name)


def rotate_keys(
    engine: Engine, settings: PortalSettings, activate_in: timedelta | None
) -> SigningKey:
    with transaction(engine) as session:
        return rotate(session, settings, activate_in)
