"""Search's vectors in a pgvector column, where PostgreSQL has the `vector` extension

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 07:00:00.000000

On SQLite, and on PostgreSQL without the extension, nothing changes (search ranks the stored
bytes in the portal process). db/pgvector.py says what is made, and why it is not in the
models; `upgrade` runs the same step at each start for an extension installed later.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from webagents.portal.db import pgvector

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pgvector.enable(op.get_bind())


def downgrade() -> None:
    pgvector.disable(op.get_bind())
