"""The API's read models of the cluster over time (what the dashboard shows; ``api`` routes them):
the timeline and utilization (``history``), SLA attainment per tier, a job's progress report."""

from __future__ import annotations

import os
from pathlib import Path

from stint.model.job import Tier
from stint.model.sla import SlaTargets
from stint.runtime import history as h
from stint.runtime.executor.shim import read_json_nofollow
from stint.runtime.schemas import (
    ClusterOut,
    HistoryOut,
    MarkOut,
    ProgressOut,
    SegmentOut,
    TierOut,
    live_attainment,
    node_name,
)
from stint.runtime.states import HOLDING
from stint.runtime.store import Caller, Store, load_alloc
from stint.runtime.tables import Job
from stint.sim.forecast import BASIS

MAX_STATUS_BYTES = 64 * 1024
_HOLDING = frozenset(str(s) for s in HOLDING)


def history_out(store: Store, who: Caller, since: float, now: float,
                job_id: int | None = None) -> HistoryOut:
    jobs, rows = store.history(since, job_id)
    steps = [h.Step(t.job_id, t.src, t.dst, t.at, t.attempt, t.reason, t.allocation)
             for t in rows]
    nodes = store.nodes()
    names = [n.name for n in sorted(nodes, key=lambda n: n.position)]
    mine = {j.id for j in jobs if who.is_admin or j.user_id == who.user_id}
    holds = h.segments(steps)
    return HistoryOut(
        since=since, now=now, total_gpus=sum(n.gpus for n in nodes),
        segments=[SegmentOut(job=g.job_id, attempt=g.attempt, start=g.start, end=g.end,
                             allocation={node_name(names, n): c for n, c in g.allocation.workers},
                             ended=g.ended)
                  for g in holds if g.job_id in mine and (g.end is None or g.end >= since)],
        marks=[MarkOut(job=m.job_id, at=m.at, kind=m.kind, reason=m.reason)
               for m in h.marks(steps) if m.job_id in mine and m.at >= since],
        utilization=_window(h.utilization(holds, now), since),
        waiting=_window(h.waiting([h.JobTimes(j.id, j.submitted_at, j.finished_at)
                                   for j in jobs], steps), since),
        sla_met=h.sla_met(_finished_against(jobs, SlaTargets())),
    )


def _finished_against(jobs: list[Job], targets: SlaTargets) -> list[tuple[float, str, bool]]:
    """``(finished at, tier, met)`` of each finished job that ran, in a tier with a target."""
    out = []
    for j in jobs:
        target = targets.of(Tier(j.tier))
        a = live_attainment(j, j.finished_at) if j.finished_at is not None else None
        if target is not None and a is not None and j.finished_at is not None:
            out.append((j.finished_at, j.tier, targets.met(Tier(j.tier), a)))
    return out


def cluster_out(store: Store, policy: str, since: float, now: float,
                targets: SlaTargets | None = None) -> ClusterOut:
    jobs = store.jobs_since(since)
    used = sum(load_alloc(j.allocation).num_workers for j in jobs if j.state in _HOLDING)
    return ClusterOut(policy=policy, total_gpus=sum(n.gpus for n in store.nodes()),
                      used_gpus=used, tiers=tiers(jobs, now, targets or SlaTargets()),
                      forecast_basis=BASIS)


def tiers(jobs: list[Job], now: float, targets: SlaTargets) -> list[TierOut]:
    """Per tier with jobs: how many, how many meet the tier's target so far, the mean."""
    out = []
    for tier in Tier:
        values = [a for j in jobs if j.tier == tier.value
                  and (a := live_attainment(j, now)) is not None]
        n = sum(j.tier == tier.value for j in jobs)
        if n:
            out.append(TierOut(tier=tier.value, target=targets.of(tier), jobs=n,
                               met=sum(targets.met(tier, a) for a in values),
                               mean_attainment=sum(values) / len(values) if values else None))
    return out


def progress_out(path: Path, total_steps: int | None) -> ProgressOut:
    """The job's ``status.json`` (read like its log: no links followed, a plain file only)."""
    body = read_json_nofollow(str(path), MAX_STATUS_BYTES)
    report = body if isinstance(body, dict) else {}
    try:
        at: float | None = os.lstat(path).st_mtime if report else None
    except OSError:
        at = None
    return ProgressOut(step=_int(report.get("step")), total_steps=total_steps,
                       checkpoint_step=_int(report.get("checkpoint_step")), reported_at=at)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _window(series: list[tuple[float, int]], since: float) -> list[tuple[float, int]]:
    """The points from ``since`` on, led by the level at ``since``."""
    before = [p for p in series if p[0] < since]
    after = [p for p in series if p[0] >= since]
    return ([(since, before[-1][1])] if before else []) + after
