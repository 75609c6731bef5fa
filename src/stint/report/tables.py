"""Rich tables of run summaries, shared by ``stint sim`` and ``stint serve``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

COLUMNS = [
    ("completed", "done", "{:,}"),
    ("avg_jct_s", "avg JCT (h)", "h"),
    ("median_jct_s", "p50 JCT (h)", "h"),
    ("p99_jct_s", "p99 JCT (h)", "h"),
    ("makespan_s", "makespan (d)", "d"),
    ("gpu_utilization", "GPU util", "{:.1%}"),
    ("total_utility", "utility", "{:,.0f}"),
    ("preemptions", "preempt", "{:,}"),
    ("policy_latency_ms_p99", "p99 call (ms)", "{:.2f}"),
    ("wall_s", "wall (s)", "{:.1f}"),
    ("jobs_per_s", "jobs/s", "{:,.0f}"),
]


def fmt(value: Any, style: str) -> str:
    if style == "h":
        return f"{value / 3600:,.2f}"
    if style == "d":
        return f"{value / 86400:,.1f}"
    return style.format(value)


def summary_table(summaries: Mapping[str, Mapping[str, Any]], title: str = "") -> Table:
    """One row per policy; columns absent from a summary are left blank."""
    table = Table(title=title or None)
    table.add_column("policy", style="bold")
    for _, label, _ in COLUMNS:
        table.add_column(label, justify="right")
    for policy, s in summaries.items():
        table.add_row(policy, *(fmt(s[k], st) if k in s else "" for k, _, st in COLUMNS))
    return table
