"""RRH, the risk-reward heuristic baseline of OASiS §V (Irwin et al., HPDC'04), for PS jobs.

The paper gives neither the threshold nor the delay cost; our reading (docs/oasis.md):

1. Each job runs with its fixed ``requested_workers`` workers (plus ``ceil(y b/B)`` PSs).
2. Admission, at arrival: the job's expected yield is f_i at its expected completion (the queue's
   backlog spread over the cluster's worker slots, then its own run at the fixed count). Its delay
   cost is what the admitted jobs lose if its work delays each of them by ``W_i / capacity``
   slots. Admit iff yield - delay cost > ``threshold``.
3. At each arrival or completion, every admitted unfinished job continues or pauses, "decided by
   future utility gain minus cost": a job is worth continuing iff its expected yield if run from
   now, minus the delay cost its remaining work imposes on the other admitted jobs (the
   admission rule's cost), exceeds ``threshold``. Jobs are ranked by reward rate (expected yield
   per remaining worker-slot); in that order each job worth continuing keeps (or gets) its fixed
   allocation if it fits, otherwise it pauses (ties: arrival order). A paused job is reconsidered
   at the next event.
"""

from __future__ import annotations

import math

from stint.model.allocation import EMPTY, Plan
from stint.model.job import JobSpec
from stint.placement.round_robin import FreeCapacity
from stint.policies.base import ClusterView, JobStatus, Phase, PolicyBase
from stint.policies.registry import register


@register("rrh")
class RRH(PolicyBase):
    name = "rrh"

    def __init__(self, slot_s: float = 3600.0, threshold: float = 1.0) -> None:
        if slot_s <= 0:
            raise ValueError(f"rrh: slot_s must be positive (got {slot_s})")
        self.tick_s: float | None = slot_s
        self.slot_s = slot_s
        self.threshold = threshold
        self.admitted: set[str] = set()

    def plan(self, view: ClusterView) -> Plan:
        plan = Plan()
        if not view.changed:
            return plan
        capacity = max(1.0, self._worker_capacity(view))
        for st in view.jobs:
            if st.phase == Phase.QUEUED and st.job_id not in self.admitted and not st.allocation:
                if self._admit(st, view, capacity):
                    self.admitted.add(st.job_id)
                else:
                    plan.reject[st.job_id] = "rrh: expected yield minus delay cost below threshold"
        live = [st for st in view.jobs if st.job_id in self.admitted]
        ranked = sorted(live, key=lambda st: -self._reward_rate(st, view.now))
        worth = self._worth_continuing(live, view.now, capacity)
        free = FreeCapacity(view.cluster, down=view.down_nodes)
        for st in ranked:
            keep = worth[st.job_id] and self._fits(free, st)
            want = st.allocation if keep and st.allocation else (
                free.place(st.spec, st.spec.requested_workers) if keep else None)
            want = want or EMPTY
            if want != st.allocation:
                plan.allocations[st.job_id] = want
        return plan

    # -- expected yields --------------------------------------------------------------------------
    def _run_slots(self, spec: JobSpec, remaining: float) -> int:
        return math.ceil(remaining / (spec.requested_workers * self.slot_s) - 1e-9)

    def _yield(self, st: JobStatus, now: float, delay_slots: float = 0.0) -> float:
        run = self._run_slots(st.spec, st.known_remaining_at(now)) + delay_slots
        return float(st.spec.utility(now + run * self.slot_s - st.spec.arrival_s))

    def _reward_rate(self, st: JobStatus, now: float) -> float:
        return self._yield(st, now) / max(st.known_remaining_at(now), 1e-9)

    def _delay_cost(self, others: list[JobStatus], now: float, work: float, capacity: float) -> float:
        """Expected yield ``others`` lose if ``work`` worker-seconds run first, spread over the
        cluster's ``capacity`` workers."""
        delay = work / (capacity * self.slot_s)
        return sum(self._yield(j, now) - self._yield(j, now, delay) for j in others)

    def _worth_continuing(self, live: list[JobStatus], now: float, capacity: float) -> dict[str, bool]:
        """Per job: does its future utility gain minus the delay cost its remaining work imposes
        on the other admitted jobs exceed the threshold?"""
        return {st.job_id: self._yield(st, now)
                - self._delay_cost([j for j in live if j is not st], now, st.known_remaining_at(now), capacity)
                > self.threshold for st in live}

    def _admit(self, st: JobStatus, view: ClusterView, capacity: float) -> bool:
        admitted = [j for j in view.jobs if j.job_id in self.admitted]
        wait = sum(j.known_remaining_at(view.now) for j in admitted) / (capacity * self.slot_s)
        gain = self._yield(st, view.now, wait)
        return gain - self._delay_cost(admitted, view.now, st.known_work, capacity) > self.threshold

    # -- capacity ---------------------------------------------------------------------------------
    @staticmethod
    def _fits(free: FreeCapacity, st: JobStatus) -> bool:
        if st.allocation:
            before = free.free.copy()
            free.take(st.spec, st.allocation)
            if (free.free >= -1e-9).all():
                return True
            free.free = before
            return False
        return True  # placement is attempted by the caller

    @staticmethod
    def _worker_capacity(view: ClusterView) -> float:
        """Mean number of workers the worker hosts could run at once, over the active jobs."""
        specs = [st.spec for st in view.jobs] or [JobSpec("probe", 0.0, 1.0)]
        free = FreeCapacity(view.cluster, down=view.down_nodes)
        counts = []
        for s in specs[:20]:
            per_node = [s.worker_demand.max_copies_in(view.cluster.nodes[n].capacity)
                        for n in free.hosts[False]]
            counts.append(sum(per_node))
        return sum(counts) / len(counts)
