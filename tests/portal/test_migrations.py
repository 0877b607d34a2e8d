"""Migrations: from an empty database to head, and the models agree with them, on both
databases (what `alembic check` reports in CI)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from webagents.portal.accounts.auth import agent_key_scope
from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import (
    HEAD_REVISION,
    alembic_config,
    current_revision,
    head_revision,
    include_name,
    schema_differences,
    upgrade,
)
from webagents.portal.db.tables import AgentKey, Base
from webagents.portal.settings import PortalSettings
from webagents.portal.tokens.credentials import digest


@pytest.mark.pgvector  # also with pgvector's column and indexes, left out of the comparison
def test_p1_migrations_take_an_empty_database_to_head_matching_the_models(
    empty_database_url: str,
) -> None:
    engine = make_engine(PortalSettings(database_url=empty_database_url))
    try:
        assert inspect(engine).get_table_names() == []
        assert current_revision(engine) is None
        upgrade(engine)
        # The revision a start compares with, without Alembic, is the tree's head.
        assert current_revision(engine) == head_revision() == HEAD_REVISION
        tables = inspect(engine).get_table_names()
        assert sorted(t for t in tables if include_name(t, "table", {})) == sorted(
            [*Base.metadata.tables, "alembic_version"]
        )
        assert schema_differences(engine) == []
        upgrade(engine)  # at head already: nothing to do, nothing broken
        assert current_revision(engine) == HEAD_REVISION
        assert schema_differences(engine) == []
    finally:
        engine.dispose()


def test_p1_schema_differences_sees_a_table_the_migrations_lack(empty_database_url: str) -> None:
    """The comparison can fail: a database missing one table of the models is reported."""
    engine = make_engine(PortalSettings(database_url=empty_database_url))
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


def test_p4_migration_0011_keeps_each_agents_key_working_as_its_first_key(
    empty_database_url: str,
) -> None:
    """An agent published before keys were per machine keeps its key: 0011 moves it to
    agent_keys (named "first key"), the memory store still takes it, and nothing that
    refers to the agent is lost when its table is altered."""
    engine = make_engine(PortalSettings(database_url=empty_database_url))
    try:
        with engine.connect() as connection:
            command.upgrade(alembic_config(connection), "0009")
            connection.commit()
        user_id, agent_id, key = uuid.uuid4(), uuid.uuid4(), "rok_" + "k" * 43
        now = datetime.now(UTC)
        users = sa.table(
            "users",
            sa.column("id", sa.Uuid()),
            sa.column("username", sa.String()),
            sa.column("password_hash", sa.String()),
            sa.column("created_at", sa.DateTime(timezone=True)),
        )
        agents = sa.table(
            "agents",
            *(sa.column(name, sa.String()) for name in ("name", "description", "instructions")),
            sa.column("id", sa.Uuid()),
            sa.column("user_id", sa.Uuid()),
            sa.column("skills", sa.JSON()),
            sa.column("key_hash", sa.String()),
            sa.column("created_at", sa.DateTime(timezone=True)),
            sa.column("updated_at", sa.DateTime(timezone=True)),
            sa.column("allow_others", sa.Boolean()),
        )
        connections = sa.table(
            "agent_connections",
            *(sa.column(name, sa.Uuid()) for name in ("id", "agent_id", "process_id")),
            sa.column("since", sa.DateTime(timezone=True)),
            sa.column("seen_at", sa.DateTime(timezone=True)),
        )
        connection_id = uuid.uuid4()
        with engine.begin() as connection:
            connection.execute(
                users.insert().values(
                    id=user_id, username="alice", password_hash="x", created_at=now
                )
            )
            connection.execute(
                agents.insert().values(
                    id=agent_id,
                    user_id=user_id,
                    name="helper",
                    description="",
                    instructions="",
                    skills=[],
                    key_hash=digest(key),
                    created_at=now,
                    updated_at=now,
                    allow_others=False,
                )
            )
            connection.execute(
                connections.insert().values(
                    id=connection_id,
                    agent_id=agent_id,
                    process_id=uuid.uuid4(),
                    since=now,
                    seen_at=now,
                )
            )
        upgrade(engine)
        with Session(engine) as db:
            stored = db.scalars(select(AgentKey)).one()
            assert (stored.agent_id, stored.name, stored.key_hash, stored.revoked_at) == (
                agent_id,
                "first key",
                digest(key),
                None,
            )
            assert agent_key_scope(db, f"Bearer {key}").agent_id == agent_id
            # SQLite alters agents by copying it: rows that refer to it stay (foreign keys
            # off while migrating; with them on, the DROP of the old table deleted them).
            kept = db.execute(select(connections.c.id)).scalars().all()
            assert kept == [connection_id]
        assert schema_differences(engine) == []
    finally:
        engine.dispose()
