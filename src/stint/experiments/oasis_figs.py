"""One runner per figure of OASiS' evaluation (Figs. 3-6). Each returns per-seed rows.

Every run regenerates its workload from ``(seed, ...)`` so runs are independent and can go to a
process pool. The report writers live in ``oasis_report``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from stint.experiments.opt import isolated_bound, solve_opt
from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import Workload, make_workload
from stint.policies import make
from stint.policies.base import Policy

POLICIES = ("oasis", "fifo-fixed", "drf-ps", "rrh", "dorm")
BOUND = "isolated-bound"  # not a policy: Σ_i f_i(fastest run alone), an upper bound (Fig. 3)
LOADS = (100, 200, 300, 400)
SCALES = (0.2, 0.5, 1.0, 3.0, 5.0, 10.0)
GAMMA1_RANGES = ((50, 100), (75, 100), (1, 100), (25, 100))
SERVERS = (3, 6, 9, 12)

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Task:
    """One policy on one seeded workload; ``workload``/``policy`` are keyword arguments."""

    kind: str
    seed: int
    workload: dict[str, Any]
    policy: str = "oasis"
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)


def build_policy(name: str, wl: Workload, **params: Any) -> Policy:
    """The named policy, configured for the workload's slots (OASiS: U, L from the workload)."""
    if name.startswith("oasis"):  # the paper's setting: restarts are free, plans never revised
        params = {"restart_s": 0.0, "pull_forward": False, **params}
        return make(name, slot_s=wl.slot_s, end_slot=wl.horizon, history=wl.jobs, **params)
    if name == "rrh":
        return make(name, slot_s=wl.slot_s, **params)
    return make(name, **params)


def run_task(task: Task) -> list[Row]:
    """Run one task; returns rows (one per run, or one per job for Fig. 4)."""
    wl = make_workload(task.seed, **task.workload)
    base = {"seed": task.seed, "policy": task.policy, **task.tags}
    if task.kind == "bound":
        return [{**base, "utility": isolated_bound(wl), "rejected": 0, "finished": 0}]
    if task.kind == "opt":
        r = solve_opt(wl, **task.params)
        return [{**base, "utility": r.utility, "bound": r.bound, "optimal": r.optimal}]
    res = evaluate(build_policy(task.policy, wl, **task.params), wl.cluster, wl.jobs,
                   wl.horizon, wl.slot_s)
    if task.kind == "jobs":
        return [_job_row(base, wl, o) for o in res.outcomes.values() if not o.rejected]
    return [{**base, "utility": res.total_utility,
             "rejected": sum(o.rejected for o in res.outcomes.values()),
             "finished": sum(o.finish_slot is not None for o in res.outcomes.values())}]


def _job_row(base: Row, wl: Workload, o: Any) -> Row:
    """(actual - target) completion in slots; unfinished jobs count as finishing at T."""
    spec = next(s for s in wl.jobs if s.job_id == o.job_id)
    last = o.finish_slot if o.finish_slot is not None else wl.horizon - 1
    target = spec.utility.gamma3  # type: ignore[attr-defined]
    return {**base, "job": o.job_id, "class": wl.classes[o.job_id],
            "delta": (last - o.arrival_slot + 1) - target, "finished": o.finish_slot is not None}


def run_all(tasks: Sequence[Task], processes: int = 2,
            progress: Callable[[int, int], None] | None = None) -> list[Row]:
    """Run tasks on a process pool (in order of submission); ``progress(done, total)``."""
    rows: list[Row] = []
    if processes <= 1:
        for i, t in enumerate(tasks):
            rows.extend(run_task(t))
            if progress:
                progress(i + 1, len(tasks))
        return rows
    with ProcessPoolExecutor(processes) as pool:
        for i, out in enumerate(pool.map(run_task, tasks)):
            rows.extend(out)
            if progress:
                progress(i + 1, len(tasks))
    return rows


def fig3_tasks(seeds: Iterable[int], loads: Sequence[int] = LOADS,
               policies: Sequence[str] = POLICIES) -> list[Task]:
    # Slow policies first so that the pool's tail is short.
    order = sorted(policies, key=lambda p: p != "dorm")
    return [Task("total", s, {"jobs": n}, p, tags={"jobs": n})
            for p in order for n in sorted(loads, reverse=True) for s in seeds] + [
        Task("bound", s, {"jobs": n}, BOUND, tags={"jobs": n}) for n in loads for s in seeds]


def fig4_tasks(seeds: Iterable[int], policies: Sequence[str] = POLICIES) -> list[Task]:
    wl = {"jobs": 200, "horizon": 100, "mix": (0.0, 0.5, 0.5), "exact_mix": True}
    return [Task("jobs", s, wl, p) for p in policies for s in seeds]


def fig5_tasks(seeds: Iterable[int]) -> list[Task]:
    tasks = []
    for g1 in GAMMA1_RANGES:
        for n in SERVERS:
            wl = {"jobs": 10, "horizon": 10, "workers": n - n // 2, "ps": n // 2,
                  "gamma1": g1, "scale": 0.1, "window": 8}
            tags = {"gamma1": f"[{g1[0]},{g1[1]}]", "servers": n}
            for s in seeds:
                tasks.append(Task("total", s, wl, "oasis", {"max_quanta": 512}, tags))
                tasks.append(Task("opt", s, wl, "opt", {"time_limit_s": 30.0}, tags))
    return tasks


def fig6_tasks(seeds: Iterable[int], loads: Sequence[int] = LOADS,
               scales: Sequence[float] = SCALES) -> list[Task]:
    return [Task("total", s, {"jobs": n}, "oasis", {"bound_scale": sc},
                 {"jobs": n, "percent": round(sc * 100)})
            for n in sorted(loads, reverse=True) for sc in scales for s in seeds]
