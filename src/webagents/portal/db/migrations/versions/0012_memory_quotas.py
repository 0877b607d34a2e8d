"""The memory store's quotas: each agent's live entries and bytes on its feed row

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 01:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("memory_feeds", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("entries", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("bytes", sa.BigInteger(), nullable=False, server_default="0"))
    # The counts of the entries already kept (UTF-8 bytes of their content, as the store
    # counts them); then no server default, as the models declare.
    octets = "octet_length(e.content)"
    if op.get_bind().dialect.name == "sqlite":
        octets = "length(CAST(e.content AS BLOB))"
    op.execute(
        "UPDATE memory_feeds SET "
        "entries = (SELECT count(*) FROM memory_entries e WHERE e.agent_id = "
        "memory_feeds.agent_id AND e.deleted_at IS NULL), "
        f"bytes = (SELECT coalesce(sum({octets}), 0) FROM memory_entries e WHERE e.agent_id = "
        "memory_feeds.agent_id AND e.deleted_at IS NULL)"
    )
    with op.batch_alter_table("memory_feeds", schema=None) as batch_op:
        batch_op.alter_column("entries", server_default=None)
        batch_op.alter_column("bytes", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("memory_feeds", schema=None) as batch_op:
        batch_op.drop_column("bytes")
        batch_op.drop_column("entries")
