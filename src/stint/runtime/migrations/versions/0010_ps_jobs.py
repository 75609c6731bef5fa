"""Parameter-server jobs: how many parameter servers a stint.torch.ps job runs.

Revision ID: 0010
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("ps_count", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("ps_count")
