"""The Rich progress bar ``stint sim`` and ``stint sim sweep`` draw on a terminal's stderr."""

from __future__ import annotations

from typing import Any


def rich_progress(console: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
