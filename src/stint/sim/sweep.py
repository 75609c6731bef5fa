"""Sweeps: every cell of traces x policies x seeds x loads x cluster sizes, in parallel, resumable.

A cell is one simulation (``runner.run_policy``): the trace loaded with the cell's seed (the
seed of the fields a trace lacks, and of a generated trace), its arrival times divided by the
load (``traces.scale_load``, as Pollux scales its workloads), on the cell's cluster (nodes of 8
GPUs; the trace's default cluster when no size is given). A generated ``philly-shaped:N`` trace
is generated for each cell's cluster size, so a load means the same on every size.

Outputs in ``out/``: ``cells/<key>.json`` per finished cell (written atomically; a cell whose
file exists is not run again, so an interrupted sweep resumes where it stopped), then
``sweep.csv`` (one row per cell), ``summary.csv`` (mean, standard deviation, min and max over
seeds for every other coordinate) and ``sweep.png`` (mean average JCT against load, one line
per policy, the bars the min-max over seeds).

Cells run in this process (``workers=1``) or as Ray tasks: a local Ray started on 127.0.0.1
(the switches of ``runtime/executor/raycluster.py``) and stopped at the end, or an existing
cluster given by its address.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stint.model.limits import MAX_CLUSTER_GPUS, MAX_TRACE_JOBS, above
from stint.sim.traces import Filters

# The figures a cell keeps of its run's summary (``RunResult.summary``).
FIGURES = ("jobs", "completed", "avg_jct_s", "median_jct_s", "p99_jct_s", "avg_queue_s",
           "makespan_s", "gpu_utilization", "preemptions", "cpu_s")
COORDS = ("trace", "policy", "seed", "load", "gpus")


@dataclass(frozen=True, slots=True)
class Cell:
    trace: str
    policy: str
    seed: int
    load: float
    gpus: int | None  # None: the trace's default cluster

    @property
    def key(self) -> str:
        """A file name unique to the cell."""
        text = f"{self.trace}__{self.policy}__s{self.seed}__l{self.load:g}__g{self.gpus or 'default'}"
        return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


@dataclass(frozen=True)
class SweepConfig:
    traces: tuple[str, ...] = ("philly",)
    policies: tuple[str, ...] = ("fifo", "tiresias")
    seeds: tuple[int, ...] = (0,)
    loads: tuple[float, ...] = (1.0,)
    gpus: tuple[int | None, ...] = (None,)
    filters: Filters = field(default_factory=Filters)
    policy_options: tuple[str, ...] = ()

    def cells(self) -> list[Cell]:
        return [Cell(t, p, s, ld, g) for t, p, s, ld, g in
                itertools.product(self.traces, self.policies, self.seeds, self.loads, self.gpus)]

    def check(self) -> None:
        """Raise ValueError naming the first bad coordinate (before anything runs)."""
        from stint.policies.registry import make_with_options
        from stint.sim.traces import parse_shaped

        for name in self.policies:
            make_with_options(name, self.policy_options)
        for spec in self.traces:
            if spec.startswith("philly-shaped:"):
                parse_shaped(spec)  # its sizes (TraceError, a ValueError)
        if bad := [x for x in self.loads if not x > 0]:
            raise ValueError(f"--loads must be positive (got {bad[0]:g})")
        if bad_g := [g for g in self.gpus if g is not None and (g <= 0 or g % 8)]:
            raise ValueError(f"--gpus must be positive multiples of 8 (nodes of 8 GPUs); got {bad_g[0]}")
        if why := above("--gpus", max((g or 0 for g in self.gpus), default=0), MAX_CLUSTER_GPUS):
            raise ValueError(why)
        if self.filters.limit is not None and self.filters.limit < 1:
            raise ValueError(f"--limit must be at least 1 (got {self.filters.limit})")
        if self.filters.limit is not None and (why := above("--limit", self.filters.limit, MAX_TRACE_JOBS)):
            raise ValueError(why)
        if not (self.traces and self.policies and self.seeds and self.loads and self.gpus):
            raise ValueError("every axis of a sweep needs at least one value")


def run_cell(cell: Cell, filters: Filters, policy_options: tuple[str, ...]) -> dict[str, Any]:
    """Simulate one cell; its coordinates and ``FIGURES``."""
    from stint.sim.runner import SimConfig, run_policy
    from stint.sim.traces import load, scale_load

    spec = cell.trace
    if spec.startswith("philly-shaped:") and spec.count(":") == 1 and cell.gpus is not None:
        spec = f"{spec}:{cell.gpus}"  # generated at the cell's cluster size
    trace = scale_load(load(spec, seed=cell.seed, filters=filters), cell.load)
    if not trace.jobs:
        raise ValueError(f"trace {cell.trace!r} has no jobs after filtering ({filters})")
    sizes = {} if cell.gpus is None else {"nodes": cell.gpus // 8, "gpus_per_node": 8}
    cfg = SimConfig(trace=spec, seed=cell.seed, policy_options=policy_options, **sizes)  # type: ignore[arg-type]
    cluster = cfg.cluster(trace)
    summary = run_policy(cfg, trace, cluster, cell.policy).summary()
    return {**asdict(cell), "gpus": cluster.total_gpus, **{k: summary[k] for k in FIGURES}}


def pending(cfg: SweepConfig, out: Path) -> list[Cell]:
    """The cells without a result in ``out/cells``."""
    return [c for c in cfg.cells() if not (out / "cells" / f"{c.key}.json").is_file()]


def record(out: Path, cell: Cell, row: dict[str, Any]) -> None:
    """Write one cell's result atomically (a partial file never counts as finished)."""
    cells = out / "cells"
    cells.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cells, prefix=".partial-")
    with os.fdopen(fd, "w") as fh:
        json.dump(row, fh)
    os.replace(tmp, cells / f"{cell.key}.json")


Runner = Callable[[Sequence[Cell]], Generator[tuple[Cell, dict[str, Any]], None, None]]


def run_sweep(cfg: SweepConfig, out: Path, runner: Runner,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Run the pending cells with ``runner``, record each as it finishes, then combine all."""
    cfg.check()
    todo = pending(cfg, out)
    total, done = len(cfg.cells()), len(cfg.cells()) - len(todo)
    if progress:
        progress(done, total)
    with closing(runner(todo)) as results:  # a failure here still stops the runner's Ray
        for cell, row in results:
            record(out, cell, row)
            done += 1
            if progress:
                progress(done, total)
    rows = [json.loads((out / "cells" / f"{c.key}.json").read_text()) for c in cfg.cells()]
    write_tables(out, rows)
    return rows


def in_process(cfg: SweepConfig) -> Runner:
    """Run cells one after another here (``--workers 1``)."""
    def run(cells: Sequence[Cell]) -> Generator[tuple[Cell, dict[str, Any]], None, None]:
        for c in cells:
            yield c, run_cell(c, cfg.filters, cfg.policy_options)
    return run


def on_ray(cfg: SweepConfig, address: str | None, workers: int) -> Runner:
    """Run cells as Ray tasks, yielding each as it finishes: on the cluster at ``address``, or
    on a local Ray of ``workers`` CPUs on 127.0.0.1 (started here, stopped at the end). A
    process already connected to Ray (as the Ray executor's driver may be) uses that connection
    and keeps it."""
    def run(cells: Sequence[Cell]) -> Generator[tuple[Cell, dict[str, Any]], None, None]:
        if not cells:
            return
        from stint.ray_env import LOOPBACK_ENV

        os.environ.update(LOOPBACK_ENV)  # before Ray is imported: keep every server on loopback
        import ray

        owns = not ray.is_initialized()  # a process already connected keeps its connection
        if owns and address:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        elif owns:
            ray.init(num_cpus=workers, num_gpus=0, include_dashboard=False, logging_level=logging.ERROR,
                     log_to_driver=False, _node_ip_address="127.0.0.1",
                     object_store_memory=80 * 1024 * 1024)
        try:
            task = ray.remote(num_cpus=1)(run_cell)
            running = {task.remote(c, cfg.filters, cfg.policy_options): c for c in cells}
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    yield running.pop(ref), ray.get(ref)
        finally:
            if owns:
                ray.shutdown()
    return run


def aggregate(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, standard deviation, min and max of every figure over seeds, per other coordinate."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["trace"], r["policy"], r["load"], r["gpus"]), []).append(r)
    out = []
    for (trace, policy, load, gpus), rs in groups.items():
        agg: dict[str, Any] = {"trace": trace, "policy": policy, "load": load, "gpus": gpus, "seeds": len(rs)}
        for k in FIGURES:
            xs = [float(r[k]) for r in rs]
            mean = sum(xs) / len(xs)
            agg[f"{k}_mean"] = mean
            agg[f"{k}_std"] = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
            agg[f"{k}_min"], agg[f"{k}_max"] = min(xs), max(xs)
        out.append(agg)
    return out


def write_tables(out: Path, rows: list[dict[str, Any]]) -> None:
    """``sweep.csv`` (every cell) and ``summary.csv`` (over seeds)."""
    _write_csv(out / "sweep.csv", rows)
    _write_csv(out / "summary.csv", aggregate(rows))


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".partial-{path.name}")
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def plot(out: Path, summary: list[dict[str, Any]], figure: str = "avg_jct_s") -> Path:
    """``sweep.png``: mean ``figure`` against load per policy (bars: min-max over seeds), one
    panel per (trace, cluster size)."""
    from stint.report.plots import figure as new_figure

    panels = sorted({(r["trace"], r["gpus"]) for r in summary}, key=str)
    fig = new_figure(5.0 * len(panels), 3.6)
    for i, (trace, gpus) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for policy in sorted({r["policy"] for r in summary}):
            pts = sorted((r for r in summary if (r["trace"], r["gpus"], r["policy"]) == (trace, gpus, policy)),
                         key=lambda r: r["load"])
            xs = [r["load"] for r in pts]
            ys = [r[f"{figure}_mean"] for r in pts]
            err = [[y - r[f"{figure}_min"] for y, r in zip(ys, pts, strict=True)],
                   [r[f"{figure}_max"] - y for y, r in zip(ys, pts, strict=True)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=policy)
        ax.set_title(f"{trace}, {gpus} GPUs", fontsize=9)
        ax.set_xlabel("load (x arrival rate)")
        ax.set_ylabel(figure)
        ax.legend(fontsize=8)
    path = out / "sweep.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
