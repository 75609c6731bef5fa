"""Jobs run as their owner's OS account; the store has an identity.

users.os_user, jobs.os_user/cwd/env, and store_meta with a random ``store_id`` (the data
directory and the jobs directory record it; a mismatch refuses to start).

Revision ID: 0002
Revises: 0001
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("os_user", sa.String(64), nullable=True))
    op.add_column("jobs", sa.Column("os_user", sa.String(64), nullable=True))
    op.add_column("jobs", sa.Column("cwd", sa.Text, nullable=True))
    op.add_column("jobs", sa.Column("env", sa.Text, nullable=False, server_default="{}"))
    meta = op.create_table(
        "store_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.bulk_insert(meta, [{"key": "store_id", "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table("store_meta")
    op.drop_column("jobs", "env")
    op.drop_column("jobs", "cwd")
    op.drop_column("jobs", "os_user")
    op.drop_column("users", "os_user")
