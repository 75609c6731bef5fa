"""Alembic environment: runs on the connection the store passes in, or on ``-x url=...``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from stint.runtime.tables import Base

target_metadata = Base.metadata


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    url = context.get_x_argument(as_dictionary=True)["url"]
    with create_engine(url).connect() as conn:
        _run(conn)
