"""``stint sim --report DIR``: one self-contained HTML page of a run (``DIR/report.html``).

The comparison table across policies, JCT CDFs, GPU utilization and waiting jobs over time, a
timeline of a chosen window (each job's allocations, with its preemptions, resizes and
migrations marked), SLA attainment per tier and the policies' decision latency. Figures are
PNGs inlined as data URIs and the style sheet is inline: the page opens from disk with no
network and needs no other file.
"""

from __future__ import annotations

import base64
import io
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from stint.reconcile import Action, ActionKind
from stint.report.plots import cdf_plot, figure, jct_cdf, over_time
from stint.report.tables import COLUMNS, fmt


class Finished(Protocol):
    """What the page reads of a job's record (the simulator's ``JobRecord``)."""

    @property
    def jct_s(self) -> float: ...

    @property
    def completed(self) -> bool: ...


class Run(Protocol):
    """What the page reads of one policy's run (the simulator's ``RunResult``)."""

    @property
    def records(self) -> Sequence[Finished]: ...

    @property
    def start_s(self) -> float: ...

    @property
    def series(self) -> tuple[array[float], array[float], array[float]]: ...

    @property
    def latencies_s(self) -> array[float]: ...

MAX_TIMELINE_JOBS = 40
_MARKS = {ActionKind.PREEMPT: ("x", "tab:red"), ActionKind.RESIZE: ("^", "tab:orange"),
          ActionKind.MIGRATE: (">", "tab:blue")}


@dataclass
class Timeline:
    """Records one run's actions (``Simulator.on_action``) in ``[start_s, end_s)``: each job's
    holds (``(start, end, workers)``) and marks, for the first ``max_jobs`` jobs active there."""

    start_s: float
    end_s: float
    max_jobs: int = MAX_TIMELINE_JOBS
    holds: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)
    marks: list[tuple[str, float, ActionKind]] = field(default_factory=list)
    _open: dict[str, tuple[float, int]] = field(default_factory=dict)

    def __call__(self, t: float, a: Action) -> None:
        self._close(a.job_id, t)
        if a.after and t < self.end_s:
            self._open[a.job_id] = (t, a.after.num_workers)
        if a.kind in _MARKS and self.start_s <= t < self.end_s and self._shown(a.job_id):
            self.marks.append((a.job_id, t, a.kind))

    def finish(self, ends: Mapping[str, float]) -> None:
        """Close the holds still open at the jobs' ends (a completion is not an action)."""
        for job in list(self._open):
            self._close(job, ends.get(job, self.end_s))

    def _close(self, job: str, t: float) -> None:
        began = self._open.pop(job, None)
        if began is not None and t > self.start_s and self._shown(job):
            self.holds.setdefault(job, []).append((began[0], t, began[1]))

    def _shown(self, job: str) -> bool:
        if job not in self.holds and len(self.holds) < self.max_jobs:
            self.holds[job] = []
        return job in self.holds


def write_report(out: Path, title: str, total_gpus: int, results: Mapping[str, Run],
                 summaries: Mapping[str, Mapping[str, Any]],
                 timelines: Mapping[str, Timeline]) -> Path:
    """Write ``out/report.html`` and return its path."""
    out.mkdir(parents=True, exist_ok=True)
    jcts = {n: [x.jct_s for x in r.records if x.completed] for n, r in results.items()}
    series = {n: ([x - r.start_s for x in r.series[0]], r.series[1], r.series[2])
              for n, r in results.items()}
    parts = [
        f"<h1>{escape(title)}</h1>",
        "<h2>Comparison</h2>", comparison_table(summaries),
        "<h2>Job completion times</h2>", _img(lambda f: jct_cdf(jcts, f), "JCT CDFs"),
        "<h2>Utilization and queue over time</h2>",
        _img(lambda f: over_time(series, total_gpus, f), "utilization and waiting jobs"),
        "<h2>SLA attainment per tier</h2>", tier_table(summaries),
        "<h2>Policy latency</h2>", latency_table(summaries),
        _img(lambda f: latency_cdf(results, f), "policy latency CDFs"),
    ]
    for name, tl in timelines.items():
        parts += _timeline_part(name, tl, results[name].start_s)
    path = out / "report.html"
    path.write_text(_PAGE.format(title=escape(title), body="\n".join(parts)))
    return path


def _timeline_part(name: str, tl: Timeline, origin_s: float) -> list[str]:
    a, b = (tl.start_s - origin_s) / 3600, (tl.end_s - origin_s) / 3600
    head = (f"<h2>Timeline: {escape(name)}, {a:.2f} h to {b:.2f} h (the first "
            f"{len(tl.holds)} jobs active)</h2>")
    return [head,
            _img(lambda f: timeline_plot(tl, origin_s, f), f"timeline {name}")]


def comparison_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    cols = [*COLUMNS, ("avg_queue_s", "avg queue (h)", "h"), ("migrations", "migrate", "{:,}"),
            ("resizes", "resize", "{:,}"), ("policy_latency_ms_mean", "mean call (ms)", "{:.2f}")]
    head = "".join(f"<th>{escape(label)}</th>" for _, label, _ in cols)
    rows = "".join(
        f"<tr><td>{escape(p)}</td>" + "".join(
            f'<td data-key="{k}">{escape(fmt(s[k], st)) if k in s else ""}</td>'
            for k, _, st in cols) + "</tr>" for p, s in summaries.items())
    return (f'<table id="comparison"><thead><tr><th>policy</th>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def tier_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for p, s in summaries.items():
        for tier, t in s.get("tiers", {}).items():
            target = "best effort" if t["sla_target"] is None else f"{t['sla_target']:.2f}"
            rows.append(f"<tr><td>{escape(p)}</td><td>{escape(tier)}</td><td>{t['jobs']:,}</td>"
                        f"<td>{target}</td><td>{t['sla_met_fraction']:.1%}</td>"
                        f"<td>{t['mean_attainment']:.3f}</td><td>{t['p5_attainment']:.3f}</td></tr>")
    return ('<table id="tiers"><thead><tr><th>policy</th><th>tier</th><th>jobs</th><th>target'
            "</th><th>meeting it</th><th>mean attainment</th><th>p5 attainment</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def latency_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    rows = "".join(f"<tr><td>{escape(p)}</td><td>{s['policy_calls']:,}</td>"
                   f"<td>{s['policy_latency_ms_mean']:.3f}</td>"
                   f"<td>{s['policy_latency_ms_p99']:.3f}</td></tr>" for p, s in summaries.items())
    return ('<table id="latency"><thead><tr><th>policy</th><th>calls</th><th>mean (ms)</th>'
            f"<th>p99 (ms)</th></tr></thead><tbody>{rows}</tbody></table>")


def latency_cdf(results: Mapping[str, Run], out: Any) -> None:
    cdf_plot({n: np.frombuffer(r.latencies_s, dtype=float) * 1e3 for n, r in results.items()},
             "policy call latency (ms, log scale)", "fraction of calls", out, 3.5, floor=1e-4)


def timeline_plot(tl: Timeline, origin_s: float, out: Any) -> None:
    """One row per job: its holds as bars (shade by workers), its marks as symbols."""
    jobs = list(tl.holds)
    fig = figure(9, max(2.0, 0.9 + 0.22 * len(jobs)))
    ax = fig.add_subplot()
    top = max((w for hs in tl.holds.values() for *_, w in hs), default=1)
    for row, job in enumerate(jobs):
        for a, b, w in tl.holds[job]:
            a, b = max(a, tl.start_s), min(b, tl.end_s)
            ax.broken_barh([((a - origin_s) / 3600, (b - a) / 3600)], (row - 0.4, 0.8),
                           color=(0.2, 0.4, 0.8, 0.35 + 0.65 * w / top))
    for kind, (marker, colour) in _MARKS.items():
        pts = [((t - origin_s) / 3600, jobs.index(j)) for j, t, k in tl.marks if k is kind]
        if pts:
            ax.scatter(*zip(*pts, strict=True), marker=marker, color=colour, s=30, zorder=3,
                       label=str(kind))
    ax.set_yticks(range(len(jobs)), [f"job {j}" for j in jobs], fontsize=7)
    ax.set_ylim(len(jobs) - 0.5, -0.5)
    ax.set_xlim((tl.start_s - origin_s) / 3600, (tl.end_s - origin_s) / 3600)
    ax.set_xlabel("hours since the first arrival (darker: more workers)")
    ax.grid(True, axis="x", alpha=0.3)
    if tl.marks:
        ax.legend(loc="upper right", fontsize="small")
    fig.subplots_adjust(left=0.17, right=0.98, bottom=0.9 / fig.get_figheight(), top=0.98)
    fig.savefig(out, dpi=100, format="png")


def _img(draw: Callable[[io.BytesIO], None], alt: str) -> str:
    buf = io.BytesIO()
    draw(buf)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 1100px;
       color: #1d232b; padding: 0 1rem; }}
table {{ border-collapse: collapse; margin-bottom: 1rem; }}
th, td {{ padding: .25rem .6rem; border-bottom: 1px solid #d9dee5; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
img {{ max-width: 100%; display: block; margin-bottom: 1rem; }}
h2 {{ font-size: 1.1rem; margin-top: 1.6rem; }}
</style></head>
<body>
{body}
</body></html>
"""
