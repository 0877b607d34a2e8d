"""Alembic's environment: runs on the connection `migrate.py` hands it, or on the database
of WEBAGENTS_PORTAL_DATABASE_URL when a developer runs alembic against this folder."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from webagents.portal.db.engine import make_engine
from webagents.portal.db.tables import Base
from webagents.portal.settings import resolve_settings


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


given = context.config.attributes.get("connection")
if given is not None:
    _run(given)
else:
    with make_engine(resolve_settings()).connect() as connection:
        _run(connection)
        connection.commit()
