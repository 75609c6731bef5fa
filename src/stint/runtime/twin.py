"""``stint replay``: a live run simulated again, with the same policy and the measured costs.

The live store holds every submission (arrival, spec, declared length), each attempt's measured
times (``runtime/measured.py``) and every decision the controller enacted (``Decision``). The
replay gives each job the length it really had -- its SDK steps at the step time measured at its
requested worker count (at another count: scaled as measured, else by the scaling model) -- lets
the policy know only what it knew live (the declared length, else ``LIVE_DEFAULT_WORK_S``), and
charges each attempt the time it measured from the decision that gave it GPUs to its first step
(its launch, and any wait for the GPUs of a job stopping; an attempt the live run did not have,
and a job that reports no steps: the cost model fitted from the same attempts,
``sim.costs.fit``). The figures are also given with the fitted model alone (``fitted_*``: what
``stint sim --costs-from`` predicts, the twin's error as a model). It then compares, per job
and in total, the live and simulated start (the decision that gave it GPUs), JCT, preemptions
and resizes, and the two decision sequences: the same actions (kind, job, workers) in the same
order, where decisions less than ``jitter_s`` apart may come in either order.

Jobs cancelled by their users, and tasks of other clusters of a fleet, are left out (the
simulator cannot know an operator's cancel).
"""

from __future__ import annotations

import difflib
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from sqlalchemy import select

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.reconcile import Action
from stint.runtime.measured import AttemptTimes, attempts, policy_of, samples, step_times
from stint.runtime.store import Store
from stint.runtime.tables import Decision, Job, NodeRow
from stint.runtime.view import LIVE_DEFAULT_WORK_S, cluster_of, spec_of
from stint.sim.costs import FittedCosts, fit
from stint.sim.engine import Simulator

JITTER_S = 2.0  # decisions closer than this may be in either order (the live loop's timing)


@dataclass(frozen=True, slots=True)
class Step:
    """One decision: at ``at_s`` (store clock), ``kind`` job ``job_id`` to ``workers``."""

    at_s: float
    kind: str
    job_id: str
    workers: int

    def key(self) -> tuple[str, str, int]:
        return self.kind, self.job_id, self.workers


@dataclass(frozen=True, slots=True)
class Outcome:
    """A job's run, live or simulated (None: it never started / never finished)."""

    start_s: float | None
    finish_s: float | None
    preemptions: int
    resizes: int


@dataclass(frozen=True, slots=True)
class LiveRun:
    """What the store holds of a run, as the simulator takes it."""

    nodes: list[tuple[str, int]]
    specs: list[JobSpec]  # with their measured lengths
    measured: dict[str, bool]  # job -> its length is measured (else declared or the default)
    step_s: dict[str, dict[int, float]]  # job -> seconds a step per worker count, measured
    # job -> per attempt, the seconds from the decision that gave it GPUs to its progress
    # (its launch, and the wait for the GPUs a stopped job held); None: not measured
    delays: dict[str, list[float | None]]
    outcomes: dict[str, Outcome]
    decisions: list[Step]
    costs: FittedCosts
    policy: tuple[str, tuple[str, ...]] | None
    left_out: int  # cancelled jobs, other clusters' jobs


@dataclass(frozen=True, slots=True)
class JobTwin:
    job_id: str
    arrival_s: float
    live: Outcome
    sim: Outcome

    def jct(self, o: Outcome) -> float | None:
        return None if o.finish_s is None else o.finish_s - self.arrival_s


@dataclass(slots=True)
class TwinReport:
    policy: str
    options: tuple[str, ...]
    jobs: list[JobTwin]
    live_decisions: list[Step]
    sim_decisions: list[Step]
    costs: FittedCosts
    jitter_s: float
    left_out: int
    measured_lengths: int
    totals: dict[str, float | int | bool | str | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"policy": self.policy, "options": list(self.options), "jitter_s": self.jitter_s,
                "costs": self.costs.as_dict(), "totals": self.totals, "left_out": self.left_out,
                "jobs": [{"job_id": j.job_id, "arrival_s": j.arrival_s,
                          "live": {**asdict(j.live), "jct_s": j.jct(j.live)},
                          "sim": {**asdict(j.sim), "jct_s": j.jct(j.sim)}} for j in self.jobs],
                "live_decisions": [asdict(d) for d in self.live_decisions],
                "sim_decisions": [asdict(d) for d in self.sim_decisions]}


class MeasuredPerf:
    """Progress rates as measured: a job's rate on ``n`` workers relative to its requested size
    is its measured step time there over the one on ``n``; unmeasured sizes follow ``base``."""

    def __init__(self, step_s: dict[str, dict[int, float]], base: ScalingModel) -> None:
        self.step_s, self.base = step_s, base

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        n = allocation.num_workers
        got = self.step_s.get(spec.job_id, {})
        if n and n in got and spec.requested_workers in got and got[n] > 0:
            return got[spec.requested_workers] / got[n]
        return self.base.rate(spec, allocation)


def load(store: Store) -> LiveRun:
    """The store's run: its jobs (with measured lengths), decisions, costs and policy."""
    epoch = store.epoch(0.0)
    rows = attempts(store)
    steps = step_times(rows)
    with store.read() as r:
        jobs = list(r.scalars(select(Job).order_by(Job.id)))
        decisions = list(r.scalars(select(Decision).order_by(Decision.id)))
    users = store.user_names()
    kept = [j for j in jobs if j.state != "cancelled" and j.cluster is None]
    specs, measured = [], {}
    for job in kept:
        spec, known = _spec(job, users.get(job.user_id, ""), epoch, steps.get(job.id, {}))
        specs.append(spec)
        measured[spec.job_id] = known
    ids = {s.job_id for s in specs}
    live = [Step(d.at - epoch, d.kind, str(d.job_id), d.workers) for d in decisions
            if str(d.job_id) in ids]
    outcomes = {str(j.id): _outcome(j, live, epoch) for j in kept}
    with store.read() as r:
        nodes = [(n.name, n.gpus) for n in r.scalars(
            select(NodeRow).where(NodeRow.cluster == "").order_by(NodeRow.position))]
    return LiveRun(nodes, specs, measured, {str(j): s for j, s in steps.items()},
                   _attempt_delays(rows, live, epoch), outcomes, live, fit(samples(rows)),
                   policy_of(store), len(jobs) - len(kept))


_GIVES = frozenset({"start", "resume", "resize", "migrate"})  # decisions that launch an attempt


def _attempt_delays(rows: Sequence[AttemptTimes], steps: Sequence[Step],
                    epoch: float) -> dict[str, list[float | None]]:
    """Per job, for its k-th attempt (launched by its k-th decision that gives it GPUs): the
    seconds from that decision to its first step of its own, less that step's own time."""
    given: dict[str, list[float]] = {}
    for s in steps:
        if s.kind in _GIVES:
            given.setdefault(s.job_id, []).append(s.at_s)
    out: dict[str, list[float | None]] = {}
    for a, sample in zip(rows, samples(rows), strict=True):
        mine = out.setdefault(str(a.job_id), [])
        at = given.get(str(a.job_id), [])
        k = len(mine)
        if sample.launch_s is None or a.first_step_at is None or k >= len(at):
            mine.append(None)
            continue
        lead = a.first_step_at - a.launched_at - sample.launch_s  # its own steps' time
        mine.append(max(0.0, a.first_step_at - epoch - lead - at[k]))
    return out


def _outcome(job: Job, steps: Sequence[Step], epoch: float) -> Outcome:
    """The job's live run: its first start decision, its finish (a success only), its
    preemptions and its resize decisions."""
    mine = [s for s in steps if s.job_id == str(job.id)]
    start = next((s.at_s for s in mine if s.kind == "start"), None)
    finish = job.finished_at - epoch if job.finished_at is not None and job.state == "succeeded" \
        else None
    return Outcome(start, finish, job.preemptions, sum(1 for s in mine if s.kind == "resize"))


def _spec(job: Job, user: str, epoch: float, step_s: dict[int, float]) -> tuple[JobSpec, bool]:
    """The job as submitted, with the length it really had (seconds at its requested size) if
    measured, and what the policy knew of it live (its declared length, else the default)."""
    spec = spec_of(job, user, epoch)
    declared = job.est_s or LIVE_DEFAULT_WORK_S
    work, measured = declared, False
    if job.total_steps and step_s:
        if spec.requested_workers in step_s:
            work, measured = job.total_steps * step_s[spec.requested_workers], True
        else:  # measured at another size only: scaled linearly to the requested one
            n, s = min(step_s.items())
            work, measured = job.total_steps * s * n / spec.requested_workers, True
    return replace(spec, work=max(work, 1e-6), est_s=declared, duration_s=None), measured


def simulate(run: LiveRun, policy: str, options: Sequence[str], per_attempt: bool = True
             ) -> tuple[dict[str, Outcome], list[Step]]:
    """The run's submissions simulated with ``policy`` and the measured lengths, each attempt
    charged what it measured (``per_attempt``; an attempt the live run did not have: the fitted
    model), else the fitted cost model alone (what ``stint sim --costs-from`` charges)."""
    steps: list[Step] = []

    def record(t: float, a: Action) -> None:
        steps.append(Step(t, str(a.kind), a.job_id, a.after.num_workers))

    perf = MeasuredPerf(run.step_s, ScalingModel())
    sim = Simulator(cluster_of(run.nodes), run.specs, make_with_options(policy, options), perf,
                    run.costs.costs, on_action=record,
                    measured_delays=run.delays if per_attempt else None)
    result = sim.run()
    out = {r.job_id: Outcome(r.first_start_s, None if r.rejected else r.finish_s, r.preemptions,
                             r.resizes) for r in result.records}
    return out, steps


def canonical(steps: Sequence[Step], jitter_s: float) -> list[tuple[str, str, int]]:
    """The decisions in order, those less than ``jitter_s`` after the first of their group
    sorted by (job, kind, workers): an order that timing jitter cannot change."""
    out: list[tuple[str, str, int]] = []
    group: list[Step] = []
    for s in sorted(steps, key=lambda s: s.at_s):  # (stable: equal times keep their order)
        if group and s.at_s - group[0].at_s >= jitter_s:
            out += [g.key() for g in sorted(group, key=lambda g: (g.job_id, g.kind, g.workers))]
            group = []
        group.append(s)
    out += [g.key() for g in sorted(group, key=lambda g: (g.job_id, g.kind, g.workers))]
    return out


def compare(run: LiveRun, policy: str, options: Sequence[str],
            jitter_s: float = JITTER_S) -> TwinReport:
    """Simulate ``run`` and set it beside the live one."""
    sim, sim_steps = simulate(run, policy, options)
    fitted, fitted_steps = simulate(run, policy, options, per_attempt=False)
    none = Outcome(None, None, 0, 0)
    jobs = [JobTwin(s.job_id, s.arrival_s, run.outcomes[s.job_id], sim.get(s.job_id, none))
            for s in run.specs]
    report = TwinReport(policy, tuple(options), jobs, run.decisions, sim_steps, run.costs,
                        jitter_s, run.left_out, sum(run.measured.values()))
    report.totals = totals(report)
    model = TwinReport(policy, tuple(options), [replace(j, sim=fitted.get(j.job_id, none))
                                                for j in jobs],
                       run.decisions, fitted_steps, run.costs, jitter_s, run.left_out,
                       report.measured_lengths)
    got = totals(model)
    report.totals.update({f"fitted_{k}": got[k] for k in (
        "mean_jct_sim_s", "mean_jct_deviation_pct", "p99_wait_sim_s", "p99_wait_deviation_pct",
        "decisions_identical", "decision_agreement")})
    return report


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)]


def _deviation(live: float | None, sim: float | None) -> float | None:
    """(sim - live) / live in percent."""
    if live is None or sim is None or live == 0:
        return None
    return 100.0 * (sim - live) / live


def totals(r: TwinReport) -> dict[str, float | int | bool | str | None]:
    both = [j for j in r.jobs if j.jct(j.live) is not None and j.jct(j.sim) is not None]
    live_jct = _mean([j.jct(j.live) or 0.0 for j in both])
    sim_jct = _mean([j.jct(j.sim) or 0.0 for j in both])
    started = [j for j in r.jobs if j.live.start_s is not None and j.sim.start_s is not None]
    live_wait = _p99([(j.live.start_s or 0.0) - j.arrival_s for j in started])
    sim_wait = _p99([(j.sim.start_s or 0.0) - j.arrival_s for j in started])
    a, b = canonical(r.live_decisions, r.jitter_s), canonical(r.sim_decisions, r.jitter_s)
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                 None if len(a) == len(b) else min(len(a), len(b)))
    diff = None
    if first is not None:
        diff = (f"decision {first + 1}: live {_says(a, first)}, simulated {_says(b, first)}")
    return {"jobs": len(r.jobs), "compared_jct": len(both), "measured_lengths": r.measured_lengths,
            "mean_jct_live_s": live_jct, "mean_jct_sim_s": sim_jct,
            "mean_jct_deviation_pct": _deviation(live_jct, sim_jct),
            "p99_wait_live_s": live_wait, "p99_wait_sim_s": sim_wait,
            "p99_wait_deviation_pct": _deviation(live_wait, sim_wait),
            "preemptions_live": sum(j.live.preemptions for j in r.jobs),
            "preemptions_sim": sum(j.sim.preemptions for j in r.jobs),
            "resizes_live": sum(j.live.resizes for j in r.jobs),
            "resizes_sim": sum(j.sim.resizes for j in r.jobs),
            "decisions_live": len(a), "decisions_sim": len(b),
            "decisions_identical": a == b,
            "decision_agreement": difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
            if a or b else 1.0,
            "first_difference": diff}


def _says(seq: list[tuple[str, str, int]], i: int) -> str:
    if i >= len(seq):
        return "none (the sequence ended)"
    kind, job, workers = seq[i]
    return f"{kind} job {job} to {workers} worker(s)"


def text(r: TwinReport) -> str:
    """The report as ``stint replay`` prints it."""
    def f(x: object) -> str:
        return f"{x:.1f}" if isinstance(x, float | int) else "-"

    lines = [f"policy {r.policy}" + (f" ({', '.join(r.options)})" if r.options else "")
             + f"; costs measured: start {r.costs.costs.start_s:.2f} s, resume "
             f"{r.costs.costs.resume_s:.2f} s, stop {r.costs.costs.stop_s:.2f} s "
             f"({r.costs.samples.get('start', 0)} starts, {r.costs.samples.get('resume', 0)} "
             f"resumes, {r.costs.samples.get('stop', 0)} stops)",
             (f"{'JOB':>6} {'START live':>11} {'sim':>8} {'JCT live':>9} {'sim':>8} "
             f"{'PREEMPT':>7} {'RESIZE':>6}")]
    for j in r.jobs:
        lines.append(f"{j.job_id:>6} {f(j.live.start_s):>11} {f(j.sim.start_s):>8} "
                     f"{f(j.jct(j.live)):>9} {f(j.jct(j.sim)):>8} "
                     f"{j.live.preemptions:>3}/{j.sim.preemptions:<3} {j.live.resizes:>2}/{j.sim.resizes:<3}")
    t = r.totals
    lines += [(f"mean JCT: live {f(t['mean_jct_live_s'])} s, simulated {f(t['mean_jct_sim_s'])} s "
              f"({_pct(t['mean_jct_deviation_pct'])}); p99 wait: live {f(t['p99_wait_live_s'])} s, "
              f"simulated {f(t['p99_wait_sim_s'])} s ({_pct(t['p99_wait_deviation_pct'])})"),
              f"decisions: {t['decisions_live']} live, {t['decisions_sim']} simulated: "
              + ("identical" if t["decisions_identical"] else
                 f"differ ({t['first_difference']}); agreement {float(t['decision_agreement'] or 0):.2f}")
              + f" (jitter allowed {r.jitter_s:g} s)",
              f"with the fitted cost model instead of each attempt's own costs: mean JCT "
              f"{f(t['fitted_mean_jct_sim_s'])} s ({_pct(t['fitted_mean_jct_deviation_pct'])}), "
              f"p99 wait {f(t['fitted_p99_wait_sim_s'])} s ({_pct(t['fitted_p99_wait_deviation_pct'])}), "
              "decisions " + ("identical" if t["fitted_decisions_identical"] else
                              f"agreement {float(t['fitted_decision_agreement'] or 0):.2f}")]
    if r.left_out:
        lines.append(f"left out: {r.left_out} job(s) cancelled or on other clusters")
    return "\n".join(lines)


def _pct(x: object) -> str:
    return "-" if not isinstance(x, float) else f"{x:+.1f} %"
