"""``stint sim --fleet fleet.toml``: the fleet under one or more global schedulers (docs/fleet.md).

Writes ``summary.json`` (keyed by global scheduler; fleet-wide and per-cluster figures) and
``<scheduler>/jobs.csv`` (one row per job), the summary last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stint.model.fleet import Fleet, FleetError, FleetJob, draw_sizes, parse_fleet
from stint.perf.model import PerfModel
from stint.perf.scaling import ScalingModel
from stint.policies.fleet.registry import make_global
from stint.policies.registry import make_with_options
from stint.sim.costs import for_format
from stint.sim.fleet import FLEET_CSV_FIELDS, FleetResult, FleetSimulator
from stint.sim.fleet_workload import generate
from stint.sim.runner import write_staged
from stint.sim.traces import Filters, load


@dataclass(frozen=True)
class FleetConfig:
    fleet: Path
    schedulers: tuple[str, ...] = ("gain", "static", "least-loaded")
    global_options: tuple[str, ...] = ()
    policy: str = "tiresias"
    policy_options: tuple[str, ...] = ()
    trace: str = "philly"
    jobs: int | None = None  # generate this many jobs from Philly's distributions instead
    load: float = 0.8
    seed: int = 0
    filters: Filters = field(default_factory=Filters)
    restart_s: float | None = None
    warm: bool = False  # with ``jobs``: a stationary start (``fleet_workload.generate(warm=True)``)


def read_fleet(path: Path) -> Fleet:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FleetError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_fleet(text, str(path))


def workload(cfg: FleetConfig, fleet: Fleet) -> tuple[list[FleetJob], PerfModel, str]:
    """The jobs: generated (``jobs``) or a trace's, with the fleet's seeded rule for sizes."""
    if cfg.jobs is not None:
        return generate(fleet, cfg.jobs, cfg.load, cfg.seed, cfg.warm), ScalingModel(), "philly"
    trace = load(cfg.trace, seed=cfg.seed, filters=cfg.filters)
    if not trace.jobs:
        raise ValueError(f"trace {cfg.trace!r} has no jobs after filtering ({cfg.filters})")
    return draw_sizes(fleet, trace.jobs, cfg.seed), trace.perf, trace.format


def run_fleets(cfg: FleetConfig) -> dict[str, FleetResult]:
    fleet = read_fleet(cfg.fleet)
    for name in cfg.schedulers:
        make_global(name, cfg.global_options)  # fail fast
    make_with_options(cfg.policy, cfg.policy_options)
    jobs, perf, fmt = workload(cfg, fleet)
    costs = for_format(fmt, cfg.restart_s).costs
    out = {}
    for name in cfg.schedulers:
        sim = FleetSimulator(fleet, jobs, make_global(name, cfg.global_options),
                             lambda: make_with_options(cfg.policy, cfg.policy_options), perf, costs)
        out[name] = sim.run()
    return out


def write_fleet_results(out: Path, results: dict[str, FleetResult]) -> dict[str, Any]:
    summaries = {name: r.summary() for name, r in results.items()}
    write_staged(out, {name: (FLEET_CSV_FIELDS, ([getattr(rec, f) for f in FLEET_CSV_FIELDS]
                                                  for rec in r.records))
                       for name, r in results.items()}, summaries)
    return summaries


def table_rows(summaries: dict[str, Any]) -> list[list[str]]:
    """One row per scheduler: the figures ``stint sim --fleet`` prints."""
    rows = []
    for name, s in summaries.items():
        t = s["tiers"]
        rows.append([name, f"{s['gpu_utilization']:.3f}", f"{t['premium']['attainment_mean']:.3f}",
                     f"{t['standard']['attainment_mean']:.3f}", f"{t['basic']['attainment_mean']:.3f}",
                     f"{s['cluster_moves']}/{s['region_moves']}",
                     f"{(s['ckpt_gb_moved'] + s['data_gb_moved']) / 1000:.1f}",
                     f"{s['work_lost_gpu_s'] / 3600:.1f}", f"{s['wall_s']:.1f}"])
    return rows


TABLE_HEADER = ["global", "util", "premium", "standard", "basic", "moves c/r", "TB moved", "lost GPU-h",
                "wall s"]
