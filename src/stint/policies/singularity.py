"""Singularity's scheduler ("Singularity: Planet-Scale, Preemptive and Elastic Scheduling of AI
Workloads", Shukla et al., arXiv:2202.07848): SLA tiers, no idle GPU, no lost work.

The paper publishes the mechanisms (transparent preemption, resize and migration) but not the
policy; this is a policy designed for them, after its promises.

Quantities, for a job j at ``now`` (``stint.model.sla``): its tier's target τ (premium 0.95,
standard 0.70, basic none); its requested rate ρ (the performance model's rate at the requested
size, packed on the fewest nodes); its remaining ideal time r = remaining *known* work / ρ
(``JobStatus.known_remaining_at``: declared or estimated, never the recorded length; ideal and
deadline likewise from ``known_work``); its
*projected attainment* if it ran at rate x from now after one restart,
``attainment(ideal, now + restart_s + remaining/x - arrival)``; its *surplus* = projected
attainment at ρ minus τ (τ = 0 for basic); its *slack* = the latest finish meeting τ minus
(now + restart_s + r) (infinite for basic). Of the cluster: the *drain time* D = the remaining
GPU-seconds of every active job at its requested size / the GPUs up now (``_drain``).

Rules, applied in this order at every pass (arrivals, completions, node changes, ticks):
1. Admission: every job is admitted; one too big for the whole cluster at its smallest size is
   rejected with the reason.
2. Waiting jobs are served in this order: (a) higher tier first; (b) jobs that can still meet
   their target (at their largest size, after one restart) before those that cannot; (c) among
   those that can, less slack first (earliest deadline); among the others and basic jobs, the
   critical ones (rule 8) first, the longest remaining first, then the lowest projected
   attainment first (highest response ratio: a short job that waited long goes before a long
   one that just came, and no job waits for ever); (d) earlier arrival; (e) job id.
   Each takes, at its requested size (placement consolidated): free GPUs, where its projected
   attainment on that placement meets its target (a job spread over more nodes runs slower);
   else, if free GPUs suffice but are fragmented, a migration of one running job (rule 5); else
   the capacity reclaimed by rule 3; else, if the free GPUs held a placement too spread out for
   its target, that one.
3. Reclaiming, in this order, stopping as soon as the waiting job fits: (a) *give back*: jobs
   grown above their requested size return to it (any tier; hysteresis does not apply to returning
   borrowed GPUs); (b) *shrink* jobs of a strictly lower tier, just enough, to a smaller size they
   can run on; (c) *time-slice* the waiting job itself: start it on the largest feasible count
   below its request that fits (fewer workers than logical ranks, which the SDK supports), if its
   projected attainment there still meets its target; (d) *preempt* jobs of a strictly lower tier.
   In (b) and (d), a waiting job that has a target and can still meet it also takes from jobs of
   its own tier that are less urgent (earliest deadline first, with preemption): a job of its tier
   whose slack after the action still exceeds the waiting job's slack by ``min_hold_s``; a
   critical waiting job without a target it can meet (rule 8) takes from the jobs of its tier
   that are not critical.
   Victims in (a), (b), (d) are taken in this order: (i) lowest tier first; (ii) within a tier,
   jobs not critical before critical ones (rule 8), then the largest surplus (furthest above its
   SLA) first, among critical ones the shortest remaining first; (iii) the latest arrival; (iv)
   job id.
4. A premium or standard victim is touched only if its slack stays positive after the action: a
   shrink costs it restart_s plus the slower rate on its remaining work; a preemption costs it
   restart_s plus ``min_hold_s`` (the shortest it will be away). Hysteresis: a job this policy
   changed within ``min_hold_s`` is not shrunk, preempted, migrated or grown again. (A victim of
   its own tier keeps ``min_hold_s`` more slack than the job that displaced it: it waits at
   least that long before it could be urgent enough to take its GPUs back.)
5. Defragmentation: when the free GPUs would fit the waiting job but not its workers' shape, one
   running job (victim order, rule 3) on the most nearly fitting node is migrated to other nodes.
6. Gain versus cost: a reclaim or migration is committed only if the waiting job's gain
   (its GPUs x its remaining ideal time, GPU-seconds started now) exceeds the cost (restart_s x
   the GPUs of every job it stops or restarts), or the waiting job's slack is under ``urgent_s``;
   otherwise the staged victims are discarded as a unit and the job waits.
7. No idle GPU: a job the pass preempted that fits, at the size it ran, on GPUs still free after
   the pass's admissions is placed there instead (a migration: it keeps running, and no GPU
   stays idle while it waits), in the order the pass took them. GPUs still free then go to
   running elastic jobs, served in rule 2's order, each grown
   to the largest feasible count that fits, if the time it saves on its remaining work exceeds
   ``grow_margin`` x restart_s (the cost of growing and of giving the GPUs back later).
8. No idle GPU later either: a job whose remaining ideal time r exceeds the drain time D is
   *critical*: the work present cannot all be done before it is, so every second it waits is a
   second added to the last completion, during which the GPUs the others have left stand idle.
   Critical jobs are the last victims of their tier (rule 3 (ii)). Those without a target they
   can still meet (basic, or late) also go first among their peers (rule 2 (c)) and take GPUs
   from the jobs of their tier that are not critical (rule 3; rule 4 still guards a tiered
   victim's slack); a job on time keeps its earliest-deadline place, since the SLAs come first
   (serving a long on-time job ahead of urgent ones of its tier only has them preempt it back).
   A critical job never takes from another, and a job only becomes critical as D falls to its
   r, so no two jobs trade GPUs back and forth. Tiers come first: a critical job takes nothing
   from a higher tier, and is served after it. D is evaluated in a pass where jobs contend: the
   waiting jobs ask for more GPUs than are free, a reclaim turns out to be needed, or an elastic
   job could grow; a pass whose waiting jobs all start on free GPUs is planned without it (it
   would change only which free GPUs each takes).
Every change carries its reason in ``Plan.explain`` ("preempted for premium job 12"). What a
pass costs, and how the rules are evaluated on columns to keep it small, is in the guide
(docs/singularity.md, "Cost of a pass").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.cluster import Cluster
from stint.model.job import Tier
from stint.model.sla import STARTUP_ALLOWANCE_S, SlaTargets, attainment, deadline_s
from stint.placement.free_index import RoomFree, ScratchFree
from stint.placement.packing import drop_workers, give, in_order, packed, place, take
from stint.policies.base import ClusterView, JobStatus, PolicyBase
from stint.policies.registry import register
from stint.policies.singularity_table import Constants, ServeOrder, Table, VictimOrder

RANK = {Tier.BASIC: 0, Tier.STANDARD: 1, Tier.PREMIUM: 2}
FEW = 16  # up to this many waiting jobs, a pass sorts their facts (above, the table's columns)
NO_QUEUE = ServeOrder([], [], [], [], [])


@dataclass(slots=True)
class Facts:
    """What the rules read of one job at one pass (read-only; not frozen, since a pass makes one
    per waiting job and a frozen dataclass's ``__init__`` costs about five times as much)."""

    st: JobStatus
    job_id: str
    rank: int
    target: float | None
    rate_req: float  # work units/s at the requested size
    remaining_s: float  # remaining ideal time at the requested size
    slack_s: float
    surplus: float
    late: bool = False  # it cannot meet its target even at its largest size from now
    on_time: bool = False  # it has a target and can still meet it (rule 2 (b))
    critical: bool = False  # its remaining ideal time exceeds the drain time (rule 8)
    serve: tuple[int, bool, bool, float, float, str] = (0, False, False, 0.0, 0.0, "")  # serve_key()
    victim: tuple[int, bool, float, float, str] = (0, False, 0.0, 0.0, "")  # victim_key()

    @staticmethod
    def of(st: JobStatus, rank: int, target: float | None, rate_req: float, remaining_s: float,
           slack_s: float, surplus: float, late: bool, critical: bool = False) -> Facts:
        """The facts with their orderings computed once (a pass sorts by them)."""
        on_time = target is not None and not late
        jid, arrival = st.job_id, st.spec.arrival_s
        leads = critical and not on_time
        order = slack_s if on_time else -remaining_s if leads else surplus
        return Facts(st, jid, rank, target, rate_req, remaining_s, slack_s, surplus, late, on_time, critical,
                     (-rank, not on_time, not leads, order, arrival, jid),
                     (rank, critical, remaining_s if critical else -surplus, -arrival, jid))

    def as_critical(self) -> Facts:
        """These facts with the job critical (rule 8): its orderings recomputed."""
        return Facts.of(self.st, self.rank, self.target, self.rate_req, self.remaining_s, self.slack_s,
                        self.surplus, self.late, critical=True)

    @property
    def leads(self) -> bool:
        """Rule 8: critical without a target it can still meet (basic, or late): served first
        among its peers, and takes GPUs from the jobs of its tier that are not critical."""
        return self.critical and not self.on_time

    def serve_key(self) -> tuple[int, bool, bool, float, float, str]:
        """Rules 2 and 7: higher tier, can still meet its target, less slack (those that can),
        critical first (rule 8) and the longest remaining (the others), lower projected
        attainment (the others not critical), earlier arrival, job id."""
        return self.serve

    def victim_key(self) -> tuple[int, bool, float, float, str]:
        """Rule 3 (i)-(iv): lowest tier, not critical before critical (rule 8), largest surplus
        (shortest remaining among critical ones), latest arrival, job id."""
        return self.victim


@dataclass(slots=True)
class Shape:
    """What a pass reads of the cluster: its GPUs, and per GPUs per worker the workers its largest
    node holds (the packing of the SLA's requested rate)."""

    cluster: Cluster | None = None
    total_gpus: int = 0
    slots: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Staging:
    """Tentative changes for one waiting job: committed or discarded as a unit (rule 6)."""

    free: list[int]
    changes: dict[str, Allocation]
    reasons: dict[str, str]
    victims: dict[str, int] = field(default_factory=dict)  # job id -> GPUs it held before

    @property
    def cost_gpus(self) -> int:
        """GPUs of every job the staging stops or restarts (rule 6's cost, in restarts)."""
        return sum(self.victims.values())


class Candidates:
    """Victims in victim order, each one's facts computed when an iteration first reaches it and
    kept for the next iteration (a staging walks the same victims for each of rule 3's steps)."""

    __slots__ = ("_fact", "_ids", "_seen")

    def __init__(self, ids: Iterator[str], fact: Callable[[str], Facts]) -> None:
        self._ids, self._fact, self._seen = ids, fact, list[Facts]()

    def __iter__(self) -> Iterator[Facts]:
        i = 0
        while True:
            if i == len(self._seen):
                jid = next(self._ids, None)
                if jid is None:
                    return
                self._seen.append(self._fact(jid))
            yield self._seen[i]
            i += 1


@dataclass(slots=True)
class Victims:
    """One pass's running jobs in victim order (rule 3), put in order on first need (a pass that
    starts every waiting job on free GPUs needs none) and their facts computed only for the
    victims a staging reaches; per tier the smallest request that reclaiming could not serve
    (later ones of the tier skip it)."""

    by_id: Mapping[str, JobStatus]  # the active jobs
    source: Callable[[], VictimOrder]  # the running jobs in order
    fact: Callable[[str], Facts]  # one running job's facts
    rank: Callable[[str], int]  # one running job's tier rank (without its facts)
    running: set[str]
    elastic: set[str]  # the running elastic jobs (only they can be above their requested or smallest size)
    blocked: dict[int, float] = field(default_factory=dict)
    unpreemptable: set[str] = field(default_factory=set)  # held, or without the slack (rule 4)
    _order: VictimOrder | None = None
    _shrinkable: set[str] | None = None
    _grown_ids: set[str] | None = None
    _grown: list[str] | None = None

    def order(self) -> VictimOrder:
        if self._order is None:
            self._order = self.source()
        return self._order

    def below(self, rank: int) -> int:
        """How many of the order (lowest tier first) are of a tier below ``rank`` (none below the
        lowest: found without the order)."""
        return int(np.searchsorted(self.order().ranks, rank, side="left")) if rank > 0 else 0

    def candidates(self, positions: Iterable[int], keep: Callable[[int, str], bool]) -> Candidates:
        """The jobs at ``positions`` of the order (ascending) that ``keep(position, job id)`` keeps."""
        ids = self.order().ids if positions else []
        return Candidates((j for i in positions if keep(i, j := ids[i])), self.fact)

    def shrinkable(self) -> set[str]:
        """The running jobs above their smallest size (only they can shrink)."""
        if self._shrinkable is None:
            self._shrinkable = {j for j in self.elastic
                                if self.by_id[j].allocation.num_workers > self.by_id[j].spec.feasible_counts()[0]}
        return self._shrinkable

    def grown_ids(self) -> set[str]:
        """The running jobs grown above their requested size."""
        if self._grown_ids is None:
            self._grown_ids = {j for j in self.elastic
                               if self.by_id[j].allocation.num_workers > self.by_id[j].spec.requested_workers}
        return self._grown_ids

    def grown(self, keep: Callable[[str], bool]) -> list[Facts]:
        """The running jobs grown above their requested size that ``keep`` keeps, in order."""
        if self._grown is None:
            grown = self.grown_ids()
            self._grown = [j for j in self.order().ids if j in grown] if grown else []
        return [self.fact(j) for j in self._grown if keep(j)]


@dataclass(slots=True)
class Roster:
    """The active jobs' ids by what a pass reads of them: waiting (no allocation), running, and
    the running elastic ones (rule 7's candidates). Kept from ``ClusterView.changed`` when the
    view promises it complete (``by_id`` set, same ``stream``), else rebuilt from ``view.jobs``."""

    waiting: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    elastic: set[str] = field(default_factory=set)
    stream: int | None = None

    def sync(self, view: ClusterView) -> tuple[Mapping[str, JobStatus], bool]:
        """Bring the roster up to date with ``view``; the active jobs by id, and whether the
        roster was rebuilt from ``view.jobs``."""
        by_id = view.by_id
        if by_id is None or view.stream is None or view.stream != self.stream:
            self.waiting, self.running, self.elastic, self.stream = set(), set(), set(), view.stream
            for st in view.jobs:
                self._file(st)
            return (by_id if by_id is not None else {st.job_id: st for st in view.jobs}), True
        for jid in view.changed:
            self.waiting.discard(jid)
            self.running.discard(jid)
            self.elastic.discard(jid)
            found = by_id.get(jid)
            if found is not None:
                self._file(found)
        return by_id, False

    def _file(self, st: JobStatus) -> None:
        if not st.allocation:
            self.waiting.add(st.job_id)
            return
        self.running.add(st.job_id)
        if st.spec.min_workers < st.spec.max_workers:
            self.elastic.add(st.job_id)


@register("singularity")
class Singularity(PolicyBase):
    """SLA tiers, no idle GPU, shrink / time-slice / preempt by tier (see the module docstring)."""

    name = "singularity"
    per_type = True  # on a typed cluster: tiers and SLA per type's host group (policies.per_type)
    lazy_progress = True  # reads progress only through work_done_at(now) (also as one array: singularity_table)

    def __init__(self, restart_s: float = 30.0, min_hold_s: float = 300.0, premium: float = 0.95,
                 standard: float = 0.70, basic: float | None = None,
                 allowance_s: float = STARTUP_ALLOWANCE_S, urgent_s: float = 600.0,
                 grow_margin: float = 2.0, tick_s: float = 60.0, max_reclaims: int = 64) -> None:
        for key, v in (("restart_s", restart_s), ("min_hold_s", min_hold_s), ("allowance_s", allowance_s),
                       ("urgent_s", urgent_s), ("grow_margin", grow_margin)):
            if v < 0:
                raise ValueError(f"singularity: {key} must be >= 0 (got {v})")
        if tick_s <= 0 or max_reclaims < 0:
            raise ValueError(f"singularity: tick_s must be > 0 and max_reclaims >= 0 (got {tick_s}, {max_reclaims})")
        self.sla = SlaTargets(premium, standard, basic)
        self.restart_s, self.min_hold_s, self.allowance_s = restart_s, min_hold_s, allowance_s
        self.urgent_s, self.grow_margin, self.max_reclaims = urgent_s, grow_margin, max_reclaims
        self.tick_s: float | None = tick_s
        # job id -> when this policy last changed it while it ran, oldest first (``_expire``)
        self._moved: OrderedDict[str, float] = OrderedDict()
        self._history: int | None = None
        self._rates: dict[tuple[object, ...], float] = {}
        self._due: float | None = None
        self._const: dict[str, Constants] = {}  # job id -> its constants, while it is active
        self._table = Table()  # the same constants as columns (rules 2, 3 and 8 over many jobs)
        self._roster = Roster()
        self._cluster = Shape()

    def next_due(self) -> float | None:
        """When a tick could change the plan (``_next_due``); None: only events can."""
        return self._due

    def _next_due(self, view: ClusterView, queue: ServeOrder, plan: Plan, free: list[int],
                  drain: float) -> float | None:
        """Time alone changes a decision only when a hold expires (rule 4), a waiting job's
        slack falls under ``urgent_s`` (rule 6) or the drain time could fall under a waiting job's
        remaining time (rule 8: at the soonest, the drain time less it from now), and only while
        a job waits or GPUs are idle."""
        waiting = [i for i, j in enumerate(queue.ids) if j not in plan.allocations and j not in plan.reject]
        if not waiting and sum(free) <= 0:
            return None
        self._expire(view.now)
        times = [t + self.min_hold_s for t in self._moved.values() if t + self.min_hold_s > view.now]
        times += [view.now + s - self.urgent_s for s in (queue.slack[i] for i in waiting)
                  if math.isfinite(s) and s > self.urgent_s]
        longest = max((queue.remaining[i] for i in waiting if not queue.on_time[i] and not queue.critical[i]),
                      default=0.0)
        if 0.0 < longest < drain < math.inf:
            times.append(view.now + drain - longest)
        return min(times, default=None)

    def _expire(self, now: float) -> None:
        """Forget the changes whose hold has run out at ``now`` (by both of the tests that read
        them, ``_held`` and ``_next_due``'s): with time never going back they never count again,
        and ``_next_due`` then reads only the holds still running, not every job ever moved."""
        moved, hold = self._moved, self.min_hold_s
        while moved:
            jid, t = next(iter(moved.items()))
            if now - t < hold or t + hold > now:
                return
            del moved[jid]

    # ------------------------------------------------------------------------------ the pass
    def plan(self, view: ClusterView) -> Plan:
        if view.history is None or view.history != self._history:  # another run's jobs
            self._history, self._moved, self._const, self._roster = view.history, OrderedDict(), {}, Roster()
            self._table = Table()
        by_id, rebuilt = self._roster.sync(view)
        for jid in list(self._const) if rebuilt else view.changed:  # (``changed`` may be incomplete)
            if jid not in by_id:
                self._moved.pop(jid, None)
                self._const.pop(jid, None)
                self._table.drop(jid)
        waiting = list(self._roster.waiting)
        # Rule 8's drain time costs a walk over every active job, and decides something only when
        # jobs contend for GPUs: a pass whose waiting jobs all start on free GPUs, with no elastic
        # job to grow, is planned without it (it could change only which free GPUs each takes),
        # and planned again with it if a reclaim turns out to be needed after all.
        drain: float | None = None
        if self._roster.elastic or self._contended(view, by_id, waiting):
            drain = self._drain(view, by_id)
        plan, queue, free, calm = self._pass(view, by_id, waiting, drain)
        if not calm and drain is None:
            drain = self._drain(view, by_id)
            plan, queue, free, _ = self._pass(view, by_id, waiting, drain)
        for jid in plan.allocations:
            if by_id[jid].allocation:
                self._moved[jid] = view.now
                self._moved.move_to_end(jid)
        self._due = self._next_due(view, queue, plan, free, math.inf if drain is None else drain)
        return plan

    def _pass(self, view: ClusterView, by_id: Mapping[str, JobStatus], waiting: list[str],
              drain: float | None) -> tuple[Plan, ServeOrder, list[int], bool]:
        """Rules 1-8 over the waiting jobs (``drain``: rule 8's drain time; None: not
        evaluated). Returns the plan, the waiting jobs in serve order, the GPUs left free, and
        whether the pass was calm: every waiting job started or rejected, nothing reclaimed. A
        waiting job's facts are computed only if it is tried (not one skipped for want of GPUs)."""
        facts: dict[str, Facts] = {}  # this pass's of running jobs, computed on first need

        def judged(f: Facts) -> Facts:
            return f.as_critical() if drain is not None and f.remaining_s > drain else f  # rule 8

        def fact(jid: str) -> Facts:
            f = facts.get(jid)
            if f is None:
                f = facts[jid] = judged(self._facts(view, by_id[jid]))
            return f

        plan = Plan()
        free = list(view.free_gpus)
        total = self._shape(view).total_gpus
        pool = Victims(by_id, lambda: self._victim_order(view, by_id, drain), fact,
                       lambda j: self._rank(view, by_id[j]), self._roster.running, self._roster.elastic)
        reclaims, left, calm = 0, sum(free), True
        known: dict[str, Facts] = {}
        if not waiting:
            queue = NO_QUEUE
        elif len(waiting) > FEW:
            queue = self._serve_order(view, by_id, waiting, drain)
        else:  # the columns cost more than the facts of a few jobs
            known = {f.job_id: f for f in (judged(self._facts(view, by_id[j])) for j in waiting)}
            queue = _serve_order_of(sorted(known.values(), key=Facts.serve_key))
        tried: list[Facts] = []
        for jid in queue.ids:
            c = self._const[jid]
            smallest = c.smallest
            if smallest > total:  # rule 1
                plan.reject[jid] = f"needs {smallest} GPUs at its smallest; the cluster has {total}"
                continue
            if left < smallest and (reclaims >= self.max_reclaims or smallest >= pool.blocked.get(c.rank, math.inf)):
                calm = False
                continue  # nothing free for it and reclaiming could not serve a job as small
            w = known.get(jid) or judged(self._facts(view, by_id[jid]))
            tried.append(w)
            staged = self._admit(view, w, free, pool, plan)
            reclaims += staged.cost_gpus > 0
            calm = calm and staged.cost_gpus == 0 and w.job_id in staged.changes
            if w.job_id in staged.changes:  # commit
                free[:] = staged.free
                left = sum(free)
                plan.allocations.update(staged.changes)
                plan.explain.update(staged.reasons)
        if left > 0 and reclaims:
            self._rehouse(by_id, plan, free)
            left = sum(free)
        started = [f for f in tried if f.job_id in plan.allocations]
        if left > 0 and (self._roster.elastic or started):
            self._grow(view, [fact(j) for j in self._roster.elastic if j not in plan.allocations] + started,
                       free, plan)
        return plan, queue, free, calm

    @staticmethod
    def _rehouse(by_id: Mapping[str, JobStatus], plan: Plan, free: list[int]) -> None:
        """Rule 7: the jobs this plan preempts placed on the GPUs still free, where they fit."""
        for jid, alloc in list(plan.allocations.items()):
            st = by_id[jid]
            if alloc or not st.allocation:
                continue
            gpw = st.spec.gpus_per_worker
            got = place(free, st.allocation.num_workers, gpw)
            if got is not None:
                take(free, got, gpw)
                plan.allocations[jid] = Allocation.of(got)
                plan.explain[jid] = plan.explain.get(jid, "").replace("preempted", "migrated", 1)

    def _contended(self, view: ClusterView, by_id: Mapping[str, JobStatus], waiting: list[str]) -> bool:
        """Whether the waiting jobs at their requested sizes ask for more GPUs than are free."""
        free = sum(view.free_gpus)
        asked = 0
        for j in waiting:
            spec = by_id[j].spec
            asked += spec.requested_workers * spec.gpus_per_worker
            if asked > free:
                return True
        return False

    def _drain(self, view: ClusterView, by_id: Mapping[str, JobStatus]) -> float:
        """Rule 8's drain time: the remaining GPU-seconds of every active job at its requested
        size over the GPUs up now, the soonest the work present could be done (inf with no GPU
        up)."""
        shape = self._shape(view)
        up = shape.total_gpus - sum(int(view.cluster.nodes[i].capacity.gpu) for i in view.down_nodes)
        ids, sts = list(by_id), list(by_id.values())
        self._tabled_all(view, by_id, ids, sts)
        work = self._table.drain_work(ids, sts, view.now)
        return work / up if up > 0 else math.inf

    def _serve_order(self, view: ClusterView, by_id: Mapping[str, JobStatus], ids: list[str],
                     drain: float | None) -> ServeOrder:
        """The waiting jobs ``ids`` in serve order (rule 2; ``Facts.serve_key``), from the table."""
        sts = list(map(by_id.__getitem__, ids))
        self._tabled_all(view, by_id, ids, sts)
        return self._table.serve_order(ids, sts, view.now, self.restart_s, self.allowance_s, drain)

    def _victim_order(self, view: ClusterView, by_id: Mapping[str, JobStatus], drain: float | None) -> VictimOrder:
        """The running jobs in victim order (rule 3; ``Facts.victim_key``), from the table."""
        ids = list(self._roster.running)
        sts = list(map(by_id.__getitem__, ids))
        self._tabled_all(view, by_id, ids, sts)
        return self._table.victim_order(ids, sts, view.now, self.restart_s, self.allowance_s, drain)

    def _tabled_all(self, view: ClusterView, by_id: Mapping[str, JobStatus], ids: list[str],
                    sts: list[JobStatus]) -> None:
        """Put the constants of jobs ``ids`` (statuses ``sts``) in the table, where missing. (The
        table holds no job that left before the pass, ``plan``: with as many rows as active jobs,
        it holds them all.)"""
        row = self._table.row
        if len(row) != len(by_id):
            for jid, st in zip(ids, sts, strict=True):
                if jid not in row:
                    self._tabled(view, st)

    # ------------------------------------------------------------------------------ rules 2-6
    def _admit(self, view: ClusterView, w: Facts, free: list[int], pool: Victims, plan: Plan) -> Staging:
        spec, gpw = w.st.spec, w.st.spec.gpus_per_worker
        s = Staging(list(free), {}, {})
        n = spec.requested_workers
        # The pass has changed no GPU yet (nothing committed): the ledger's index of nodes by free
        # GPUs answers as a scan of ``free`` would, without one.
        index = view.free_index if not plan.allocations else None
        got = place(ScratchFree(view.free_gpus, index) if index is not None else s.free, n, gpw)
        if got is not None and self._meets(view, w, got):
            return self._start(s, w, got, f"started on {n} workers")
        spread = got  # it fits, but too spread out to meet its target: reclaim for a better one
        if n * gpw >= pool.blocked.get(w.rank, math.inf):  # a smaller job of its tier found too little
            if spread is not None:
                return self._start(s, w, spread, f"started on {n} workers")
            self._time_slice(view, w, s)
            return s
        taken = plan.allocations
        s.free = RoomFree(s.free)  # reclaiming places after each victim: on the nodes with room only
        if spread is None and sum(s.free) >= n * gpw and self._defragment(
                view, w, s, pool.candidates(range(pool.below(w.rank)), lambda i, j: j not in taken)):
            return s if self._worth(w, n, s) else Staging(free, {}, {}, s.victims)
        # Rule 3 cannot give a placement meeting its target to a job that misses it even at the
        # rate of its request packed on the fewest nodes (no placement of it runs faster): its
        # staging stops at the first victim staged (any one: found without the victim order),
        # and is discarded as the whole walk's would be.
        hopeless = w.target is not None and self._projected(view, w, w.rate_req) < w.target
        give_back, shrink, preempt = (self._any_victims if hopeless else self._victims)(w, pool, plan)
        steps: tuple[tuple[str, Iterable[Facts]], ...] = (
            ("give back", give_back), ("shrink", shrink), ("time-slice", ()), ("preempt", preempt))
        fixed = pool.unpreemptable
        for step, victims in steps:
            if step == "time-slice" and self._time_slice(view, w, s):
                break
            for v in victims:
                if step == "preempt" and (self._held(v, view.now) or not self._touchable(view, v, EMPTY)):
                    fixed.add(v.job_id)  # rule 4 with no margin: no waiting job of this pass may preempt it
                    continue
                if self._reclaim(view, step, w, v, s):
                    if hopeless:
                        break
                    got = place(s.free, n, gpw)
                    if got is not None and self._meets(view, w, got):
                        self._start(s, w, got, f"started on {n} workers")
                        break
            if w.job_id in s.changes or hopeless and s.victims:
                break
        if w.job_id not in s.changes:
            pool.blocked[w.rank] = min(pool.blocked.get(w.rank, math.inf), n * gpw)
            if spread is not None:  # no better placement could be had: the spread one, now
                return self._start(Staging(list(free), {}, {}), w, spread, f"started on {n} workers")
        if w.job_id not in s.changes or not self._worth(w, s.changes[w.job_id].num_workers, s):
            return Staging(free, {}, {}, s.victims)  # rule 6: discard as a unit
        return s

    def _victims(self, w: Facts, pool: Victims, plan: Plan) -> tuple[Iterable[Facts], Iterable[Facts], Iterable[Facts]]:
        """Rule 3's victims of ``w`` for giving back, shrinking and preempting, in victim order.
        Of its own tier only those with more slack than a restart and rule 3's margin: rule 4
        keeps the others whole (a shrink or a preemption costs a victim at least a restart)."""
        taken = plan.allocations
        below = pool.below(w.rank)
        positions: Sequence[int] = range(below)
        if w.on_time or w.leads:  # rule 3: less urgent (rule 8: not critical) jobs of its own tier too
            count = pool.below(w.rank + 1)
            own = below + np.flatnonzero(self._may_lose(pool.order().slack[below:count], w))
            positions = [*positions, *own.tolist()] if len(own) else positions

        def lower(i: int, j: str) -> bool:
            return j not in taken and not (w.leads and pool.order().critical[i])

        shrinkable, fixed = pool.shrinkable(), pool.unpreemptable

        def can_shrink(i: int, j: str) -> bool:  # above its smallest size (a staging only shrinks)
            return j in shrinkable and lower(i, j)

        def can_preempt(i: int, j: str) -> bool:
            return j not in fixed and lower(i, j)

        return (pool.grown(lambda j: j not in taken), pool.candidates(positions, can_shrink),
                pool.candidates(positions, can_preempt))

    def _any_victims(self, w: Facts, pool: Victims, plan: Plan) -> tuple[Iterable[Facts], Iterable[Facts],
                                                                          Iterable[Facts]]:
        """The same victims as ``_victims``, in no particular order (without the victim order)."""
        taken, top = plan.allocations, w.rank + 1 if w.on_time or w.leads else w.rank
        fixed = pool.unpreemptable

        def of(ids: Iterable[str]) -> Iterator[Facts]:
            for j in ids:
                if j not in taken and pool.rank(j) < top:
                    v = pool.fact(j)
                    if not (w.leads and v.critical) and (v.rank < w.rank or self._may_lose(v.slack_s, w)):
                        yield v

        return ((pool.fact(j) for j in pool.grown_ids() if j not in taken), of(pool.shrinkable()),
                of(j for j in pool.running if j not in fixed))

    def _may_lose(self, slack: float | np.ndarray, w: Facts) -> bool | np.ndarray:
        """Whether a victim of ``w``'s own tier with ``slack`` (one, or an array) could be shrunk
        or preempted for it: without a target, or with more slack than a restart and rule 3's
        margin (``_reclaim``'s; a shrink or a preemption costs a victim at least a restart)."""
        margin = max(w.slack_s, 0.0) + self.min_hold_s
        return (slack == math.inf) | (slack - self.restart_s > margin)

    def _start(self, s: Staging, w: Facts, got: dict[int, int], why: str) -> Staging:
        take(s.free, got, w.st.spec.gpus_per_worker)
        s.changes[w.job_id] = Allocation.of(got)
        s.reasons[w.job_id] = why
        return s

    def _reclaim(self, view: ClusterView, step: str, w: Facts, v: Facts, s: Staging) -> bool:
        """Rule 3 (a), (b), (d) on victim ``v``; True if it staged a change."""
        spec, have = v.st.spec, s.changes.get(v.job_id, v.st.allocation)
        n = have.num_workers
        if step == "give back":
            to = spec.largest_feasible(spec.requested_workers)
            if n <= spec.requested_workers or to <= 0:
                return False
        else:
            if v.rank > w.rank or (v.rank == w.rank and not (w.on_time or w.leads and not v.critical)) \
                    or self._held(v, view.now):
                return False
            if step == "shrink":
                short = w.st.spec.requested_workers * w.st.spec.gpus_per_worker - sum(s.free)
                to = spec.largest_feasible(n - max(1, math.ceil(short / spec.gpus_per_worker)))
                if to <= 0 or to >= n:
                    return False
            else:
                to = 0
        new = _without(have, n - to) if to else EMPTY
        margin = max(w.slack_s, 0.0) + self.min_hold_s if v.rank == w.rank and step != "give back" else 0.0
        if not self._touchable(view, v, new, margin):
            return False
        give(s.free, have, spec.gpus_per_worker)
        take(s.free, new, spec.gpus_per_worker)
        s.changes[v.job_id] = new
        s.victims[v.job_id] = v.st.held_gpus
        verb = {"give back": "gave back GPUs", "shrink": f"shrunk to {to} workers", "preempt": "preempted"}[step]
        s.reasons[v.job_id] = f"{verb} for {w.st.spec.tier} job {w.job_id}"
        return True

    def _time_slice(self, view: ClusterView, w: Facts, s: Staging) -> bool:
        """Rule 3 (c): the largest feasible count below the request that fits and meets the target."""
        spec, gpw = w.st.spec, w.st.spec.gpus_per_worker
        for c in reversed([c for c in spec.feasible_counts() if c < spec.requested_workers]):
            got = place(s.free, c, gpw)
            if got is None:
                continue
            rate = self._rate(view, w.st, Allocation.of(got))
            if w.target is None or self._projected(view, w, rate) >= w.target:
                self._start(s, w, got, f"started time-sliced on {c} of {spec.requested_workers} workers")
                return True
            return False
        return False

    def _defragment(self, view: ClusterView, w: Facts, s: Staging, candidates: Iterable[Facts]) -> bool:
        """Rule 5: migrate one running job off a node so that the waiting job fits."""
        spec, gpw = w.st.spec, w.st.spec.gpus_per_worker
        nodes = sorted(range(len(s.free)), key=lambda i: (-s.free[i], i))
        for v in candidates:
            if self._held(v, view.now) or not self._touchable(view, v, v.st.allocation):
                continue
            vg = v.st.spec.gpus_per_worker
            for node in nodes:
                here = dict(v.st.allocation.workers).get(node, 0)
                if not here:
                    continue
                moved = in_order(s.free, here, vg, [i for i in nodes if i != node])
                if moved is None:
                    continue
                after = list(s.free)
                after[node] += here * vg
                take(after, moved, vg)
                got = place(after, spec.requested_workers, gpw)
                if got is None:
                    continue
                counts = dict(v.st.allocation.workers)
                del counts[node]
                for i, k in moved.items():
                    counts[i] = counts.get(i, 0) + k
                s.free[:] = after
                s.changes[v.job_id] = Allocation.of(counts)
                s.reasons[v.job_id] = f"migrated to let {spec.tier} job {w.job_id} start"
                s.victims[v.job_id] = v.st.held_gpus
                self._start(s, w, got, f"started on {spec.requested_workers} workers after a migration")
                return True
        return False

    def _worth(self, w: Facts, workers: int, s: Staging) -> bool:
        """Rule 6: gain (GPU-seconds started now) exceeds cost, or the job is urgent."""
        gain = workers * w.st.spec.gpus_per_worker * w.remaining_s
        return s.cost_gpus == 0 or gain > self.restart_s * s.cost_gpus or w.slack_s < self.urgent_s

    # ------------------------------------------------------------------------------ rule 7
    def _grow(self, view: ClusterView, candidates: Iterable[Facts], free: list[int], plan: Plan) -> None:
        """Rule 7 over ``candidates``: running jobs this plan leaves alone and jobs it starts."""
        def now_holds(f: Facts) -> Allocation:  # a job this plan starts grows from its start
            return plan.allocations.get(f.job_id, EMPTY) if not f.st.allocation else f.st.allocation

        for f in sorted((f for f in candidates if f.st.spec.min_workers < f.st.spec.max_workers
                         and (f.job_id not in plan.allocations) == bool(f.st.allocation)
                         and 0 < now_holds(f).num_workers < f.st.spec.max_workers), key=Facts.serve_key):
            if sum(free) <= 0:
                return
            if self._held(f, view.now):
                continue
            spec, have = f.st.spec, now_holds(f)
            n, gpw = have.num_workers, spec.gpus_per_worker
            left = f.st.known_remaining_at(view.now)
            slow = left / max(self._rate(view, f.st, have), 1e-12)
            order = sorted(range(len(free)), key=lambda i: (i not in dict(have.workers), -free[i], i))
            for m in reversed([c for c in spec.feasible_counts() if c > n]):
                added = in_order(free, m - n, gpw, order)
                if added is None:
                    continue
                new = _plus(have, added)
                saved = slow - left / max(self._rate(view, f.st, new), 1e-12)
                if saved > self.grow_margin * self.restart_s:
                    take(free, added, gpw)
                    plan.allocations[f.job_id] = new
                    plan.explain[f.job_id] = (f"grown to {m} workers into idle GPUs" if f.st.allocation
                                              else f"started on {m} workers ({n} requested) into idle GPUs")
                break

    # ------------------------------------------------------------------------------ quantities
    def _facts(self, view: ClusterView, st: JobStatus) -> Facts:
        spec = st.spec
        c = self._const.get(spec.job_id) or self._constants(view, st)
        target, rate, top, ideal, due_at = c.target, c.rate_req, c.rate_top, c.ideal_s, c.deadline_s
        total = st.known_total_at(view.now)
        left = total - st.work_done_at(view.now)  # (``known_remaining_at``)
        if total != st.known_work and rate > 0:  # run past its estimate: the longer job's SLA
            ideal = total / rate
            due_at = deadline_s(spec.arrival_s, ideal, target, self.allowance_s) if target is not None else None
        remaining = left / rate if rate > 0 else math.inf
        proj = attainment(ideal, max(view.now + self.restart_s + remaining - spec.arrival_s, 0.0), self.allowance_s)
        slack, late = math.inf, False
        if due_at is not None:
            due = due_at - view.now - self.restart_s
            slack = due - remaining
            late = top <= 0 or due < left / top  # even at its largest size
        return Facts.of(st, c.rank, target, rate, remaining, slack, proj - (target or 0.0), late)

    def _constants(self, view: ClusterView, st: JobStatus) -> Constants:
        """A job's constants, computed when it is first seen."""
        spec = st.spec
        target = self.sla.of(spec.tier)
        per_node = self._per_node(view, spec.gpus_per_worker)
        counts = spec.feasible_counts()
        rate = view.perf.rate(spec, packed(spec.requested_workers, per_node))
        # its largest size the cluster holds (a type's group may hold fewer than it may use)
        room = per_node * len(view.cluster.nodes)
        top = view.perf.rate(spec, packed(max([c for c in counts if c <= room] or counts[:1]), per_node))
        ideal = st.known_work / rate if rate > 0 else math.inf
        due = deadline_s(spec.arrival_s, ideal, target, self.allowance_s) if target is not None else None
        c = self._const[st.job_id] = Constants(RANK[spec.tier], target, rate, top, ideal, due,
                                               counts[0] * spec.gpus_per_worker)
        return c

    def _rank(self, view: ClusterView, st: JobStatus) -> int:
        return (self._const.get(st.job_id) or self._constants(view, st)).rank

    def _tabled(self, view: ClusterView, st: JobStatus) -> None:
        """Put a job's constants in the table (on a pass's first need: a calm run never does)."""
        spec = st.spec
        c = self._const.get(spec.job_id) or self._constants(view, st)
        self._table.add(spec.job_id, c, spec.work, st.known_work, spec.arrival_s, spec.requested_workers,
                        spec.gpus_per_worker)

    def _shape(self, view: ClusterView) -> Shape:
        """What the pass reads of the cluster, found once per cluster (a ``Cluster`` is immutable)."""
        if self._cluster.cluster is not view.cluster:
            self._cluster = Shape(view.cluster, view.cluster.total_gpus)
        return self._cluster

    def _per_node(self, view: ClusterView, gpw: int) -> int:
        """Workers of ``gpw`` GPUs that the largest node holds."""
        slots = self._shape(view).slots
        got = slots.get(gpw)
        if got is None:
            got = slots[gpw] = _per_node(view, gpw)
        return got

    def _meets(self, view: ClusterView, w: Facts, got: dict[int, int]) -> bool:
        """Rule 2: a placement meets the job's target (its spread may slow it; none: any does)."""
        if w.target is None:
            return True
        return self._projected(view, w, self._rate(view, w.st, Allocation.of(got))) >= w.target

    def _projected(self, view: ClusterView, f: Facts, rate: float) -> float:
        spec = f.st.spec
        ideal = f.st.known_total_at(view.now) / f.rate_req if f.rate_req > 0 else math.inf
        left = f.st.known_remaining_at(view.now) / rate if rate > 0 else math.inf
        return attainment(ideal, max(view.now + self.restart_s + left - spec.arrival_s, 0.0), self.allowance_s)

    def _touchable(self, view: ClusterView, v: Facts, new: Allocation, margin: float = 0.0) -> bool:
        """Rule 4: a tiered victim keeps more than ``margin`` (0, or rule 3's own-tier margin)
        of slack after the change."""
        if v.target is None:
            return True
        if not new:
            return v.slack_s - self.restart_s - self.min_hold_s > margin
        rate = self._rate(view, v.st, new)
        if rate <= 0:
            return False
        delay = self.restart_s + max(0.0, v.remaining_s * (v.rate_req / rate - 1.0))
        return v.slack_s - delay > margin

    def _held(self, f: Facts, now: float) -> bool:
        return now - self._moved.get(f.job_id, -math.inf) < self.min_hold_s

    def _rate(self, view: ClusterView, st: JobStatus, alloc: Allocation) -> float:
        spec = st.spec
        key = (spec.application, spec.batch_size, spec.work, spec.requested_workers, spec.min_workers,
               spec.max_workers, spec.worker_demand, alloc)
        got = self._rates.get(key)
        if got is None:
            if len(self._rates) > 100_000:
                self._rates.clear()
            got = self._rates[key] = view.perf.rate(spec, alloc)
        return got




def _serve_order_of(queued: list[Facts]) -> ServeOrder:
    """The serve order of facts already sorted by ``Facts.serve_key``."""
    return ServeOrder([f.job_id for f in queued], [f.slack_s for f in queued], [f.remaining_s for f in queued],
                      [f.on_time for f in queued], [f.critical for f in queued])


def _per_node(view: ClusterView, gpw: int) -> int:
    return max(max((int(n.capacity.gpu) for n in view.cluster.nodes), default=1) // max(gpw, 1), 1)


def _without(alloc: Allocation, drop: int) -> Allocation:
    """``alloc`` less ``drop`` workers, from the nodes holding fewest first."""
    if drop <= 0:
        return alloc
    counts = drop_workers(alloc, drop)
    return Allocation.of(counts) if any(counts.values()) else EMPTY


def _plus(alloc: Allocation, added: Mapping[int, int]) -> Allocation:
    counts = dict(alloc.workers)
    for node, k in added.items():
        counts[node] = counts.get(node, 0) + k
    return Allocation.of(counts)
