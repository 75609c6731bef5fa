"""One enactment: a store's epoch (its time origin), job lengths and progress, declared sizes.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("est_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("total_steps", sa.Integer, nullable=True))
        batch.add_column(sa.Column("logical_ranks", sa.Integer, nullable=True))
        batch.add_column(sa.Column("work_done", sa.Float, nullable=False, server_default="0"))
        batch.add_column(sa.Column("decision", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("decision", "work_done", "logical_ranks", "total_steps", "est_s"):
            batch.drop_column(name)
    op.drop_table("meta")
