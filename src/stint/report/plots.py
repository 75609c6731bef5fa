"""PNG plots of simulation runs: JCT CDFs across policies; utilization and queue over time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (imported on first use: it is slow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` as a PNG and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def jct_cdf(jcts: Mapping[str, Sequence[float]], path: Path) -> None:
    """Empirical CDF of job completion times, one line per policy, log-scaled time axis."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, values in jcts.items():
        x = np.sort(np.asarray(values, dtype=float) / 3600.0)
        if len(x):
            ax.plot(np.maximum(x, 1e-3), np.arange(1, len(x) + 1) / len(x), label=policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, path)


def over_time(
    series: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    total_gpus: int,
    path: Path,
    max_points: int = 4000,
) -> None:
    """GPU utilization and waiting jobs over time (days), one line per policy, as step plots."""
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for policy, (t, busy, queue) in series.items():
        t_arr, b_arr, q_arr = (np.asarray(a, dtype=float) for a in (t, busy, queue))
        if len(t_arr) > max_points:  # thin evenly: a plot cannot show more points than pixels
            keep = np.linspace(0, len(t_arr) - 1, max_points).astype(int)
            t_arr, b_arr, q_arr = t_arr[keep], b_arr[keep], q_arr[keep]
        days = t_arr / 86400.0
        top.step(days, b_arr / total_gpus, where="post", label=policy, linewidth=0.8)
        bottom.step(days, q_arr, where="post", label=policy, linewidth=0.8)
    top.set_ylabel("GPU utilization")
    top.set_ylim(0, 1.05)
    bottom.set_ylabel("waiting jobs")
    bottom.set_xlabel("time (days since first arrival)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend(loc="upper right", fontsize="small")
    save(fig, path)
