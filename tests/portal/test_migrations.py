"""Migrations: from an empty database to head, and the models agree with them, on both
databases (what `alembic check` reports in CI)."""

from __future__ import annotations

from sqlalchemy import inspect

from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import (
    current_revision,
    head_revision,
    include_name,
    schema_differences,
    upgrade,
)
from webagents.portal.db.tables import Base
from webagents.portal.settings import PortalSettings


def test_p1_migrations_take_an_empty_database_to_head_matching_the_models(
    fresh_database_url: str,
) -> None:
    engine = make_engine(PortalSettings(database_url=fresh_database_url))
    try:
        assert inspect(engine).get_table_names() == []
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == head_revision() == "0010"
        tables = inspect(engine).get_table_names()
        assert sorted(t for t in tables if include_name(t, "table", {})) == sorted(
            [*Base.metadata.tables, "alembic_version"]
        )
        assert schema_differences(engine) == []
        upgrade(engine)  # at head already: nothing to do, nothing broken
        assert current_revision(engine) == "0010"
    finally:
        engine.dispose()


def test_p1_schema_differences_sees_a_table_the_migrations_lack(fresh_database_url: str) -> None:
    """The comparison can fail: a database missing one table of the models is reported."""
    engine = make_engine(PortalSettings(database_url=fresh_database_url))
    try:
        upgrade(engine)
        with engine.begin() as connection:
            connection.exec_driver_sql("DROP TABLE sign_in_attempts")
        assert sorted((kind, thing.name) for kind, thing in schema_differences(engine)) == [
            ("add_index", "ix_sign_in_attempts_address_at"),
            ("add_index", "ix_sign_in_attempts_username_at"),
            ("add_table", "sign_in_attempts"),
        ]
    finally:
        engine.dispose()
