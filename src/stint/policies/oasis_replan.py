"""OASiS with re-planning: beyond the paper, which never revises a committed schedule.

stint can preempt, migrate and resize, so at every slot in which something changed (an arrival
or a completion) this variant re-prices and re-plans each admitted, unfinished job:

1. New arrivals are decided exactly as in OASiS (Alg. 1).
2. Then, in arrival order, each admitted job's reservation from the current slot on is released
   and Alg. 2 is run for its *remaining* work, as if it arrived now with its original utility.
   The mechanism's cost is charged up front: if the job is running, ``change_cost_s`` seconds of
   its current workers are added to the remaining work.
3. The new schedule replaces the old one only if its payoff beats the old remainder's payoff at
   today's prices by more than ``min_gain``; otherwise the old remainder is committed again. An
   admitted job is never dropped. A job whose plan ran out with work left (the mechanism's costs
   ate into it) always gets a new plan if one exists; plain OASiS leaves it unfinished.
"""

from __future__ import annotations

import math

import numpy as np

from stint.model.allocation import Plan
from stint.policies.base import ClusterView, JobStatus
from stint.policies.oasis import OASiS, dp_job
from stint.policies.oasis_core import DPJob, Schedule, best_schedule, commit, schedule_cost
from stint.policies.registry import register


@register("oasis-replan")
class OASiSReplan(OASiS):
    """OASiS plus per-slot re-planning of admitted jobs (see module docstring)."""

    name = "oasis-replan"

    def __init__(self, change_cost_s: float = 0.0, min_gain: float = 0.0, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        if change_cost_s < 0:
            raise ValueError(f"oasis-replan: change_cost_s must be >= 0 (got {change_cost_s})")
        self.change_cost_s = change_cost_s
        self.min_gain = min_gain
        self.replans = 0

    def plan(self, view: ClusterView) -> Plan:
        earlier = set(self.committed)  # jobs admitted before this call (not the new arrivals)
        plan = super().plan(view)
        if not view.changed:
            return plan
        now_slot = math.floor(view.now / self.slot_s + 1e-9)
        for st in view.jobs:
            if st.job_id in self.committed and st.job_id in earlier:
                self._replan(st, now_slot, plan, st.known_remaining_at(view.now))
        return plan

    def _replan(self, st: JobStatus, now: int, plan: Plan, remaining: float) -> None:
        assert self.worker_prices is not None and self.groups is not None
        job, old = self.committed[st.job_id]
        if remaining <= 0:
            return
        rest = _tail(old, now)
        old_payoff = -math.inf  # the old plan ran out with work left (mechanism costs): re-plan
        if rest is not None:
            commit(job, rest, self.worker_prices, self.ps_prices, sign=-1)
            old_payoff = rest.utility - schedule_cost(job, rest, self.worker_prices,
                                                       self.ps_prices)
        new_job = self._remaining_job(st, now, remaining)
        new = None
        if not isinstance(new_job, str):
            end = new_job.arrival_slot + len(new_job.utility)
            self.worker_prices.ensure_slots(end)
            if self.ps_prices is not None:
                self.ps_prices.ensure_slots(end)
            new = best_schedule(new_job, self.worker_prices, self.ps_prices, end)
        if isinstance(new_job, str) or new is None or new.payoff <= old_payoff + self.min_gain:
            if rest is not None:
                commit(job, rest, self.worker_prices, self.ps_prices)
            return
        commit(new_job, new, self.worker_prices, self.ps_prices)
        self.committed[st.job_id] = (new_job, new)
        self.replans += 1
        want = self.feasible_at(st.spec, now)
        if want != st.allocation:
            plan.allocations[st.job_id] = want
        else:
            plan.allocations.pop(st.job_id, None)  # drop the old plan's step for now

    def _remaining_job(self, st: JobStatus, now: int, remaining: float) -> DPJob | str:
        assert self.groups is not None
        spec = st.spec
        penalty = self.change_cost_s * st.allocation.num_workers if st.allocation else 0.0
        fraction = min(st.known_work, remaining + penalty) / spec.work
        end = self.end_slot if self.end_slot is not None else now + self.horizon
        return dp_job(spec, now, end, self.slot_s, self.groups, self.max_quanta, fraction)


def _tail(s: Schedule, now: int) -> Schedule | None:
    """The part of a schedule from slot ``now`` on, or None if nothing is left."""
    keep = max(0, now - s.start_slot)
    if keep >= s.workers.shape[0] or not np.any(s.workers[keep:]):
        return None
    return Schedule(s.start_slot + keep, s.last_slot, s.workers[keep:], s.ps[keep:], s.utility,
                    0.0)
