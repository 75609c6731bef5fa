"""Per-job bounds (a worker's memory and processes, a time limit, a hang timeout, its retries)
and the controller's columns that enforce them (time held, when a retry is due, refused
launches in a row).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("memory_max", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("pids_max", sa.Integer, nullable=True))
        batch.add_column(sa.Column("time_limit_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("hang_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("max_retries", sa.Integer, nullable=True))
        batch.add_column(sa.Column("run_s", sa.Float, nullable=False, server_default="0"))
        batch.add_column(sa.Column("retry_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("refusals", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("refusals", "retry_at", "run_s", "max_retries", "hang_s", "time_limit_s",
                     "pids_max", "memory_max"):
            batch.drop_column(name)
