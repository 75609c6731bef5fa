"""``gain``: place and move jobs where the time they save pays for the copy.

Placement: a pending job goes to the usable cluster with the least expected wait plus the time
to get there (``move_cost_s``: checkpoint over the link plus restart if it has one, data set from
its data cluster unless it is there). Every ``period_s`` a waiting job moves from cluster a to b
when ``wait_a - (wait_b + cost) > margin_s x factor``, where wait is
``ClusterState.expected_wait_s`` (the job counted once, where it is) and ``factor`` is
0.5 for premium jobs, 1 for standard and 2 for basic (the tier decides how readily a job moves).
At most ``max_moves`` moves a period, oldest waiting first; each placement or move adds the job's
share to the snapshot's backlog so that one call does not herd jobs onto one cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stint.model.fleet import Fleet, FleetJob
from stint.model.job import Tier
from stint.policies.fleet.base import FleetView, GlobalPlan, link_gbps, move_costs_s

TIER_FACTOR = {Tier.PREMIUM: 0.5, Tier.STANDARD: 1.0, Tier.BASIC: 2.0}


@dataclass
class Gain:
    name: str = "gain"
    period_s: float | None = 300.0
    margin_s: float = 600.0
    max_moves: int = 200
    _links: tuple[Fleet, list[list[float]]] | None = field(default=None, init=False, repr=False, compare=False)

    def plan(self, view: FleetView) -> GlobalPlan:
        plan = GlobalPlan()
        assigned = [c.assigned_gpus for c in view.clusters]
        backlog = [c.backlog_gpu_s for c in view.clusters]
        for p in view.pending:
            best = self._best(view, p.job, p.at, p.has_checkpoint, assigned, backlog, exclude=None)
            if best is not None:
                plan.place[p.job.job_id] = best[0]
                assigned[best[0]] += p.job.gpus
                backlog[best[0]] += p.job.gpus * p.job.est_s
        moves = 0
        for w in sorted(view.waiting, key=lambda w: w.since_s):
            if moves >= self.max_moves:
                break
            job, share = w.job, w.job.gpus * w.job.est_s
            if not view.clusters[w.at].available:
                continue
            here = view.clusters[w.at].expected_wait_s(0, assigned[w.at], backlog[w.at])
            best = self._best(view, job, w.at, w.has_checkpoint, assigned, backlog, exclude=w.at)
            if best is None or here - best[1] <= self.margin_s * TIER_FACTOR[job.spec.tier]:
                continue
            plan.move[job.job_id] = best[0]
            assigned[w.at] -= job.gpus
            backlog[w.at] -= share
            assigned[best[0]] += job.gpus
            backlog[best[0]] += share
            moves += 1
        return plan

    def _best(self, view: FleetView, job: FleetJob, at: int | None, ckpt: bool, assigned: list[int],
              backlog: list[float], exclude: int | None) -> tuple[int, float] | None:
        """The usable cluster with the least wait + cost, and that figure."""
        if self._links is None or self._links[0] is not view.fleet:
            self._links = (view.fleet, link_gbps(view.fleet))
        costs = move_costs_s(view.fleet, self._links[1], job, at, ckpt)
        need = job.gpus
        best: tuple[int, float] | None = None
        for c in view.clusters:
            i = c.index
            if i == exclude or not (c.available and need <= c.gpus):  # (``fits``)
                continue
            score = c.expected_wait_s(need, assigned[i], backlog[i]) + costs[i]
            if best is None or score < best[1]:
                best = (i, score)
        return best
