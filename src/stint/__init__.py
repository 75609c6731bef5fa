"""stint: a scheduler for deep-learning training clusters.

Layers (see docs/architecture.md): ``model`` (plain typed data), ``perf`` (how fast a job trains),
``policies`` (decide), ``placement`` (counts to nodes), ``reconcile`` (plan diff to actions),
``sim`` and ``runtime`` (two mechanisms over the same policies), ``torch`` (the training SDK).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__version__ = "0.1.0"


def data_path(name: str) -> Path:
    """A file shipped in the package's ``data/`` folder (``name`` relative to it); installs are
    directories, never zipped, so this is a plain path (no ``importlib.resources`` to import)."""
    from pathlib import Path

    return Path(__file__).parent / "data" / name
