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
from stint.policies.oasis_core import (
    DPJob,
    FloatArray,
    HostPrices,
    Schedule,
    best_schedule,
    commit,
    schedule_cost,
)
from stint.policies.oasis_reasons import rejection_reason
from stint.policies.oasis_restart import NEAR, RestartCosts, best_schedule_with_costs
from stint.policies.registry import register

DEFAULT_MAX_QUANTA = 64
RESTART_QUANTA = 1024  # the DP that prices restarts plans in units this fine (one worker-slot)
# The simulator's cost model (``sim.costs.CostModel``; policies do not import the simulator):
# a resize, resume or move costs 30 s without progress, a first start nothing.
DEFAULT_RESTART_S = 30.0
DEFAULT_START_S = 0.0


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
           max_quanta: int, fraction: float = 1.0, fine: bool = False) -> DPJob | str:
    """Translate a job into Alg. 2's terms, or return why it cannot be scheduled.

    A :class:`PSJobSpec` has E_i N_i chunks of M_i(τ_i + 2e_i/b_i) worker-seconds; any other
    ``JobSpec`` is read as ``work × requested_workers`` worker-seconds in one-worker-slot chunks.
    Above ``max_quanta`` units, chunks are merged into equal coarser quanta (open point 10);
    with ``fine`` (the DP that prices restarts) never so coarse that one quantum needs more than
    the job's most workers in a slot.
    ``fraction`` plans that part of the work: < 1 for a job in progress, other than 1 when the
    job's known length is not its work (``JobStatus.known_work``).
    """
    if isinstance(spec, PSJobSpec):
        work_ws = spec.work / slot_s * fraction
        chunks = max(1, math.ceil(spec.epochs * spec.chunks * fraction - 1e-9))
    else:
        work_ws = spec.work * spec.requested_workers / slot_s * fraction
        chunks = max(1, math.ceil(work_ws - 1e-9))
    floor = math.ceil(work_ws / spec.max_workers - 1e-9) if fine else 1
    quanta = min(chunks, max(max_quanta, floor))
    ratio: float | None = None
    ps_dem: FloatArray | None = None
    if spec.ps_demand is not None:
        if not groups.ps_nodes:
            return ("the job needs parameter servers but the cluster has no node with role 'ps': "
                    "add PS hosts to the cluster or submit it without PSs")
        bw = spec.ps_demand.net_gbps
        ratio = spec.worker_demand.net_gbps / bw if bw > 0 else math.inf
        if ratio > 1:
            return (f"b_i/B_i = {ratio:.3g} > 1: constraints (6)-(7) cannot both hold (a PS "
                    "needs at least a worker's bandwidth)")
        ps_dem = np.array(spec.ps_demand.as_tuple()) / groups.ps_norm
    jct: FloatArray = (arrival_slot + 1) * slot_s - spec.arrival_s + slot_s * np.arange(
        max(0, end_slot - arrival_slot), dtype=np.float64)
    utility = utility_curve(spec.utility, jct)
    counts = tuple(c for c in spec.feasible_counts() if c <= spec.max_workers)
    return DPJob(arrival_slot, spec.max_workers, quanta, work_ws / quanta, ratio,
                 np.array(spec.worker_demand.as_tuple()) / groups.worker_norm, ps_dem, utility,
                 counts, spec.min_ps, spec.max_ps)


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
    ``restart_s`` is what a resize, a resume or a move costs a job (seconds without progress) and
    ``start_s`` what its first start costs; defaults: the simulator's cost model
    (``sim.costs.CostModel``). When either is positive, or an arrival is planned into a slot
    already under way, schedules come from the DP that prices them (``oasis_restart``); with
    both 0 and arrivals on slot boundaries, from the paper's Alg. 2. ``pull_forward``: when a job
    finishes early, admitted jobs that have not started are planned again from now (a better
    payoff or an earlier completion replaces their schedule).
    """

    per_type = True  # on a typed cluster: admission prices per type's host group (policies.per_type)

    name = "oasis"

    def __init__(self, slot_s: float = 3600.0, horizon_slots: int = 300,
                 end_slot: int | None = None, bounds: PriceBounds | None = None,
                 history: Sequence[JobSpec] = (), bound_scale: float = 1.0,
                 max_quanta: int = DEFAULT_MAX_QUANTA, paper_eta: bool = False,
                 redecide_overrun: bool = True, restart_s: float = DEFAULT_RESTART_S,
                 start_s: float = DEFAULT_START_S, pull_forward: bool = True) -> None:
        if slot_s <= 0 or horizon_slots <= 0 or max_quanta <= 0:
            raise ValueError("oasis: slot_s, horizon_slots and max_quanta must be positive")
        if restart_s < 0 or start_s < 0:
            raise ValueError(f"oasis: restart_s and start_s must be >= 0 (got {restart_s}, {start_s})")
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
        self.restart_s = restart_s
        self.start_s = start_s
        self.pull_forward = pull_forward
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
        freed = self._release_finished(view, now_slot)
        plan = Plan()
        for st in view.jobs:
            if st.job_id not in self.decided and st.phase == Phase.QUEUED:
                self.decide(st.spec, now_slot, plan, known=st.known_work, now=view.now)
            elif self.redecide_overrun and self._overran(st.job_id, now_slot):
                waiting = {w.job_id: w for w in view.jobs
                           if w.phase == Phase.QUEUED and w.job_id in self.committed}
                self.redecide(st, view.now, now_slot, plan, waiting)
        if freed and self.pull_forward:
            for st in view.jobs:
                if st.job_id in self.committed and st.phase == Phase.QUEUED:
                    self._pull_forward(st, view.now, now_slot, plan)
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

    def _costs(self, now: float, slot: int, st: JobStatus | None = None) -> RestartCosts:
        """The mechanism's costs in slots, and the first slot's part still ahead at ``now``."""
        frac = min(1.0, max(0.0, (slot + 1) - now / self.slot_s))
        hosts = None
        if st is not None and st.allocation:
            assert self.groups is not None
            where = dict(st.allocation.workers)
            hosts = np.array([where.get(i, 0) for i in self.groups.worker_nodes], dtype=np.int64)
        return RestartCosts(self.restart_s / self.slot_s, self.start_s / self.slot_s, frac,
                            st.allocation.num_workers if st is not None else 0, hosts)

    def _schedule(self, job: DPJob, end: int, rc: RestartCosts) -> Schedule | None:
        """The best schedule for ``job`` (any payoff): the paper's Alg. 2 when the mechanism's
        costs are 0 and the first slot is whole, else the DP that prices them."""
        assert self.worker_prices is not None
        self.worker_prices.ensure_slots(end)
        if self.ps_prices is not None:
            self.ps_prices.ensure_slots(end)
        if rc.restart == 0 and rc.start == 0 and rc.first_frac >= 1.0 - 1e-9:
            return best_schedule(job, self.worker_prices, self.ps_prices, end)
        return best_schedule_with_costs(job, self.worker_prices, self.ps_prices, end, rc)

    def _job(self, spec: JobSpec, slot: int, end: int, fraction: float) -> DPJob | str:
        assert self.groups is not None
        costed = self.restart_s > 0 or self.start_s > 0
        quanta = max(self.max_quanta, RESTART_QUANTA) if costed else self.max_quanta
        return dp_job(spec, slot, end, self.slot_s, self.groups, quanta, fraction, costed)

    def redecide(self, st: JobStatus, now: float, now_slot: int, plan: Plan,
                 waiting: dict[str, JobStatus] | None = None) -> None:
        """A job still active after its schedule ended (its length was an estimate): Alg. 1
        again for the work it has left, from this slot (continuing on its current workers costs
        no restart). A running one that would be stopped for admitted jobs that have not started
        (``waiting``) keeps its workers, and they are planned after it, if they all still can be
        (``_displace``)."""
        spec = st.spec
        self._release(spec.job_id, now_slot)
        fraction = st.known_remaining_at(now) / spec.work or 1.0 / 64  # what it is believed to have left
        end = self.end_slot if self.end_slot is not None else now_slot + self.horizon
        job = self._job(spec, now_slot, end, fraction)
        rc = self._costs(now, now_slot, st)
        sched = None if isinstance(job, str) else self._schedule(job, end, rc)
        if (not isinstance(job, str) and waiting and rc.hosts_now is not None
                and not self._continues(sched, rc, now_slot)
                and self._displace(st, job, end, rc, now, now_slot, waiting, plan)):
            plan.explain[spec.job_id] = self.describe(spec.job_id, "re-admitted for the work "
                                                      "left, on its workers")
            return
        if isinstance(job, str) or sched is None or sched.payoff <= 0:
            why = job if isinstance(job, str) else self._why(spec, job, sched, end, now)
            plan.reject[spec.job_id] = ("oasis: it ran past the end of its committed schedule "
                                        f"(its length is an estimate) and {why}")
            return
        self._commit(spec.job_id, job, sched)
        plan.explain[spec.job_id] = self.describe(spec.job_id, "re-admitted for the work left")

    @staticmethod
    def _continues(sched: Schedule | None, rc: RestartCosts, now_slot: int) -> bool:
        """Does the schedule keep the job running now, on the workers it holds?"""
        return (sched is not None and sched.payoff > 0 and sched.start_slot == now_slot
                and rc.hosts_now is not None and np.array_equal(sched.workers[0], rc.hosts_now))

    def _displace(self, st: JobStatus, job: DPJob, end: int, rc: RestartCosts, now: float,
                  now_slot: int, waiting: dict[str, JobStatus], plan: Plan) -> bool:
        """A running job that overran would be stopped for admitted jobs that have not started:
        plan it first, on its workers, and those jobs again after it, if every one of them
        still has a schedule of positive payoff (else nothing changes). True if done."""
        movable = [w for w in waiting.values() if w.job_id in self.committed]
        if not movable:
            return False
        old = {w.job_id: self.committed[w.job_id] for w in movable}
        for w in movable:
            self._release(w.job_id, now_slot)
        moved: list[str] = []
        ok = False
        cont = self._schedule(job, end, rc)
        if self._continues(cont, rc, now_slot):
            assert cont is not None
            self._commit(st.job_id, job, cont)
            moved.append(st.job_id)
            ok = True
            for w in movable:
                w_end = self.end_slot if self.end_slot is not None else now_slot + self.horizon
                new_job = self._job(w.spec, now_slot, w_end, w.known_remaining_at(now) / w.spec.work)
                new = None if isinstance(new_job, str) else self._schedule(
                    new_job, w_end, self._costs(now, now_slot))
                if isinstance(new_job, str) or new is None or new.payoff <= 0:
                    ok = False
                    break
                self._commit(w.job_id, new_job, new)
                moved.append(w.job_id)
        if not ok:  # undo: every admitted job keeps its schedule
            for job_id in moved:
                self._release(job_id, now_slot)
            for job_id, (j, sched) in old.items():
                self._restore(job_id, j, sched, now_slot)
            return False
        for w in movable:
            plan.explain[w.job_id] = self.describe(
                w.job_id, f"planned again after job {st.job_id}, which ran past its estimate")
        return True

    def _restore(self, job_id: str, job: DPJob, sched: Schedule, now_slot: int) -> None:
        """Book again the part of ``sched`` from ``now_slot`` on (``_release`` gave it back)."""
        assert self.worker_prices is not None
        keep = max(0, now_slot - sched.start_slot)
        if keep < sched.workers.shape[0]:
            commit(job, Schedule(sched.start_slot + keep, sched.last_slot, sched.workers[keep:],
                                 sched.ps[keep:], sched.utility, 0.0),
                   self.worker_prices, self.ps_prices)
        self.committed[job_id] = (job, sched)

    def decide(self, spec: JobSpec, now_slot: int, plan: Plan, known: float | None = None,
               now: float | None = None) -> Schedule | None:
        """Steps 1-4 of Alg. 1 for one arriving job; records the outcome in ``plan``.

        The schedule starts in the slot containing ``now`` (the part of it still ahead) or at
        the job's arrival slot if that is later; ``now`` None: at the first slot boundary at or
        after the arrival (the paper's rule). ``known`` is the job's work as the policy may know
        it (``JobStatus.known_work``; None: ``spec.work``): the schedule is planned for that much.
        """
        assert self.worker_prices is not None and self.groups is not None
        self.decided.add(spec.job_id)
        arrival = math.ceil(spec.arrival_s / self.slot_s - 1e-9)
        if now is not None:
            arrival = math.floor(spec.arrival_s / self.slot_s + 1e-9)
        a = max(now_slot, arrival)
        end = self.end_slot if self.end_slot is not None else a + self.horizon
        fraction = 1.0 if known is None else known / spec.work
        job = self._job(spec, a, end, fraction)
        if isinstance(job, str):
            plan.reject[spec.job_id] = f"oasis: {job}"
            return None
        self._observe(job)
        at = max(now if now is not None else a * self.slot_s, spec.arrival_s)
        sched = self._schedule(job, end, self._costs(at, a))
        if sched is None or sched.payoff <= 0:
            plan.reject[spec.job_id] = f"oasis: not admitted (Alg. 1): {self._why(spec, job, sched, end, at)}"
            return None
        self._commit(spec.job_id, job, sched)
        plan.explain[spec.job_id] = self.describe(spec.job_id, "admitted")
        return sched

    def _commit(self, job_id: str, job: DPJob, sched: Schedule) -> None:
        assert self.worker_prices is not None
        commit(job, sched, self.worker_prices, self.ps_prices)
        self.committed[job_id] = (job, sched)

    def _pull_forward(self, st: JobStatus, now: float, now_slot: int, plan: Plan) -> None:
        """Capacity was freed: an admitted job that never ran is planned again from now; the new
        schedule replaces its own if it ends no later and pays more at today's prices, or ends
        earlier for a payoff within ``NEAR`` of its utility (the tolerance of ``oasis_restart``)."""
        job, old = self.committed[st.job_id]
        if old.start_slot <= now_slot and old.workers[:1].any():
            return  # it was planned to run now already
        assert self.worker_prices is not None
        self._release(st.job_id, now_slot)
        old_payoff = old.utility - schedule_cost(job, old, self.worker_prices, self.ps_prices)
        end = self.end_slot if self.end_slot is not None else now_slot + self.horizon
        fraction = st.known_remaining_at(now) / st.spec.work
        new_job = self._job(st.spec, now_slot, end, fraction)
        new = None if isinstance(new_job, str) else self._schedule(
            new_job, end, self._costs(now, now_slot))
        tol = NEAR * max(abs(old_payoff), old.utility)
        if (isinstance(new_job, str) or new is None or new.payoff <= 0
                or new.last_slot > old.last_slot or not (
                    new.payoff > old_payoff or (new.last_slot < old.last_slot
                                                and new.payoff >= old_payoff - tol))):
            self._commit(st.job_id, job, old)
            return
        self._commit(st.job_id, new_job, new)
        plan.explain[st.job_id] = self.describe(st.job_id, "planned earlier (capacity freed)")

    def _release(self, job_id: str, now_slot: int) -> None:
        """Give back the job's reservation from ``now_slot`` on (it leaves ``committed``)."""
        job, s = self.committed.pop(job_id)
        assert self.worker_prices is not None
        keep = max(0, now_slot - s.start_slot)
        if keep < s.workers.shape[0]:
            rest = Schedule(s.start_slot + keep, s.last_slot, s.workers[keep:], s.ps[keep:],
                            s.utility, 0.0)
            commit(job, rest, self.worker_prices, self.ps_prices, sign=-1)

    def _why(self, spec: JobSpec, job: DPJob, sched: Schedule | None, end: int, now: float) -> str:
        """Which input decided a rejection, and what to change (``oasis_reasons``)."""
        assert self.worker_prices is not None
        return rejection_reason(spec, job, sched, end, now, self.slot_s,
                                self.horizon if self.end_slot is None else None,
                                self._costs(now, job.arrival_slot))

    def _wait(self, job_id: str, now_slot: int) -> Wait:
        _, s = self.committed[job_id]
        later = [s.start_slot + i for i, w in enumerate(s.workers) if w.sum() and
                 s.start_slot + i > now_slot]
        if not later:
            return Wait(WaitCode.ADMITTED, "oasis: admitted; its schedule has ended")
        return Wait(WaitCode.ADMITTED, f"oasis: admitted for slot {later[0]} (starts at "
                    f"{later[0] * self.slot_s:g} s on the store's clock)")

    def describe(self, job_id: str, what: str) -> str:
        """The committed schedule in words: payoff, slots and workers per slot (runs of equal
        counts as one range); a job with parameter servers: workers and PSs per slot."""
        _, s = self.committed[job_id]
        runs: list[tuple[int, int, tuple[int, int]]] = []  # (first, last slot, (workers, PSs))
        for i, w in enumerate(s.workers):
            c, t = (int(w.sum()), int(s.ps[i].sum())), s.start_slot + i
            if runs and runs[-1][2] == c and runs[-1][1] == t - 1:
                runs[-1] = (runs[-1][0], t, c)
            else:
                runs.append((t, t, c))
        with_ps = bool(s.ps.sum())
        text = ", ".join((f"slot {f}" if f == last else f"slots {f}-{last}")
                         + (f": {c[0]} + {c[1]} PS" if with_ps else f": {c[0]}")
                         for f, last, c in runs if c[0])
        what_per = "workers + PSs" if with_ps else "workers"
        return (f"oasis: {what} (payoff μ = {s.payoff:.4g}); slots {s.start_slot}-{s.last_slot} "
                f"of {self.slot_s:g} s, {what_per} per slot: {text}")

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

    def _release_finished(self, view: ClusterView, now_slot: int) -> bool:
        """A job that finished before its last planned slot frees the rest of its reservation.
        True if any did."""
        active = {st.job_id for st in view.jobs}
        gone = [j for j in self.committed if j not in active]
        for job_id in gone:
            self._release(job_id, now_slot)
        return bool(gone)
