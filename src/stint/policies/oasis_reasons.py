"""Why OASiS turned a job away, in the terms a user can change.

Alg. 1 admits a job iff its best payoff μ = f(completion) − Σ prices · demands is positive. A bare
"μ <= 0" names no input, so the reason names the first of these that decided it:

1. the job cannot finish within the planning horizon even alone at its largest size (its length
   and ``horizon_slots``/``slot_s``);
2. its utility is 0 by the earliest completion it can reach (its deadline against its length);
3. no schedule fits: admitted jobs book the hosts it needs through the horizon;
4. the best schedule costs more than the job is worth (its priority against the prices).
"""

from __future__ import annotations

import math

from stint.model.job import JobSpec
from stint.policies.oasis_core import DPJob, Schedule
from stint.policies.oasis_restart import RestartCosts


def fastest_slots(job: DPJob, rc: RestartCosts) -> tuple[int, int]:
    """(slots, workers): the fewest slots the job needs alone at its largest size."""
    y = max(job.counts) if job.counts else job.max_workers
    full = math.floor(y / job.quantum_ws + 1e-9)
    if full <= 0:
        return 1 << 30, y  # one worker-slot does not fit one unit: never
    loss = rc.restart if rc.workers_now else rc.start
    first = math.floor(y * max(0.0, rc.first_frac - loss) / job.quantum_ws + 1e-9)
    return (1 if first >= job.quanta else 1 + math.ceil((job.quanta - first) / full)), y


def rejection_reason(spec: JobSpec, job: DPJob, sched: Schedule | None, end: int, now: float,
                     slot_s: float, horizon: int | None, rc: RestartCosts) -> str:
    """The sentence after "not admitted": the deciding input and what to change."""
    slots, y = fastest_slots(job, rc)
    have = end - job.arrival_slot
    length = job.quanta * job.quantum_ws * slot_s / max(1, spec.requested_workers)
    if slots > have:
        limit = (f"horizon_slots={horizon} of {slot_s:g} s" if horizon is not None
                 else f"its last slot {end - 1}")
        return (f"its length ({length:g} s at {spec.requested_workers} workers, as declared, or "
                f"assumed when none is) needs at least {slots} slots of {slot_s:g} s at its "
                f"largest size ({y} workers), more than the planning horizon ({limit}) allows: "
                "declare a shorter length (--est-s) or raise the horizon (--policy-opt "
                "horizon_slots=N)")
    j = min(slots, len(job.utility)) - 1
    if job.utility[j] <= 0:
        done = (job.arrival_slot + j + 1) * slot_s - spec.arrival_s
        return (f"its utility is 0 by its earliest possible completion ({done:g} s after "
                f"submission, alone at {y} workers): relax its deadline (--deadline) or declare "
                "a shorter length (--est-s)")
    if sched is None:
        return (f"no schedule fits before the end of the planning horizon (slot {end - 1}): "
                "admitted jobs book the hosts it needs until then; submit it later, declare a "
                "shorter length (--est-s) or raise the horizon (--policy-opt horizon_slots=N)")
    return (f"best payoff μ = {sched.payoff:.3g} <= 0: its utility {sched.utility:.3g} "
            f"(priority {spec.priority:g}) is below the price {sched.cost:.3g} of the resources "
            "it needs while admitted jobs book them; raise --priority, or submit it later")
