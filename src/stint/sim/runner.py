"""Run several policies on one trace and write the results (the body of ``stint sim``).

Outputs in ``out/``: ``summary.json`` (keyed by policy), ``<policy>/jobs.csv``, then
``jct_cdf.png``, ``over_time.png`` and ``tiers.png`` (attainment and JCT CDFs per SLA tier).
Nothing is written until every policy has finished, so an
interrupted or failed run never leaves a summary that looks complete; the plots come after the
summary, so its figures never wait for matplotlib.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stint.model.cluster import Cluster
from stint.model.limits import cluster_reason
from stint.model.sla import SlaTargets
from stint.perf.model import PerfModel
from stint.perf.profile import ProfileModel
from stint.perf.types import TypedPerf, TypeSpeeds
from stint.policies.knowledge import Knowledge, Mode
from stint.policies.registry import make_with_options
from stint.policies.typed import wrap
from stint.reconcile import Action
from stint.sim.costs import CostModel, NamedCosts, for_format
from stint.sim.engine import Simulator
from stint.sim.metrics import CSV_FIELDS, RunResult, record_row
from stint.sim.traces import Filters, TierMix, Trace, load

if TYPE_CHECKING:
    from stint.sim.cluster_input import TypedCluster
    from stint.sim.reservation import Reservation


@dataclass(frozen=True)
class SimConfig:
    trace: str = "philly"
    policies: tuple[str, ...] = ("fifo", "srtf", "drf", "tiresias")
    policy_options: tuple[str, ...] = ()  # --policy-opt KEY=VALUE (or POLICY.KEY=VALUE)
    nodes: int | None = None
    gpus_per_node: int | None = None
    seed: int = 0
    filters: Filters = field(default_factory=Filters)
    costs: CostModel | None = None  # overrides the format's model and ``restart_s`` entirely
    costs_name: str = "given"  # what ``costs`` is (``summary.json``): "measured" (``--costs-from``)
    restart_s: float | None = None  # ``--restart-s``: see ``stint.sim.costs.for_format``
    elastic: bool = False
    decision_period_s: float | None = None
    samples: bool = False  # Pollux traces: count samples instead of Pollux's progress
    batch: str = "auto"  # "fixed", "adaptive" (jobs pick their batch per allocation), or by policy
    tiers: TierMix = field(default_factory=TierMix)  # tier shares for traces without tiers
    sla: SlaTargets = field(default_factory=SlaTargets)  # what ``tiers`` in the summary meets
    # A daily inference reservation; its ``clock0_s`` is taken from the trace (its time of day).
    reservation: Reservation | None = None
    knowledge: str = "declared"  # ``--knowledge``: what policies know of job lengths (``policies.knowledge``)
    cluster_file: Path | None = None  # ``--cluster FILE``: node groups by accelerator type (``model.cluster_file``)

    def typed(self) -> TypedCluster | None:
        """The cluster file read (None without one)."""
        if self.cluster_file is None:
            return None
        from stint.sim.cluster_input import read_cluster

        return read_cluster(self.cluster_file)

    def cluster(self, trace: Trace) -> Cluster:
        """The cluster: the cluster file's, else as given, else 64 x 8 GPUs for Philly and 16 x 4
        for Pollux workloads."""
        if (typed := self.typed()) is not None:
            return typed.cluster
        pollux = trace.format == "pollux"
        per_node = self.gpus_per_node or (4 if pollux else 8)
        nodes = self.nodes or (16 if pollux else 64)
        if why := cluster_reason(nodes, per_node, "--nodes", "--gpus-per-node"):  # (``stint.model.limits``)
            raise ValueError(why)
        return Cluster.uniform(nodes, per_node)

    def cost_model(self, trace: Trace) -> NamedCosts:
        """Given costs, else the model of the trace's format (by its header, not its name)."""
        if self.costs is not None:
            return NamedCosts(self.costs_name, self.costs)
        return for_format(trace.format, self.restart_s)


Progress = Callable[[str, int, int], None]

# Policies whose jobs pick their own batch size (Pollux's agents) when ``batch`` is "auto".
ADAPTS_BATCH = frozenset({"pollux"})
BATCH_MODES = ("auto", "fixed", "adaptive")


def perf_for(trace: Trace, policy: str, batch: str) -> tuple[PerfModel, str]:
    """The performance model a policy runs with and its batch mode ("fixed" or "adaptive").

    An adaptive batch needs Pollux's job model; other traces always keep batches fixed."""
    if batch not in BATCH_MODES:
        raise ValueError(f"batch must be one of {', '.join(BATCH_MODES)} (got {batch!r})")
    adaptive = batch == "adaptive" or (batch == "auto" and policy in ADAPTS_BATCH)
    if adaptive and trace.job_model == "pollux-progress":
        return ProfileModel(progress=True, adaptive_batch=True), "adaptive"
    return trace.perf, "fixed"


# A run's observer of actions, made per policy from its name and the trace's first arrival.
Watch = Callable[[str, float], Callable[[float, Action], None]]


def run_all(cfg: SimConfig, progress: Progress | None = None, watch: Watch | None = None
            ) -> tuple[Trace, Cluster, dict[str, RunResult]]:
    """Load the trace once and run each policy on it in turn (``watch``: see ``Watch``)."""
    for name in cfg.policies:
        make_with_options(name, cfg.policy_options)  # fail fast on bad names and options
    typed = cfg.typed()
    trace = load(cfg.trace, seed=cfg.seed, filters=cfg.filters, elastic=cfg.elastic, samples=cfg.samples,
                 tiers=cfg.tiers, throughputs=typed.throughputs if typed is not None else None)
    if not trace.jobs:
        raise ValueError(f"trace {cfg.trace!r} has no jobs after filtering ({cfg.filters})")
    cluster = cfg.cluster(trace)
    results = {}
    first = min(j.arrival_s for j in trace.jobs)
    for name in cfg.policies:
        cb = (lambda done, total, n=name: progress(n, done, total)) if progress else None
        results[name] = run_policy(cfg, trace, cluster, name, cb,
                                   watch(name, first) if watch else None)
    return trace, cluster, results


def run_policy(cfg: SimConfig, trace: Trace, cluster: Cluster, name: str,
               on_progress: Callable[[int, int], None] | None = None,
               on_action: Callable[[float, Action], None] | None = None) -> RunResult:
    """One policy on a loaded trace, with the config's costs, batch mode and decision period."""
    costs = cfg.cost_model(trace)
    perf, batch = perf_for(trace, name, cfg.batch)
    policy = make_with_options(name, cfg.policy_options)
    if cluster.typed:  # per-type speeds in the rate; type-blind policies kept to the type rules
        typed = cfg.typed()
        speeds = typed.speeds if typed is not None else TypeSpeeds()
        perf = TypedPerf(perf, cluster, trace.speeds.merged(speeds) if trace.speeds is not None else speeds)
        policy = wrap(policy, cluster)
    reservation = replace(cfg.reservation, clock0_s=trace.clock0_s) if cfg.reservation is not None else None
    sim = Simulator(
        cluster, trace.jobs, policy, perf, costs.costs,
        on_progress=on_progress, decision_period_s=cfg.decision_period_s, on_action=on_action,
        reservation=reservation, knowledge=Knowledge(Mode(cfg.knowledge)),
    )
    return replace(sim.run(), cost_model=costs, job_model=trace.job_model, batch=batch,
                   sla=cfg.sla, knowledge=cfg.knowledge,
                   reservation=reservation.as_dict() if reservation is not None else None)


def write_results(out: Path, results: dict[str, RunResult]) -> dict[str, Any]:
    """Write the figures: every ``jobs.csv`` into a temporary directory, then move them into
    ``out`` with ``summary.json`` last. Plots are separate (``write_plots``), after it."""
    summaries = {name: r.summary() for name, r in results.items()}
    write_staged(out, {name: (CSV_FIELDS, (record_row(rec) for rec in r.records))
                       for name, r in results.items()}, summaries)
    return summaries


def write_staged(out: Path, tables: Mapping[str, tuple[Sequence[str], Iterable[Sequence[Any]]]],
                 summaries: Mapping[str, Any]) -> None:
    """``<name>/jobs.csv`` per table (header, rows) and ``summary.json``, staged in a temporary
    directory and moved into ``out`` with ``summary.json`` last (a failed run leaves none)."""
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory(dir=out, prefix=".partial-") as tmp:
        staging = Path(tmp)
        for name, (header, rows) in tables.items():
            (staging / name).mkdir()
            with open(staging / name / "jobs.csv", "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(header)
                w.writerows(rows)
        (staging / "summary.json").write_text(json.dumps(summaries, indent=2) + "\n")
        _move_in(staging, out)


def write_plots(out: Path, cluster: Cluster, results: dict[str, RunResult]) -> None:
    """``jct_cdf.png``, ``over_time.png`` and ``tiers.png`` (matplotlib is imported only here)."""
    import tempfile

    from stint.model.job import Tier
    from stint.report.plots import jct_cdf, over_time
    from stint.report.plots import tiers as tier_plot

    with tempfile.TemporaryDirectory(dir=out, prefix=".partial-") as tmp:
        staging = Path(tmp)
        jct_cdf({n: [x.jct_s for x in r.records if x.completed] for n, r in results.items()}, staging / "jct_cdf.png")
        over_time({n: _rebased(r) for n, r in results.items()}, cluster.total_gpus, staging / "over_time.png")
        per_tier = {t.value: {n: ([x.attainment for x in r.records if x.tier == t.value],
                                  [x.jct_s for x in r.records if x.tier == t.value and x.completed])
                              for n, r in results.items()} for t in Tier}
        per_tier = {t: v for t, v in per_tier.items() if any(a for a, _ in v.values())}
        sla = next(iter(results.values())).sla
        tier_plot(per_tier, {t.value: sla.of(t) for t in Tier}, staging / "tiers.png")
        _move_in(staging, out)


def _move_in(staging: Path, out: Path) -> None:
    for item in sorted(staging.rglob("*"), key=lambda p: (p.name == "summary.json", len(p.parts))):
        if item.is_file():
            dest = out / item.relative_to(staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(item, dest)  # summary.json goes last


def _rebased(r: RunResult) -> tuple[list[float], Any, Any]:
    t, busy, queue = r.series
    return [x - r.start_s for x in t], busy, queue
