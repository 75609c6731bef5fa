"""The summary table ``stint sim`` prints: plain aligned text (no Rich to import)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def plain_table(summaries: Mapping[str, Mapping[str, Any]], title: str = "") -> str:
    """One row per policy; columns absent from a summary are left blank."""
    head = ["policy", *(label for _, label, _ in COLUMNS)]
    rows = [[policy, *(fmt(s[k], st) if k in s else "" for k, _, st in COLUMNS)] for policy, s in summaries.items()]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    body = [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    return "\n".join(([title] if title else []) + body)
