"""Philly-shaped traces of any length: the shipped Philly trace's distributions, resampled.

``philly_shaped(n, gpus, seed)`` draws ``n`` jobs, seeded (NumPy's PCG64):
- each job's (GPUs, duration, virtual cluster) is one row of the shipped Philly trace drawn
  uniformly with replacement, so sizes and durations keep their joint distribution (big jobs
  are not given small jobs' durations);
- inter-arrival gaps are drawn the same way from the trace's own gaps, then divided by
  ``gpus / reference_gpus`` and by ``load``: on ``gpus`` GPUs the generated trace offers, on
  average, the load the Philly trace offers ``reference_gpus`` (512, the simulator's default
  Philly cluster) times ``load``.
Fields the trace lacks (utility, tier) follow the same seeded rule as every trace
(``stint.sim.traces``). Use it as ``--trace philly-shaped:N`` (rate for 512 GPUs) or
``philly-shaped:N:GPUS`` (rate scaled to GPUS GPUs).
"""

from __future__ import annotations

import random
from functools import cache

import numpy as np

from stint.model.job import JobSpec
from stint.model.limits import MAX_CLUSTER_GPUS, MAX_TRACE_JOBS, above
from stint.perf.scaling import ScalingModel
from stint.sim.traces import Trace, TraceError, load, missing_fields

REFERENCE_GPUS = 512


def philly_shaped(
    n: int, gpus: int = REFERENCE_GPUS, seed: int = 0, load_factor: float = 1.0,
    reference_gpus: int = REFERENCE_GPUS, elastic: bool = False,
) -> Trace:
    """``n`` jobs shaped like the shipped Philly trace, arriving at a rate scaled to ``gpus``."""
    if n <= 0 or gpus <= 0 or load_factor <= 0 or reference_gpus <= 0:
        raise TraceError(f"philly-shaped: jobs, GPUs and load must be positive (got n={n}, "
                         f"gpus={gpus}, load={load_factor:g}, reference_gpus={reference_gpus})")
    src, source_gaps = _source()
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(src), size=n)
    gaps = rng.choice(source_gaps, size=n - 1) * (reference_gpus / gpus) / load_factor
    times = np.concatenate(([0.0], np.cumsum(gaps))).tolist()
    fields = random.Random(seed)  # the seeded rule of every trace, drawn in arrival order
    jobs = []
    for i, (row, t) in enumerate(zip(rows.tolist(), times, strict=True)):
        s = src[row]
        g = s.requested_workers
        lo, hi = (max(1, g // 2), 2 * g) if elastic else (g, g)
        utility, priority, tier = missing_fields(fields, s.duration_s)
        jobs.append(JobSpec(job_id=f"ps-{i}", arrival_s=t, work=s.work, requested_workers=g,
                            min_workers=lo, max_workers=hi, utility=utility, priority=priority,
                            tier=tier, vc=s.vc, user=s.user, duration_s=s.duration_s))
    name = f"philly-shaped:{n}" + (f":{gpus}" if gpus != reference_gpus else "")
    return Trace(name, jobs, ScalingModel(), "generated from philly", "philly", "recorded-duration")


@cache
def _source() -> tuple[list[JobSpec], np.ndarray]:
    """The shipped Philly trace's jobs and inter-arrival gaps (read once per process)."""
    jobs = load("philly").jobs
    return jobs, np.diff(np.array([j.arrival_s for j in jobs]))


def parse(spec: str) -> tuple[int, int]:
    """``philly-shaped:N[:GPUS]`` -> (N, GPUS); TraceError naming the spec otherwise."""
    parts = spec.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        n = int(parts[1])
        gpus = int(parts[2]) if len(parts) == 3 else REFERENCE_GPUS
    except ValueError:
        raise TraceError(f"{spec!r}: expected philly-shaped:N or philly-shaped:N:GPUS "
                         "(N jobs, arrival rate scaled to GPUS GPUs)") from None
    if n <= 0 or gpus <= 0:
        raise TraceError(f"{spec!r}: N and GPUS must be positive")
    if why := above("N (jobs)", n, MAX_TRACE_JOBS) or above("GPUS", gpus, MAX_CLUSTER_GPUS):
        raise TraceError(f"--trace {spec}: {why}")
    return n, gpus
