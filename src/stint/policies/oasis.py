"""OASiS: online admission and worker/PS scheduling by primal-dual pricing (Bao et al., INFOCOM'18).

Alg. 1, once per arriving job: compute the best schedule and its payoff μ_i with Alg. 2
(``oasis_core.best_schedule``), admit iff μ_i > 0, commit the whole schedule and raise the prices
(eq. 22) of the slots it touches. Committed schedules are never revised.

Behind the common interface: ``tick_s`` is the slot length, and the mechanism calls ``plan`` at
every slot boundary while jobs are active; ``plan`` returns every committed job's allocation for
the current slot (the mechanism enacts all of them at once) and ``Plan.reject`` for rejected jobs.
Nodes with role "ps" host PSs; all other nodes host workers (the paper's H and K).

Beyond the paper, for a live cluster where a job's declared length is an estimate: a job still
active after its committed schedule ended is decided again, for the work it has left, like an
arrival (admitted for a new schedule if its payoff is positive, otherwise rejected with that
reason); ``redecide_overrun=False`` keeps the paper's rule (it stays unfinished).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stint.model.allocation import EMPTY, Allocation, Plan, Wait, WaitCode
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.model.utility import SigmoidUtility, Utility
from stint.perf.ps_model import PSJobSpec
from stint.placement.packing import trim_to_feasible
from stint.policies.base import ClusterView, JobStatus, Phase, PolicyBase
from stint.policies.oasis_bounds import BoundsEstimator, PriceBounds
from stint.policies.oasis_core import DPJob, FloatArray, HostPrices, Schedule, best_schedule, commit
from stint.policies.registry import register

DEFAULT_MAX_QUANTA = 64


@dataclass(frozen=True, slots=True)
class HostGroups:
    """The cluster split into worker hosts (H) and PS hosts (K), with normalised capacities."""

    worker_nodes: tuple[int, ...]
    ps_nodes: tuple[int, ...]
    worker_norm: FloatArray  # mean capacity of each resource over worker hosts (1 where 0)
    ps_norm: FloatArray

    @staticmethod
    def of(cluster: Cluster) -> HostGroups:
        w = tuple(i for i, n in enumerate(cluster.nodes) if n.role != "ps")
        p = tuple(i for i, n in enumerate(cluster.nodes) if n.role == "ps")
        if not w:
            raise ValueError("OASiS needs at least one node that hosts workers (role != 'ps')")
        return HostGroups(w, p, _norm(cluster, w), _norm(cluster, p))

    def caps(self, cluster: Cluster, nodes: Sequence[int], norm: FloatArray) -> FloatArray:
        raw = np.array([cluster.nodes[i].capacity.as_tuple() for i in nodes], dtype=np.float64)
        return raw.reshape(len(nodes), len(norm)) / norm


def _norm(cluster: Cluster, nodes: Sequence[int]) -> FloatArray:
    if not nodes:
        return np.ones(4)
    mean = np.array([cluster.nodes[i].capacity.as_tuple() for i in nodes]).mean(axis=0)
    return np.where(mean > 0, mean, 1.0)


def dp_job(spec: JobSpec, arrival_slot: int, end_slot: int, slot_s: float, groups: HostGroups,
           max_quanta: int, fraction: float = 1.0) -> DPJob | str:
    """Translate a job into Alg. 2's terms, or return why it cannot be scheduled.

    A :class:`PSJobSpec` has E_i N_i chunks of M_i(τ_i + 2e_i/b_i) worker-seconds; any other
    ``JobSpec`` is read as ``work × requested_workers`` worker-seconds in one-worker-slot chunks.
    Above ``max_quanta`` units, chunks are merged into equal coarser quanta (open point 10).
    ``fraction`` plans that part of the work: < 1 for a job in progress, other than 1 when the
    job's known length is not its work (``JobStatus.known_work``).
    """
    if isinstance(spec, PSJobSpec):
        work_ws = spec.work / slot_s * fraction
        chunks = max(1, math.ceil(spec.epochs * spec.chunks * fraction - 1e-9))
    else:
        work_ws = spec.work * spec.requested_workers / slot_s * fraction
        chunks = max(1, math.ceil(work_ws - 1e-9))
    quanta = min(chunks, max_quanta)
    ratio: float | None = None
    ps_dem: FloatArray | None = None
    if spec.ps_demand is not None:
        if not groups.ps_nodes:
            return "the job needs parameter servers but the cluster has no node with role 'ps'"
        bw = spec.ps_demand.net_gbps
        ratio = spec.worker_demand.net_gbps / bw if bw > 0 else math.inf
        if ratio > 1:
            return f"b_i/B_i = {ratio:.3g} > 1: constraints (6)-(7) cannot both hold"
        ps_dem = np.array(spec.ps_demand.as_tuple()) / groups.ps_norm
    jct: FloatArray = (arrival_slot + 1) * slot_s - spec.arrival_s + slot_s * np.arange(
        max(0, end_slot - arrival_slot), dtype=np.float64)
    utility = utility_curve(spec.utility, jct)
    return DPJob(arrival_slot, spec.max_workers, quanta, work_ws / quanta, ratio,
                 np.array(spec.worker_demand.as_tuple()) / groups.worker_norm, ps_dem, utility)


def utility_curve(f: Utility, jct_s: FloatArray) -> FloatArray:
    """f at each completion time; vectorised for the paper's sigmoid (eq. in §V)."""
    if isinstance(f, SigmoidUtility):
        x = np.minimum(f.gamma2 * (jct_s / f.slot_s - f.gamma3), 700.0)
        out: FloatArray = f.gamma1 / (1.0 + np.exp(x))
        return np.where(x >= 700.0, 0.0, out)
    return np.array([f(float(t)) for t in jct_s])


@register("oasis")
class OASiS(PolicyBase):
    """The OASiS policy (Alg. 1). Stateful by design: it remembers its committed schedules.

    Parameters: ``slot_s`` (slot length, = ``tick_s``); ``end_slot`` fixes the paper's last slot T
    (absolute), otherwise the horizon rolls ``horizon_slots`` ahead of each arrival; ``bounds``
    fixes U and L (else they are estimated from ``history`` and the jobs seen so far);
    ``bound_scale`` misestimates them (Fig. 6); ``max_quanta`` caps the DP's workload units;
    ``paper_eta`` applies (26)'s proof factor 1/(4η) to L (see ``oasis_bounds``).
    """

    name = "oasis"

    def __init__(self, slot_s: float = 3600.0, horizon_slots: int = 300,
                 end_slot: int | None = None, bounds: PriceBounds | None = None,
                 history: Sequence[JobSpec] = (), bound_scale: float = 1.0,
                 max_quanta: int = DEFAULT_MAX_QUANTA, paper_eta: bool = False,
                 redecide_overrun: bool = True) -> None:
        if slot_s <= 0 or horizon_slots <= 0 or max_quanta <= 0:
            raise ValueError("oasis: slot_s, horizon_slots and max_quanta must be positive")
        self.tick_s: float | None = slot_s
        self.slot_s = slot_s
        self.horizon = horizon_slots if end_slot is None else end_slot
        self.end_slot = end_slot
        self.fixed_bounds = bounds
        self.history = tuple(history)
        self.bound_scale = bound_scale
        self.max_quanta = max_quanta
        self.paper_eta = paper_eta
        self.redecide_overrun = redecide_overrun
        self.lazy_progress = False
        self.groups: HostGroups | None = None
        self.worker_prices: HostPrices | None = None
        self.ps_prices: HostPrices | None = None
        self.estimator: BoundsEstimator | None = None
        self.committed: dict[str, tuple[DPJob, Schedule]] = {}
        self.decided: set[str] = set()
        self._slot = 0  # the slot of the last call

    def next_due(self) -> float | None:
        """The next slot boundary while any schedule is committed (its allocation may change)."""
        return (self._slot + 1) * self.slot_s if self.committed else None

    # -- Alg. 1 ---------------------------------------------------------------------------------
    def plan(self, view: ClusterView) -> Plan:
        self.setup(view.cluster)
        now_slot = math.floor(view.now / self.slot_s + 1e-9)  # the slot containing ``now``
        self._slot = now_slot
        self._release_finished(view, now_slot)
        plan = Plan()
        for st in view.jobs:
            if st.job_id not in self.decided and st.phase == Phase.QUEUED:
                self.decide(st.spec, now_slot, plan, known=st.known_work)
            elif self.redecide_overrun and self._overran(st.job_id, now_slot):
                self.redecide(st, view.now, now_slot, plan)
        for st in view.jobs:
            if st.job_id in self.committed:
                # Alg. 2 sizes per slot one worker at a time: a job that runs only on some
                # counts (an SDK job) gets the largest of them within its slot's allocation.
                want = self.feasible_at(st.spec, now_slot)
                if want != st.allocation:
                    plan.allocations[st.job_id] = want
                if not want and view.explain:
                    plan.waiting[st.job_id] = self._wait(st.job_id, now_slot)
        return plan

    def _overran(self, job_id: str, now_slot: int) -> bool:
        entry = self.committed.get(job_id)
        return entry is not None and now_slot > entry[1].last_slot

    def redecide(self, st: JobStatus, now: float, now_slot: int, plan: Plan) -> None:
        """A job still active after its schedule ended (its length was an estimate): Alg. 1
        again for the work it has left, from this slot."""
        spec = st.spec
        self.committed.pop(spec.job_id)
        fraction = st.known_remaining_at(now) / spec.work or 1.0 / 64  # what it is believed to have left
        assert self.worker_prices is not None and self.groups is not None
        end = self.end_slot if self.end_slot is not None else now_slot + self.horizon
        job = dp_job(spec, now_slot, end, self.slot_s, self.groups, self.max_quanta, fraction)
        sched = None if isinstance(job, str) else best_schedule(
            job, self.worker_prices, self.ps_prices, end)
        if isinstance(job, str) or sched is None:
            plan.reject[spec.job_id] = ("oasis: the committed schedule ended with work left and "
                                        "no schedule of positive payoff remains")
            return
        commit(job, sched, self.worker_prices, self.ps_prices)
        self.committed[spec.job_id] = (job, sched)
        plan.explain[spec.job_id] = self.describe(spec.job_id, "re-admitted for the work left")

    def decide(self, spec: JobSpec, now_slot: int, plan: Plan, known: float | None = None) -> Schedule | None:
        """Steps 1-4 of Alg. 1 for one arriving job; records the outcome in ``plan``.

        The schedule starts at the first slot boundary at or after the arrival (a job arriving
        mid-slot waits for the next slot). ``known`` is the job's work as the policy may know it
        (``JobStatus.known_work``; None: ``spec.work``): the schedule is planned for that much.
        """
        assert self.worker_prices is not None and self.groups is not None
        self.decided.add(spec.job_id)
        a = max(now_slot, math.ceil(spec.arrival_s / self.slot_s - 1e-9))
        end = self.end_slot if self.end_slot is not None else a + self.horizon
        fraction = 1.0 if known is None else known / spec.work
        job = dp_job(spec, a, end, self.slot_s, self.groups, self.max_quanta, fraction)
        if isinstance(job, str):
            plan.reject[spec.job_id] = f"oasis: {job}"
            return None
        self._observe(job)
        self.worker_prices.ensure_slots(end)
        if self.ps_prices is not None:
            self.ps_prices.ensure_slots(end)
        sched = best_schedule(job, self.worker_prices, self.ps_prices, end)
        if sched is None:
            plan.reject[spec.job_id] = "oasis: best payoff μ <= 0 (Alg. 1, admission)"
            return None
        commit(job, sched, self.worker_prices, self.ps_prices)
        self.committed[spec.job_id] = (job, sched)
        plan.explain[spec.job_id] = self.describe(spec.job_id, "admitted")
        return sched

    def _wait(self, job_id: str, now_slot: int) -> Wait:
        _, s = self.committed[job_id]
        later = [s.start_slot + i for i, w in enumerate(s.workers) if w.sum() and
                 s.start_slot + i > now_slot]
        if not later:
            return Wait(WaitCode.ADMITTED, "oasis: admitted; its schedule has ended")
        return Wait(WaitCode.ADMITTED, f"oasis: admitted for slot {later[0]} (starts at "
                    f"{later[0] * self.slot_s:g} s on the store's clock)")

    def describe(self, job_id: str, what: str) -> str:
        """The committed schedule in words: payoff, slots and workers per slot."""
        _, s = self.committed[job_id]
        counts = [int(w.sum()) for w in s.workers]
        runs = ", ".join(f"slot {s.start_slot + i}: {c}" for i, c in enumerate(counts) if c)
        return (f"oasis: {what} (payoff μ = {s.payoff:.4g}); slots {s.start_slot}-{s.last_slot} "
                f"of {self.slot_s:g} s, workers per slot: {runs}")

    def feasible_at(self, spec: JobSpec, slot: int) -> Allocation:
        """``allocation_at``, trimmed to a worker count the job can run on."""
        return trim_to_feasible(spec, self.allocation_at(spec.job_id, slot))

    def allocation_at(self, job_id: str, slot: int) -> Allocation:
        """The committed allocation of ``job_id`` in ``slot`` (EMPTY outside its schedule)."""
        assert self.groups is not None
        _, s = self.committed[job_id]
        j = slot - s.start_slot
        if not 0 <= j < s.workers.shape[0]:
            return EMPTY
        g = self.groups
        return Allocation.of({g.worker_nodes[h]: int(c) for h, c in enumerate(s.workers[j]) if c},
                             {g.ps_nodes[k]: int(c) for k, c in enumerate(s.ps[j]) if c})

    # -- state ----------------------------------------------------------------------------------
    def setup(self, cluster: Cluster) -> None:
        """Split the cluster into host groups and build the price books (once)."""
        if self.groups is not None:
            return
        g = self.groups = HostGroups.of(cluster)
        wcap = g.caps(cluster, g.worker_nodes, g.worker_norm)
        pcap = g.caps(cluster, g.ps_nodes, g.ps_norm)
        self.estimator = BoundsEstimator(self.horizon, float(wcap.sum()), float(pcap.sum()), 4,
                                         self.paper_eta)
        b = self._bounds_or_default()
        self.worker_prices = HostPrices(wcap, b.low_w, b.high_w, self.horizon)
        if g.ps_nodes:
            self.ps_prices = HostPrices(pcap, b.low_p, b.high_p, self.horizon)
        for spec in self.history:
            a = math.ceil(spec.arrival_s / self.slot_s - 1e-9)
            end = self.end_slot if self.end_slot is not None else a + self.horizon
            job = dp_job(spec, a, end, self.slot_s, g, self.max_quanta)
            if not isinstance(job, str):
                self._observe(job)

    def _bounds_or_default(self) -> PriceBounds:
        if self.fixed_bounds is not None:
            return self.fixed_bounds.scaled(self.bound_scale)
        assert self.estimator is not None
        return self.estimator.bounds().scaled(self.bound_scale)

    def _observe(self, job: DPJob) -> None:
        """Running estimate of U and L (eqs. 23-26) from the jobs seen so far."""
        if self.fixed_bounds is not None or self.estimator is None:
            return
        self.estimator.observe(job)
        b = self.estimator.bounds().scaled(self.bound_scale)
        assert self.worker_prices is not None
        if b.low_w != self.worker_prices.low or not np.array_equal(b.high_w, self.worker_prices.high):
            self.worker_prices.set_bounds(b.low_w, b.high_w)
        if self.ps_prices is not None and (b.low_p != self.ps_prices.low
                                           or not np.array_equal(b.high_p, self.ps_prices.high)):
            self.ps_prices.set_bounds(b.low_p, b.high_p)

    def _release_finished(self, view: ClusterView, now_slot: int) -> None:
        """A job that finished before its last planned slot frees the rest of its reservation."""
        active = {st.job_id for st in view.jobs}
        for job_id in [j for j in self.committed if j not in active]:
            job, s = self.committed.pop(job_id)
            assert self.worker_prices is not None
            keep = max(0, now_slot - s.start_slot)
            if keep < s.workers.shape[0]:
                rest = Schedule(s.start_slot + keep, s.last_slot, s.workers[keep:], s.ps[keep:],
                                s.utility, 0.0)
                commit(job, rest, self.worker_prices, self.ps_prices, sign=-1)
