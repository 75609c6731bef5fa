"""A live fleet: the cluster each node and job belongs to (and a node's region), the cluster a
job is being moved to, and the measured copy of its checkpoint between clusters.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cluster", sa.String(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("region", sa.String(64), nullable=False, server_default=""))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cluster", sa.String(64), nullable=True))
        batch.add_column(sa.Column("to_cluster", sa.String(64), nullable=True))
        batch.add_column(sa.Column("copy_bytes", sa.Integer, nullable=True))
        batch.add_column(sa.Column("copy_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("copy_s", "copy_bytes", "to_cluster", "cluster"):
            batch.drop_column(name)
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("region")
        batch.drop_column("cluster")
