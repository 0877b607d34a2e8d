"""Migrations: the one Alembic tree in `migrations/`, applied at start and by
`webagents portal migrate`; `schema_differences` is what `alembic check` would report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, inspect, text

from . import dialect, pgvector
from .tables import Base

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest migration's revision (tests/portal/test_migrations.py holds it to the tree's
# head): a start on a database at it reads one row and imports no Alembic, whose import was
# most of what a migrated database's `upgrade` cost each start of a portal command.
HEAD_REVISION = "0014"
# Any fixed number: portal processes starting together on one PostgreSQL take turns.
_MIGRATION_LOCK = 0x77E6A9E5


# Full-text search's dialect-only part (made by migration 0006, not declared in the models):
# SQLite's FTS5 table with its shadow tables, PostgreSQL's tsvector column and its index.
DIALECT_ONLY_TABLE_PREFIX = "memory_fts"
# And pgvector's column of memory_vectors and its indexes, where the extension is (pgvector.py).
DIALECT_ONLY_NAMES = {
    ("column", "search_vector"),
    ("index", "ix_memory_entries_search_vector"),
    ("column", pgvector.COLUMN),
}


def include_name(name: str | None, type_: str, _parents: Any) -> bool:
    """Whether migrations compare this database object with the models."""
    if type_ == "table" and name is not None and name.startswith(DIALECT_ONLY_TABLE_PREFIX):
        return False
    if type_ == "index" and name is not None and name.startswith(pgvector.INDEX_PREFIX):
        return False
    return (type_, name) not in DIALECT_ONLY_NAMES


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def _sqlite_foreign_keys(connection: Connection, on: bool) -> None:
    """SQLite's batch mode alters a table by copying it and dropping the old one; with
    foreign keys on, that DROP first deletes every row that references the table with ON
    DELETE CASCADE (an agent's keys, notes, chats), so migrations run with them off. The
    PRAGMA is a no-op inside a transaction: it goes to the driver's connection (autocommit,
    see engine.py) while the SQLAlchemy connection has none open."""
    connection.connection.driver_connection.execute(  # type: ignore[union-attr]
        f"PRAGMA foreign_keys = {'ON' if on else 'OFF'}"
    )


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest schema; on PostgreSQL, pgvector's part too (an
    extension installed since 0014 ran, an index built with other parameters: see
    pgvector.enable), at every start. Nothing else is done on a database at head."""
    with engine.connect() as connection:
        postgres = dialect.is_postgresql(connection)
        if postgres:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            connection.commit()
        try:
            at = _revision(connection)
            connection.rollback()  # _migrate's PRAGMA is a no-op inside a transaction
            if at != HEAD_REVISION:
                _migrate(connection, sqlite=not postgres)
            if postgres:
                pgvector.enable(connection)
                connection.commit()
        finally:
            if postgres:
                connection.rollback()
                connection.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK}
                )
                connection.commit()


def _revision(connection: Connection) -> str | None:
    """The revision the database is at, as Alembic keeps it (None: no migration ran)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _migrate(connection: Connection, *, sqlite: bool) -> None:
    """Alembic's upgrade to head, with SQLite's foreign keys off while it runs."""
    from alembic import command

    if sqlite:
        _sqlite_foreign_keys(connection, on=False)
    try:
        command.upgrade(alembic_config(connection), "head")
        connection.commit()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            connection.commit()
            if broken:
                raise RuntimeError(f"the migrations left rows without their parent: {broken}")
    finally:
        if sqlite:
            connection.rollback()
            _sqlite_foreign_keys(connection, on=True)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return _revision(connection)


def head_revision() -> str | None:
    """The head of the migrations' tree, as Alembic reads it (HEAD_REVISION's test)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def schema_differences(engine: Engine) -> list[Any]:
    """What the models have that the database lacks, or the reverse; empty when they agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "compare_type": True,
                "compare_server_default": True,
                "include_name": include_name,
            },
        )
        return list(compare_metadata(context, Base.metadata))
