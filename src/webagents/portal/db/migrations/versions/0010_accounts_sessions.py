"""accounts' sessions listed (where from, last used), invitations and sign-ups by address

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 00:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("browser_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("address", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("issued_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("issued_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("address", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "invites",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_by", sa.Uuid(), nullable=True),
        sa.ForeignKeyConstraint(
            ["used_by"], ["users.id"], name=op.f("fk_invites_used_by_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invites")),
        sa.UniqueConstraint("code_hash", name=op.f("uq_invites_code_hash")),
    )
    op.create_table(
        "sign_ups",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_ups")),
    )
    with op.batch_alter_table("sign_ups", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sign_ups_address_at"), ["address", "at"])


def downgrade() -> None:
    op.drop_table("sign_ups")
    op.drop_table("invites")
    with op.batch_alter_table("issued_tokens", schema=None) as batch_op:
        batch_op.drop_column("last_used_at")
        batch_op.drop_column("address")
        batch_op.drop_column("issued_at")
        batch_op.drop_column("kind")
    with op.batch_alter_table("browser_sessions", schema=None) as batch_op:
        batch_op.drop_column("last_used_at")
        batch_op.drop_column("address")
