"""issued tokens name the API key they were given for

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 16:15:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("issued_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("api_key_id", sa.Uuid(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_issued_tokens_api_key_id"), ["api_key_id"], unique=False
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_issued_tokens_api_key_id_api_keys"),
            "api_keys",
            ["api_key_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    with op.batch_alter_table("issued_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_issued_tokens_api_key_id_api_keys"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_issued_tokens_api_key_id"))
        batch_op.drop_column("api_key_id")
