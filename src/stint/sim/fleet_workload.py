"""Fleet workloads from the Philly trace's distributions (docs/fleet.md), seeded.

``generate(fleet, n, load, seed)``: each job's (GPUs, duration) pair is drawn with replacement
from the shipped Philly trace's jobs (rows asking more GPUs than the largest cluster are left
out), so sizes and durations keep their joint distribution; arrivals are a Poisson process
whose rate makes the offered load ``rate x E[GPUs x duration] / fleet GPUs`` equal ``load``;
tiers are 10 % premium, 60 % standard, 30 % basic (as ``traces``' rule); home region, data
cluster, checkpoint and data sizes follow ``model.fleet.draw_sizes``.

``warm=True`` starts the fleet in its steady state (a stationary start). Philly's durations are
heavy-tailed (a mean of 3.6 hours, a few jobs of weeks), so jobs arriving into an empty fleet
fill it only slowly: over a window of W hours the mean demand is
``load x E[GPUs x min(dur, t)] / E[GPUs x dur]`` averaged over t in [0, W] — 0.63 x load for
148 hours, 0.38 x load for 50 — and the fleet is never as loaded as its offered load says. With
``warm``, the jobs that would be running at time 0 had the arrivals gone on forever (on
unlimited GPUs: the M/G/infinity stationary state) arrive at 0 as well: their number is Poisson
with mean ``rate x E[dur]``, each a Philly shape drawn with probability proportional to its
duration, with a remaining duration uniform in (0, dur]. They are marked ``warmup`` (counted in
utilization, not in attainment) and drawn from their own seeded stream, so the measured jobs are
those of ``warm=False``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from stint.model.fleet import Fleet, FleetJob, draw_sizes
from stint.model.job import JobSpec, Tier
from stint.sim.traces import load as load_trace

TIERS = (Tier.PREMIUM, Tier.STANDARD, Tier.BASIC)
TIER_P = (0.1, 0.6, 0.3)


@lru_cache(maxsize=4)
def philly_shapes(max_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Every Philly job's (GPUs, duration s) that fits ``max_gpus`` (read once per process)."""
    jobs = load_trace("philly").jobs
    gpus = np.array([j.requested_workers for j in jobs], dtype=np.int64)
    dur = np.array([j.work for j in jobs], dtype=float)
    keep = gpus <= max_gpus
    return gpus[keep], dur[keep]


def generate(fleet: Fleet, n: int, load: float, seed: int = 0, warm: bool = False) -> list[FleetJob]:
    if n <= 0 or not load > 0:
        raise ValueError(f"need a positive job count and load (got {n}, {load})")
    gpus, dur = philly_shapes(max(c.gpus for c in fleet.clusters))
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(gpus), size=n)
    g, d = gpus[pick], dur[pick]
    rate = load * fleet.total_gpus / float((gpus * dur).mean())  # jobs per second
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    arrivals -= arrivals[0]
    tiers = rng.choice(3, size=n, p=TIER_P)
    specs = [JobSpec(f"f{i}", float(a), float(w), int(k), int(k), int(k), tier=TIERS[t], duration_s=float(w))
             for i, (a, w, k, t) in enumerate(zip(arrivals.tolist(), d.tolist(), g.tolist(), tiers.tolist(),
                                                   strict=True))]
    jobs = draw_sizes(fleet, specs, seed)
    return _warmup(fleet, gpus, dur, rate, seed) + jobs if warm else jobs


def _warmup(fleet: Fleet, gpus: np.ndarray, dur: np.ndarray, rate: float, seed: int) -> list[FleetJob]:
    """The jobs running at time 0 in the stationary state (module docstring), all arriving at 0."""
    rng = np.random.default_rng([seed, 1])
    m = int(rng.poisson(rate * float(dur.mean())))
    pick = rng.choice(len(dur), size=m, p=dur / dur.sum())
    left = dur[pick] * (1.0 - rng.random(m))  # in (0, dur]
    tiers = rng.choice(3, size=m, p=TIER_P)
    specs = [JobSpec(f"w{i}", 0.0, float(w), int(k), int(k), int(k), tier=TIERS[t], duration_s=float(w))
             for i, (w, k, t) in enumerate(zip(left.tolist(), gpus[pick].tolist(), tiers.tolist(), strict=True))]
    return [replace(j, warmup=True) for j in draw_sizes(fleet, specs, seed + 1)]
