"""Alembic's environment: runs on the connection `migrate.py` hands it, or on the database
of WEBAGENTS_PORTAL_DATABASE_URL when a developer runs alembic against this folder."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import include_name
from webagents.portal.db.tables import Base, UtcDateTime
from webagents.portal.settings import resolve_settings


def _render_item(kind: str, thing: Any, _context: AutogenContext) -> str | Literal[False]:
    """New migrations spell UtcDateTime as what the database sees, so that they never
    import the models (which change after the migration is written)."""
    if kind == "type" and isinstance(thing, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
        render_item=_render_item,
        include_name=include_name,
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
