"""PNG plots of simulation runs: JCT CDFs across policies; utilization and queue over time;
SLA attainment and JCT per tier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike


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


def figure(width: float, height: float) -> Any:
    """A bare Agg figure (no pyplot state, nothing to close): cheaper for one-off files."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def cdf_line(ax: Any, values: ArrayLike, label: str, max_points: int = 2000, floor: float = 1e-3) -> None:
    """One empirical CDF on ``ax`` (values at least ``floor``, for a log axis)."""
    x = np.sort(np.asarray(values, dtype=float))
    if not len(x):
        return
    y = np.arange(1, len(x) + 1) / len(x)
    if len(x) > max_points:  # quantiles: a line cannot show more points than pixels
        keep = np.unique(np.linspace(0, len(x) - 1, max_points).astype(int))
        x, y = x[keep], y[keep]
    ax.plot(np.maximum(x, floor), y, label=label)


def cdf_plot(lines: Mapping[str, ArrayLike], xlabel: str, ylabel: str, out: Path | IO[bytes],
             height: float = 4.5, max_points: int = 2000, floor: float = 1e-3) -> None:
    """Empirical CDFs, one line per name, on a log-scaled x axis (``cdf_line``), saved as PNG."""
    fig = figure(7, height)
    ax = fig.add_subplot()
    for name, values in lines.items():
        cdf_line(ax, values, name, max_points, floor)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.55 / height, top=0.97)
    fig.savefig(out, dpi=100, format="png")


def jct_cdf(jcts: Mapping[str, Sequence[float]], path: Path | IO[bytes],
            max_points: int = 2000) -> None:
    """Empirical CDF of job completion times, one line per policy, log-scaled time axis."""
    cdf_plot({p: [v / 3600.0 for v in values] for p, values in jcts.items()},
             "job completion time (hours, log scale)", "fraction of jobs", path, 4.5, max_points)


def over_time(
    series: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    total_gpus: int,
    path: Path | IO[bytes],
    max_points: int = 2000,
) -> None:
    """GPU utilization and waiting jobs over time (days), one line per policy, as step plots."""
    fig = figure(8, 6)
    top, bottom = fig.subplots(2, 1, sharex=True)
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
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.09, top=0.97, hspace=0.08)
    fig.savefig(path, dpi=100, format="png")


def tiers(per_tier: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]],
          targets: Mapping[str, float | None], path: Path) -> None:
    """Per tier (columns): the CDF of SLA attainment (top, the target dashed) and of JCT (bottom,
    hours, log scale), one line per policy. ``per_tier[tier][policy] = (attainments, jcts_s)``."""
    names = list(per_tier)
    fig = figure(4 * max(len(names), 1), 6.5)
    axes = fig.subplots(2, max(len(names), 1), squeeze=False)
    for col, tier in enumerate(names):
        top, bottom = axes[0][col], axes[1][col]
        for policy, (att, jct) in per_tier[tier].items():
            cdf_line(top, att, policy, floor=0.0)
            cdf_line(bottom, [v / 3600.0 for v in jct], policy)
        target = targets.get(tier)
        if target is not None:
            top.axvline(target, color="grey", linestyle="--", linewidth=0.8)
        top.set_title(f"{tier} (target {target:g})" if target is not None else f"{tier} (best effort)")
        top.set_xlabel("SLA attainment")
        bottom.set_xscale("log")
        bottom.set_xlabel("JCT (hours, log scale)")
        for ax in (top, bottom):
            ax.set_ylabel("fraction of jobs")
            ax.grid(True, alpha=0.3)
        top.legend(loc="upper left", fontsize="small")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.08, top=0.95, hspace=0.35, wspace=0.25)
    fig.savefig(path, dpi=100)
