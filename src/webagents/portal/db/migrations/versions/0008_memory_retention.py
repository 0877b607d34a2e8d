"""memory retention: how long each namespace of an agent's memory keeps entries (P6)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 17:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_retention",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("namespace", sa.String(length=300), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_memory_retention_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_retention")),
        sa.UniqueConstraint(
            "agent_id", "namespace", name=op.f("uq_memory_retention_agent_id_namespace")
        ),
    )
    with op.batch_alter_table("memory_retention", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_memory_retention_agent_id"), ["agent_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("memory_retention", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_retention_agent_id"))
    op.drop_table("memory_retention")
