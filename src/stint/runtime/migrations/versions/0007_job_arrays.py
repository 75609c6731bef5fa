"""Job arrays: the array a job is a task of (the id of its first task), its index, and how many
of its tasks may run at once.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("array_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("array_index", sa.Integer, nullable=True))
        batch.add_column(sa.Column("array_parallel", sa.Integer, nullable=True))
        batch.create_index("ix_jobs_array_id", ["array_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_array_id")
        for name in ("array_parallel", "array_index", "array_id"):
            batch.drop_column(name)
