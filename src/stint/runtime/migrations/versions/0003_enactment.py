"""One enactment: job lengths and progress, declared sizes, the policy's decision, the forecast
start and finish (the store's
epoch, its time origin, is a row of ``store_meta``).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("est_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("total_steps", sa.Integer, nullable=True))
        batch.add_column(sa.Column("logical_ranks", sa.Integer, nullable=True))
        batch.add_column(sa.Column("work_done", sa.Float, nullable=False, server_default="0"))
        batch.add_column(sa.Column("decision", sa.Text, nullable=True))
        batch.add_column(sa.Column("est_start_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("est_finish_at", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("est_finish_at", "est_start_at", "decision", "work_done", "logical_ranks",
                     "total_steps", "est_s"):
            batch.drop_column(name)
