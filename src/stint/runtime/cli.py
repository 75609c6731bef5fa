"""Sub-commands of this layer (filled in by the layer's owner)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this layer's commands to the ``stint`` app."""
