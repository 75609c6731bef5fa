"""Accelerator types: a node's type, and the types a job may run on (comma-separated; "" any).

Revision ID: 0011
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("gpu_type", sa.String(64), nullable=False, server_default=""))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("gpu_types", sa.String(1100), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("gpu_types")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("gpu_type")
