"""memory store: entries, versions, the change feed, vectors, and full-text search

Full-text search is the one dialect branch of the schema: SQLite gets an FTS5 table kept in
step with memory_entries by triggers, PostgreSQL a generated tsvector column with a GIN index.
Neither is in the models (db.migrate leaves them out of comparisons).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30 17:11:54.346913
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_entries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("namespace", sa.String(length=300), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cursor", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_memory_entries_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_entries")),
        sa.UniqueConstraint(
            "agent_id", "namespace", "key", name=op.f("uq_memory_entries_agent_id_namespace_key")
        ),
    )
    with op.batch_alter_table("memory_entries", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_entries_agent_id_cursor"), ["agent_id", "cursor"], unique=False
        )

    op.create_table(
        "memory_feeds",
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("last_cursor", sa.BigInteger(), nullable=False),
        sa.Column("vectors_version", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_memory_feeds_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("agent_id", name=op.f("pk_memory_feeds")),
    )
    op.create_table(
        "memory_versions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("entry_id", sa.Uuid(), nullable=False),
        sa.Column("namespace", sa.String(length=300), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("op", sa.String(length=8), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("by", sa.String(length=100), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cursor", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_memory_versions_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_versions")),
    )
    with op.batch_alter_table("memory_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_versions_agent_id_entry_id_cursor"),
            ["agent_id", "entry_id", "cursor"],
            unique=False,
        )

    op.create_table(
        "memory_vectors",
        sa.Column("entry_id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("entry_cursor", sa.BigInteger(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("embedded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_memory_vectors_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["entry_id"],
            ["memory_entries.id"],
            name=op.f("fk_memory_vectors_entry_id_memory_entries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("entry_id", name=op.f("pk_memory_vectors")),
    )
    with op.batch_alter_table("memory_vectors", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_vectors_agent_id_model"), ["agent_id", "model"], unique=False
        )

    _full_text_up()


def downgrade() -> None:
    _full_text_down()
    with op.batch_alter_table("memory_vectors", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_vectors_agent_id_model"))

    op.drop_table("memory_vectors")
    with op.batch_alter_table("memory_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_versions_agent_id_entry_id_cursor"))

    op.drop_table("memory_versions")
    op.drop_table("memory_feeds")
    with op.batch_alter_table("memory_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_entries_agent_id_cursor"))

    op.drop_table("memory_entries")


# The FTS5 table has the agent, the entry and the namespace as indexed columns, so a trigger
# finds an entry's row through the index (not by rowid, which a VACUUM may renumber) and a
# search narrows to one agent and its namespaces inside FTS5; queries match the note's own
# columns with a column filter.
_SQLITE_UP = [
    "CREATE VIRTUAL TABLE memory_fts USING fts5(entry_id, agent_id, namespace, "
    "key, description, content, tokenize = 'unicode61 remove_diacritics 2')",
    "CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_entries "
    "WHEN new.deleted_at IS NULL BEGIN "
    "INSERT INTO memory_fts (entry_id, agent_id, namespace, key, description, content) "
    "VALUES (new.id, new.agent_id, new.namespace, new.key, new.description, new.content); END",
    "CREATE TRIGGER memory_fts_update AFTER UPDATE OF key, description, content, deleted_at "
    "ON memory_entries BEGIN "
    "DELETE FROM memory_fts WHERE memory_fts MATCH 'entry_id:\"' || old.id || '\"'; "
    "INSERT INTO memory_fts (entry_id, agent_id, namespace, key, description, content) "
    "SELECT new.id, new.agent_id, new.namespace, new.key, new.description, new.content "
    "WHERE new.deleted_at IS NULL; END",
    "CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_entries BEGIN "
    "DELETE FROM memory_fts WHERE memory_fts MATCH 'entry_id:\"' || old.id || '\"'; END",
]
_SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS memory_fts_delete",
    "DROP TRIGGER IF EXISTS memory_fts_update",
    "DROP TRIGGER IF EXISTS memory_fts_insert",
    "DROP TABLE IF EXISTS memory_fts",
]
# 'simple': no language's stemming (notes are in any language); the content's first 100,000
# characters, so that no note outgrows a tsvector's 1 MB.
_POSTGRES_UP = [
    "ALTER TABLE memory_entries ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    "to_tsvector('simple'::regconfig, key || ' ' || description || ' ' || "
    "left(content, 100000))) STORED",
    "CREATE INDEX ix_memory_entries_search_vector ON memory_entries USING gin (search_vector)",
]
_POSTGRES_DOWN = [
    "DROP INDEX IF EXISTS ix_memory_entries_search_vector",
    "ALTER TABLE memory_entries DROP COLUMN IF EXISTS search_vector",
]


def _full_text_up() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_UP if dialect == "sqlite" else _POSTGRES_UP:
        op.execute(statement)


def _full_text_down() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_DOWN if dialect == "sqlite" else _POSTGRES_DOWN:
        op.execute(statement)
