"""Tiresias (Gu et al., NSDI'19): discretised two-dimensional least-attained-service (2D-LAS).

Rules, in the paper's terms:
1. A job's *attained service* is GPUs x time received (2D: space and time), so it needs no
   duration estimate.
2. Discretised priority queues Q0, Q1, ...: a job is in the first queue whose threshold its
   attained service has not reached (``thresholds_gpu_s``, default one threshold of 16 GPU-hours,
   as the Pollux artifact configures Tiresias). New jobs enter Q0.
3. Within a queue, jobs are served first-come-first-served by the time they entered it (a demoted
   job goes to the back of its new queue).
4. A waiting job preempts any running job after it in the order: of a lower queue, or of its
   own queue entered later. This is the paper's algorithm (who runs is re-derived from the order
   at every pass, in queue order, first fit), and what both reference implementations do (the
   Tiresias authors' simulator and Pollux's); within a queue the order is stable (entry time), so
   it does not thrash. ``strict_order=False`` preempts only for strictly lower queues (a
   gentler variant: fewer restarts, but a large job that waits cannot reclaim GPUs from later
   small jobs of its own queue).
5. Starvation: a paused job that has waited ``promote_knob`` times its executed time (since its
   last promotion) is promoted to Q0, entering it at that moment, and its attained service is
   counted afresh from there (the paper's PROMOTE_KNOB; 0, the default as in the Pollux
   artifact, disables it).
6. Placement consolidates (best-fit, fewest nodes).

Demotions and promotions are discovered at scheduling passes; the policy asks for a pass every
``tick_s`` (60 s, Pollux's scheduling interval) while jobs wait. Cost per pass:
O(changed jobs + demotions + jobs started, times log of the queue length).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right

from stint.model.allocation import Plan
from stint.policies._index import OrderIndex, fill
from stint.policies.base import ClusterView, JobStatus, Phase, PolicyBase
from stint.policies.registry import register

Key = tuple[int, float, str]  # (queue, time it entered the queue, job id)


@register("tiresias")
class Tiresias(PolicyBase):
    """2D-LAS with discretised queues and starvation promotion."""

    lazy_progress = True  # reads progress only through *_at(now)

    def __init__(
        self,
        thresholds_gpu_s: tuple[float, ...] = (16 * 3600.0,),
        promote_knob: float = 0.0,
        tick_s: float = 60.0,
        placement: str = "consolidated",
        max_skip: int = 64,
        strict_order: bool = True,
    ) -> None:
        if list(thresholds_gpu_s) != sorted(thresholds_gpu_s) or any(t <= 0 for t in thresholds_gpu_s):
            raise ValueError(f"tiresias: thresholds must be positive and increasing, got {thresholds_gpu_s}")
        if promote_knob < 0:
            raise ValueError(f"tiresias: promote_knob must be >= 0, got {promote_knob}")
        self.name = "tiresias"
        self.tick_s: float | None = tick_s
        self.thresholds = tuple(float(t) for t in thresholds_gpu_s)
        self.promote_knob = promote_knob
        self.placement = placement
        self.max_skip = max_skip
        self.strict_order = strict_order
        self._entered: dict[str, tuple[int, float]] = {}  # job id -> (queue, time it entered it)
        self._base: dict[str, float] = {}  # attained service at the last promotion
        self._timers: list[tuple[float, str]] = []  # (when a demotion/promotion may be due, job)
        self._index = OrderIndex(self._key)
        self._history: int | None = None  # ``ClusterView.history`` of the jobs remembered

    def queue_of(self, st: JobStatus, now: float) -> int:
        """Rule 2: the first queue whose threshold the attained service has not reached."""
        return bisect_right(self.thresholds, st.attained_gpu_s_at(now) - self._base.get(st.job_id, 0.0))

    def _key(self, st: JobStatus, now: float) -> Key:
        jid = st.job_id
        q = self.queue_of(st, now)
        prev = self._entered.get(jid)
        if prev is None or prev[0] != q:
            prev = (q, st.spec.arrival_s if prev is None else now)  # rule 3: back of the new queue
            self._entered[jid] = prev
        self._arm_timer(st, now, q)
        return (prev[0], prev[1], jid)

    def _arm_timer(self, st: JobStatus, now: float, q: int, running: bool | None = None, gpus: int = 0) -> None:
        """Remember when ``st``'s queue may next change: its demotion while it runs, its rule-5
        promotion while it is paused. ``running``/``gpus`` override the job's current state (for
        jobs the plan being returned starts or preempts)."""
        running = st.phase is Phase.RUNNING if running is None else running
        gpus = gpus or st.held_gpus
        attained = st.attained_gpu_s_at(now) - self._base.get(st.job_id, 0.0)
        if running and gpus and q < len(self.thresholds):
            at = now + max(self.thresholds[q] - attained, 0.0) / gpus
            # A rounding error short of the threshold, ``at`` is ``now`` itself: the timer would
            # fire at once with the job still in queue q, and again, forever. Due just after.
            heapq.heappush(self._timers, (at if at > now else math.nextafter(now, math.inf), st.job_id))
        elif not running and st.first_start_s is not None and self.promote_knob > 0 and q > 0:
            # Rule 5: executed time since the last promotion = attained GPU-s / requested GPUs.
            gpus_req = max(st.spec.requested_workers * st.spec.gpus_per_worker, 1)
            paused_at = now if st.phase is Phase.RUNNING else st.last_change_s
            heapq.heappush(self._timers, (paused_at + self.promote_knob * attained / gpus_req, st.job_id))

    def plan(self, view: ClusterView) -> Plan:
        if self._index.needs_rebuild(view):
            self._timers.clear()
        if view.history != self._history:  # another run's jobs: forget their queue history
            self._history = view.history
            self._entered.clear()
            self._base.clear()
        self._index.sync(view)
        self._fire_timers(view)
        plan = fill(
            view,
            self._index,
            preempts=self._preempts,
            max_skip=self.max_skip,
            strategy=self.placement,
            policy=self.name,
        )
        by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
        for jid, alloc in plan.allocations.items():  # arm now, so the engine knows when to wake us
            st = by_id[jid]
            self._arm_timer(st, view.now, self.queue_of(st, view.now), bool(alloc),
                            alloc.num_workers * st.spec.gpus_per_worker)
        return plan

    def _preempts(self, waiting: Key, running: Key) -> bool:
        """Rule 4."""
        return waiting < running if self.strict_order else waiting[0] < running[0]

    def next_due(self) -> float | None:
        """When the next demotion or promotion may fall due (the engine skips ticks before it)."""
        return self._timers[0][0] if self._timers else None

    def _fire_timers(self, view: ClusterView) -> None:
        by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
        now = view.now
        while self._timers and self._timers[0][0] <= now:
            _, jid = heapq.heappop(self._timers)
            st = by_id.get(jid)
            if st is None:
                self._entered.pop(jid, None)
                self._base.pop(jid, None)
                continue
            if st.phase is Phase.PAUSED and self.promote_knob > 0 and self.queue_of(st, now) > 0:
                self._base[jid] = st.attained_gpu_s_at(now)  # rule 5: promote to Q0
            self._index.refile(st, now)
