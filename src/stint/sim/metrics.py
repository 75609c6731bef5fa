"""Per-job records and per-run metrics (the ``summary.json`` contract)."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field, fields
from typing import Any

from stint.model.job import Tier
from stint.model.sla import SlaTargets, attainment
from stint.sim.costs import NamedCosts


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job. ``rejected`` is empty for completed jobs, else the reason."""

    job_id: str
    arrival_s: float
    first_start_s: float | None
    finish_s: float
    work: float
    work_received: float
    gpus: int
    attained_gpu_s: float
    preemptions: int
    migrations: int
    resizes: int
    utility: float
    rejected: str
    ideal_s: float
    tier: str = "standard"
    sla_ideal_s: float = 0.0  # run time alone at the requested size (the SLA's ideal)
    est_s: float = math.nan  # its length at the requested size as policies knew it (s)
    est_source: str = ""  # where that came from (``policies.knowledge.Source``)

    @property
    def attainment(self) -> float:
        """SLA attainment (``stint.model.sla``): 0 for a rejected job."""
        if self.rejected:
            return 0.0
        return attainment(self.sla_ideal_s, self.jct_s)

    @property
    def completed(self) -> bool:
        return not self.rejected

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> float:
        """Queueing delay: arrival to first start (to the end, if it never started)."""
        start = self.first_start_s if self.first_start_s is not None else self.finish_s
        return start - self.arrival_s

    @property
    def run_s(self) -> float:
        """First start to completion (includes time paused after preemptions)."""
        return 0.0 if self.first_start_s is None else self.finish_s - self.first_start_s


UTILIZATION_BASIS = ("busy GPU-hours / (GPUs x makespan - reserved_gpu_hours): GPU-hours reserved for "
                     "inference are left out of the denominator")

CSV_FIELDS = [f.name for f in fields(JobRecord)] + ["jct_s", "queue_s", "run_s", "attainment"]


def record_row(r: JobRecord) -> list[Any]:
    return [getattr(r, f) for f in CSV_FIELDS]


@dataclass
class RunResult:
    """Everything a run produced; ``summary()`` gives the figures ``summary.json`` carries."""

    policy: str
    records: list[JobRecord]
    total_gpus: int
    busy_gpu_s: float
    start_s: float
    end_s: float  # the last event the engine processed (stale completions and ticks included)
    series: tuple[array[float], array[float], array[float]]  # time, busy GPUs, waiting jobs
    latencies_s: array[float]
    events: int
    wall_s: float
    cpu_s: float = 0.0  # CPU time of the run: steadier than wall time on a shared machine
    refusals: list[str] = field(default_factory=list)  # actions the ledger refused, with why
    cost_model: NamedCosts | None = None  # set by the runner: the costs the run was charged
    job_model: str = ""  # set by the runner: what a job's work means (``traces.JOB_MODELS``)
    batch: str = ""  # set by the runner: "fixed" or "adaptive" (jobs pick their batch size)
    mechanism_gpu_s: float = 0.0  # GPU-seconds charged to action delays (start, resume, resize, migrate)
    sla: SlaTargets = field(default_factory=SlaTargets)  # the targets ``tiers`` is measured against
    # Reserved GPUs (a daily inference reservation, ``stint.sim.reservation``) as change points:
    # from times[i] on, gpus[i] GPUs are reserved; none before times[0].
    reserved: tuple[array[float], array[float]] = field(default_factory=lambda: (array("d"), array("d")))
    reservation: dict[str, float] | None = None  # set by the runner: the reservation's parameters
    knowledge: str = ""  # set by the runner: what policies knew of job lengths (``policies.knowledge``)
    # A typed cluster's busy GPU-seconds and GPUs per accelerator type (empty when untyped).
    busy_by_type: dict[str, float] = field(default_factory=dict)
    gpus_by_type: dict[str, int] = field(default_factory=dict)

    def reserved_gpu_s(self, until_s: float) -> float:
        """GPU-seconds reserved from ``start_s`` to ``until_s``."""
        times, gpus = self.reserved
        total = 0.0
        for i, t in enumerate(times):
            end = min(times[i + 1] if i + 1 < len(times) else until_s, until_s)
            total += gpus[i] * max(end - max(t, self.start_s), 0.0)
        return total

    @property
    def last_finish_s(self) -> float:
        """When the last job that held GPUs left: its completion, or its rejection after running.

        Makespan and utilization end here, not at ``end_s``: the engine may still pop stale
        completion events and ticks after the last job is done.
        """
        ends = (r.finish_s for r in self.records if r.completed or r.attained_gpu_s > 0)
        return max(ends, default=self.start_s)

    def summary(self) -> dict[str, Any]:
        done = [r for r in self.records if r.completed]
        jct = sorted(r.jct_s for r in done)
        lat_ms = sorted(x * 1e3 for x in self.latencies_s) or [0.0]
        span = max(self.last_finish_s - self.start_s, 0.0)
        reserved = self.reserved_gpu_s(self.last_finish_s)
        offered = self.total_gpus * span - reserved

        def pct(q: float) -> float:
            return percentile(jct, q) if jct else 0.0

        return {
            "jobs": len(self.records),
            "refused_actions": len(self.refusals),
            "completed": len(done),
            "rejected": len(self.records) - len(done),
            "avg_jct_s": mean(jct) if jct else 0.0,
            "median_jct_s": pct(50),
            "p95_jct_s": pct(95),
            "p99_jct_s": pct(99),
            "avg_queue_s": mean([r.queue_s for r in done]) if done else 0.0,
            "makespan_s": span,
            "gpu_utilization": self.busy_gpu_s / offered if offered > 0 else 0.0,
            "utilization_basis": UTILIZATION_BASIS,
            "reserved_gpu_hours": reserved / 3600.0,
            "total_utility": float(sum(r.utility for r in self.records)),
            "preemptions": int(sum(r.preemptions for r in self.records)),
            "migrations": int(sum(r.migrations for r in self.records)),
            "resizes": int(sum(r.resizes for r in self.records)),
            "policy_calls": len(self.latencies_s),
            "policy_latency_ms_mean": mean(lat_ms),
            "policy_latency_ms_p99": percentile(lat_ms, 99),
            "events": self.events,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "jobs_per_s": len(self.records) / self.wall_s if self.wall_s > 0 else 0.0,
            "jobs_per_cpu_s": len(self.records) / self.cpu_s if self.cpu_s > 0 else 0.0,
            "mechanism_gpu_hours": self.mechanism_gpu_s / 3600.0,
            "tiers": tier_summary(self.records, self.sla),
            **({"cost_model": self.cost_model.as_dict()} if self.cost_model is not None else {}),
            **({"job_model": self.job_model} if self.job_model else {}),
            **({"batch": self.batch} if self.batch else {}),
            **({"reservation": self.reservation} if self.reservation is not None else {}),
            **({"knowledge": knowledge_summary(self.records, self.knowledge)} if self.knowledge else {}),
            **({"utilization_by_type": self.by_type(span)} if self.gpus_by_type else {}),
        }

    def by_type(self, span: float) -> dict[str, dict[str, float]]:
        """Per accelerator type: its GPUs, busy GPU-hours and utilization over the makespan
        (busy / (GPUs x makespan); a reservation's GPU-hours are not split by type)."""
        out: dict[str, dict[str, float]] = {}
        for t, gpus in self.gpus_by_type.items():
            busy = self.busy_by_type.get(t, 0.0)
            out[t] = {"gpus": gpus, "busy_gpu_hours": busy / 3600.0,
                      "gpu_utilization": busy / (gpus * span) if gpus and span > 0 else 0.0}
        return out


def knowledge_summary(records: list[JobRecord], mode: str) -> dict[str, Any]:
    """What policies knew of job lengths: the mode, how many estimates came from each source,
    and the estimates' error against the true run time at the requested size, over completed
    jobs: the median of estimate / truth, the median |log2| of it, the share within 2x."""
    from stint.policies.knowledge import ESTIMATOR

    sources: dict[str, int] = {}
    for r in records:
        if r.est_source:
            sources[r.est_source] = sources.get(r.est_source, 0) + 1
    ratios = sorted(r.est_s / r.sla_ideal_s for r in records
                    if r.completed and r.sla_ideal_s > 0 and math.isfinite(r.est_s) and math.isfinite(r.sla_ideal_s))
    logs = sorted(abs(math.log2(x)) for x in ratios if x > 0)
    error = {"jobs": len(ratios), "median_ratio": percentile(ratios, 50) if ratios else 0.0,
             "median_abs_log2": percentile(logs, 50) if logs else 0.0,
             "within_2x": mean([float(x <= 1.0) for x in logs]) if logs else 0.0}
    return {"mode": mode, "estimator": ESTIMATOR if mode == "declared" else "the true work",
            "sources": sources, "error": error}


def tier_summary(records: list[JobRecord], sla: SlaTargets) -> dict[str, dict[str, Any]]:
    """Per tier: jobs, completed, target, share meeting it (rejected jobs do not), attainment
    mean, median and 5th percentile, mean and p99 JCT of completed jobs. Tiers without jobs are left out."""
    out: dict[str, dict[str, Any]] = {}
    for tier in Tier:
        rs = [r for r in records if r.tier == tier.value]
        if not rs:
            continue
        att = [r.attainment for r in rs]
        jct = sorted(r.jct_s for r in rs if r.completed)
        out[tier.value] = {
            "jobs": len(rs),
            "completed": int(sum(r.completed for r in rs)),
            "sla_target": sla.of(tier),
            "sla_met_fraction": mean([float(r.completed and sla.met(tier, a)) for r, a in zip(rs, att, strict=True)]),
            "mean_attainment": mean(att),
            "median_attainment": percentile(sorted(att), 50),
            "p5_attainment": percentile(sorted(att), 5),
            "avg_jct_s": mean(jct) if jct else 0.0,
            "p99_jct_s": percentile(jct, 99) if jct else 0.0,
        }
    return out


def mean(values: list[float]) -> float:
    """Arithmetic mean (exactly rounded sum), of a non-empty list."""
    return math.fsum(values) / len(values)


def percentile(ordered: list[float], q: float) -> float:
    """The ``q``-th percentile of non-empty ascending ``ordered``, interpolated linearly between
    the closest ranks (``numpy.percentile``'s default method), without NumPy."""
    i = (len(ordered) - 1) * q / 100.0
    lo = math.floor(i)
    hi = min(lo + 1, len(ordered) - 1)
    a, b, t = ordered[lo], ordered[hi], i - lo
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t
