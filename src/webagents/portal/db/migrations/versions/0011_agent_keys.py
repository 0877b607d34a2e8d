"""Agent keys, one per machine, and retired agent names reserved for their owner

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 00:40:00.000000
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The key each agent had before: it keeps working, under this name on the agent's page.
FIRST_KEY_NAME = "first key"


def upgrade() -> None:
    keys = op.create_table(
        "agent_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_keys_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_agent_keys_key_hash")),
    )
    op.create_index(op.f("ix_agent_keys_agent_id"), "agent_keys", ["agent_id"], unique=False)
    agents = sa.table(
        "agents",
        sa.column("id", sa.Uuid()),
        sa.column("key_hash", sa.String()),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    rows = (
        op.get_bind().execute(sa.select(agents.c.id, agents.c.key_hash, agents.c.created_at)).all()
    )
    op.bulk_insert(
        keys,
        [
            {
                "id": uuid.uuid4(),
                "agent_id": agent_id,
                "name": FIRST_KEY_NAME,
                "prefix": "rok_",  # the key itself was never kept: only its hash
                "key_hash": key_hash,
                "created_at": created_at or datetime.now(UTC),
                "last_used_at": None,
                "revoked_at": None,
            }
            for agent_id, key_hash, created_at in rows
        ],
    )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.drop_constraint("uq_agents_key_hash", type_="unique")
        batch_op.drop_column("key_hash")
    op.create_table(
        "retired_agent_names",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("reserved_until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_retired_agent_names_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_retired_agent_names")),
    )
    op.create_index(
        op.f("ix_retired_agent_names_user_id"), "retired_agent_names", ["user_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_retired_agent_names_user_id"), table_name="retired_agent_names")
    op.drop_table("retired_agent_names")
    # Back to one key an agent: the oldest live one (the others stop working).
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_hash", sa.String(length=64), nullable=True))
    bind = op.get_bind()
    keys = sa.table(
        "agent_keys",
        sa.column("agent_id", sa.Uuid()),
        sa.column("key_hash", sa.String()),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("revoked_at", sa.DateTime(timezone=True)),
    )
    agents = sa.table("agents", sa.column("id", sa.Uuid()), sa.column("key_hash", sa.String()))
    kept: dict[object, str] = {}
    for agent_id, key_hash in bind.execute(
        sa.select(keys.c.agent_id, keys.c.key_hash)
        .where(keys.c.revoked_at.is_(None))
        .order_by(keys.c.created_at.desc())
    ).all():
        kept[agent_id] = key_hash
    for agent_id, key_hash in kept.items():
        bind.execute(agents.update().where(agents.c.id == agent_id).values(key_hash=key_hash))
    for (agent_id,) in bind.execute(
        sa.select(agents.c.id).where(agents.c.key_hash.is_(None))
    ).all():
        bind.execute(
            agents.update()
            .where(agents.c.id == agent_id)
            .values(key_hash=uuid.uuid4().hex + uuid.uuid4().hex)
        )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.alter_column("key_hash", nullable=False)
        batch_op.create_unique_constraint("uq_agents_key_hash", ["key_hash"])
    op.drop_index(op.f("ix_agent_keys_agent_id"), table_name="agent_keys")
    op.drop_table("agent_keys")
