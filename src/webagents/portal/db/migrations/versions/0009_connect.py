"""Portal Connect: agents' allow_others, the live connections, relayed payloads (P12)

Revision ID: 0009
Revises: 0007 (0008 is another branch's: whichever merges second makes 0009 revise 0008)
Create Date: 2026-12-01 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing agents are not callable by others until their owner says so: false for all,
    # then no server default (the model gives it), as the models declare.
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("allow_others", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.alter_column("allow_others", server_default=None)
    op.create_table(
        "agent_connections",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("process_id", sa.Uuid(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_connections_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_connections")),
    )
    op.create_index(
        op.f("ix_agent_connections_agent_id_seen_at"),
        "agent_connections",
        ["agent_id", "seen_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_agent_connections_process_id"),
        "agent_connections",
        ["process_id"],
        unique=False,
    )
    op.create_table(
        "relay_payloads",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_relay_payloads")),
    )
    op.create_index(
        op.f("ix_relay_payloads_created_at"), "relay_payloads", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_relay_payloads_created_at"), table_name="relay_payloads")
    op.drop_table("relay_payloads")
    op.drop_index(op.f("ix_agent_connections_process_id"), table_name="agent_connections")
    op.drop_index(op.f("ix_agent_connections_agent_id_seen_at"), table_name="agent_connections")
    op.drop_table("agent_connections")
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_column("allow_others")
