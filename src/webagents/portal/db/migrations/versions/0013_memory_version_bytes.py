"""The bytes of the versions each agent's memory keeps, on its feed row (the version quotas)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 04:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("memory_feeds", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("version_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )
    # The versions already kept, counted as the store counts them (UTF-8 bytes of their
    # content); then no server default, as the models declare.
    octets = "octet_length(v.content)"
    if op.get_bind().dialect.name == "sqlite":
        octets = "length(CAST(v.content AS BLOB))"
    op.execute(
        f"UPDATE memory_feeds SET version_bytes = (SELECT coalesce(sum({octets}), 0) "
        "FROM memory_versions v WHERE v.agent_id = memory_feeds.agent_id)"
    )
    with op.batch_alter_table("memory_feeds", schema=None) as batch_op:
        batch_op.alter_column("version_bytes", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("memory_feeds", schema=None) as batch_op:
        batch_op.drop_column("version_bytes")
