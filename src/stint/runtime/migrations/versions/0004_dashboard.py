"""What the dashboard reads: each waiting job's queue position, and the allocation a transition
to ``starting`` gave its job (the timeline of allocations and utilization over time).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("queue_position", sa.Integer, nullable=True))
    with op.batch_alter_table("transitions") as batch:
        batch.add_column(sa.Column("allocation", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transitions") as batch:
        batch.drop_column("allocation")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("queue_position")
