"""What the twin is fitted from: each attempt's measured times (launch, first step, stop request,
exit, and the SDK's steps at its first report and at its end), the policy's decisions in the order
the controller enacted them, and each waiting job's estimated start band.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("workers", sa.Integer, nullable=False),
        sa.Column("resumed", sa.Boolean, nullable=False),
        sa.Column("launched_at", sa.Float, nullable=False),
        sa.Column("first_step_at", sa.Float, nullable=True),
        sa.Column("first_step", sa.Integer, nullable=True),
        sa.Column("stop_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("end_step", sa.Integer, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.UniqueConstraint("job_id", "attempt", name="uq_attempts_job_attempt"),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("workers", sa.Integer, nullable=False),
    )
    op.create_index("ix_decisions_job_id", "decisions", ["job_id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("est_start_lo_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("est_start_hi_at", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("est_start_hi_at")
        batch.drop_column("est_start_lo_at")
    op.drop_index("ix_decisions_job_id", "decisions")
    op.drop_table("decisions")
    op.drop_index("ix_attempts_job_id", "attempts")
    op.drop_table("attempts")
