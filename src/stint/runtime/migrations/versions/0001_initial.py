"""Initial schema: users, tokens, nodes, jobs, transitions, overrides.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("is_admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("min_gpus", sa.Integer, nullable=False),
        sa.Column("max_gpus", sa.Integer, nullable=False),
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("priority", sa.Float, nullable=False),
        sa.Column("deadline_s", sa.Float, nullable=True),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("allocation", sa.Text, nullable=False),
        sa.Column("slots", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=True),
        sa.Column("stop_purpose", sa.String(16), nullable=True),
        sa.Column("stop_deadline", sa.Float, nullable=True),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("first_start_at", sa.Float, nullable=True),
        sa.Column("last_change_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("attained_gpu_s", sa.Float, nullable=False),
        sa.Column("holding_since", sa.Float, nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("preempt_requested", sa.Boolean, nullable=False),
        sa.Column("pin_workers", sa.Integer, nullable=True),
        sa.Column("pin_node", sa.String(128), nullable=True),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_user_id", "jobs", ["user_id"])
    op.create_table(
        "transitions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("src", sa.String(16), nullable=False),
        sa.Column("dst", sa.String(16), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_index("ix_transitions_job_id", "transitions", ["job_id"])
    op.create_table(
        "overrides",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("ix_overrides_job_id", "overrides", ["job_id"])


def downgrade() -> None:
    for table in ("overrides", "transitions", "jobs", "nodes", "tokens", "users"):
        op.drop_table(table)
