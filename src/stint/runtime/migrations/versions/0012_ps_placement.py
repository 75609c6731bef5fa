"""Parameter servers placed by the plan: a node's role, CPU cores and memory; a job's PS count
bounds and one PS's CPU cores and memory; a decision's PS count.

Revision ID: 0012
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="any"))
        batch.add_column(sa.Column("cpus", sa.Float, nullable=False, server_default="0"))
        batch.add_column(sa.Column("mem_gb", sa.Float, nullable=False, server_default="0"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("min_ps", sa.Integer, nullable=True))
        batch.add_column(sa.Column("max_ps", sa.Integer, nullable=True))
        batch.add_column(sa.Column("ps_cpus", sa.Float, nullable=True))
        batch.add_column(sa.Column("ps_mem_gb", sa.Float, nullable=True))
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("ps", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("ps")
    with op.batch_alter_table("jobs") as batch:
        for name in ("ps_mem_gb", "ps_cpus", "max_ps", "min_ps"):
            batch.drop_column(name)
    with op.batch_alter_table("nodes") as batch:
        for name in ("mem_gb", "cpus", "role"):
            batch.drop_column(name)
