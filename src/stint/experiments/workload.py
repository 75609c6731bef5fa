"""The synthetic cluster and workload of OASiS' evaluation (§V; summary §3), seeded.

Ranges are the paper's, drawn uniformly (open point: distributions unstated). Calibration (open
points 1 and 2, docs/oasis.md): a slot is one hour, τ_i is read in *seconds* (the paper's "slots"
give minimum run times of ~340 slots, beyond T), e_i in MB and b_i in Gbit/s. Minimum run times
E_i M_i (τ_i + 2e_i/b_i) are then 3.1 slots at the median, 92% under 20 slots.

Worker hosts are GPU instances (EC2 P2/G3; the paper's text swaps them, open point 7), PS hosts
are C4 instances; server bandwidth is drawn from [20, 50] Gbit/s. Disk storage is omitted: the
common ``Resources`` has no disk field and 5-10 GB per task never binds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stint.model.cluster import Cluster, Node
from stint.model.resources import Resources
from stint.model.utility import SigmoidUtility
from stint.perf.ps_model import PSJobSpec, ps_job

SLOT_S = 3600.0
# (name, GPUs, vCPUs, memory GB) of the EC2 types the paper names.
WORKER_TYPES = (("p2.8xlarge", 8, 32, 488), ("p2.16xlarge", 16, 64, 732),
                ("g3.4xlarge", 1, 16, 122), ("g3.8xlarge", 2, 32, 244), ("g3.16xlarge", 4, 64, 488))
PS_TYPES = (("c4.2xlarge", 0, 8, 15), ("c4.4xlarge", 0, 16, 30), ("c4.8xlarge", 0, 36, 60))
CLASSES = ("insensitive", "sensitive", "critical")
DEFAULT_MIX = (0.10, 0.55, 0.35)


@dataclass(frozen=True, slots=True)
class Workload:
    """A cluster, its jobs (arrival order), each job's class, the horizon T and the slot length."""

    cluster: Cluster
    jobs: tuple[PSJobSpec, ...]
    classes: dict[str, str]
    horizon: int
    slot_s: float = SLOT_S


def make_cluster(rng: np.random.Generator, workers: int = 50, ps: int = 50) -> Cluster:
    """H worker hosts and K PS hosts of random EC2 types, bandwidth U[20, 50] Gbit/s."""
    nodes = []
    for role, count, types in (("worker", workers, WORKER_TYPES), ("ps", ps, PS_TYPES)):
        for i in range(count):
            name, gpu, cpu, mem = types[int(rng.integers(len(types)))]
            cap = Resources(gpu=gpu, cpu=cpu, mem_gb=mem, net_gbps=float(rng.uniform(20, 50)))
            nodes.append(Node(f"{role}-{i}-{name}", cap, role))
    return Cluster(tuple(nodes))


def arrival_slots(rng: np.random.Generator, n: int, window: int) -> np.ndarray:
    """Arrival slots over [0, window) with a diurnal rate (1 + 0.5 sin(2πt/24)).

    The paper replays the Google cluster trace's arrival pattern, which we do not have; a diurnal
    inhomogeneous process keeps its burstiness. Sorted, so jobs are in arrival order.
    """
    t = np.arange(window)
    rate = 1.0 + 0.5 * np.sin(2 * np.pi * t / 24.0)
    return np.sort(rng.choice(t, size=n, p=rate / rate.sum()))


def make_job(rng: np.random.Generator, job_id: str, arrival_slot: int, cls: str,
             gamma1: tuple[float, float] = (1, 100), slot_s: float = SLOT_S,
             scale: float = 1.0) -> PSJobSpec:
    """One job with the paper's ranges. ``scale`` < 1 shrinks E_i and N_i for small instances."""
    g2 = {"insensitive": 0.0, "sensitive": rng.uniform(0.01, 1), "critical": rng.uniform(4, 6)}[cls]
    util = SigmoidUtility(float(rng.uniform(*gamma1)), float(g2), float(rng.uniform(1, 15)), slot_s)
    chunks = max(1, round(int(rng.integers(5, 101)) * scale))
    worker = Resources(gpu=int(rng.integers(0, 5)), cpu=int(rng.integers(1, 11)),
                       mem_gb=float(rng.uniform(2, 32)), net_gbps=float(rng.uniform(0.1, 5)))
    ps = Resources(cpu=int(rng.integers(1, 11)), mem_gb=float(rng.uniform(2, 32)),
                   net_gbps=float(rng.uniform(5, 20)))
    return ps_job(job_id, arrival_slot * slot_s, chunks=chunks,
                  minibatches=int(rng.integers(10, 101)),
                  epochs=max(1, round(int(rng.integers(50, 201)) * scale)),
                  tau_s=float(rng.uniform(0.001, 0.1)), grad_mb=float(rng.uniform(30, 575)),
                  worker_demand=worker, ps_demand=ps, utility=util,
                  requested_workers=int(rng.integers(1, 31)), application=cls)


def make_workload(seed: int, jobs: int, horizon: int = 300, workers: int = 50, ps: int = 50,
                  mix: tuple[float, float, float] = DEFAULT_MIX, window: int | None = None,
                  gamma1: tuple[float, float] = (1, 100), scale: float = 1.0,
                  exact_mix: bool = False) -> Workload:
    """The Fig. 3 setup by default: H = K = 50, T = 300, the paper's job mix.

    With ``exact_mix`` the class counts are exactly ``jobs * mix`` (shuffled), as in Fig. 4.
    """
    rng = np.random.default_rng(seed)
    cluster = make_cluster(rng, workers, ps)
    slots = arrival_slots(rng, jobs, window if window is not None else horizon)
    if exact_mix:
        drawn = np.repeat(np.arange(3), np.round(np.array(mix) * jobs).astype(int))[:jobs]
        drawn = rng.permutation(np.pad(drawn, (0, jobs - len(drawn)), constant_values=1))
    else:
        drawn = rng.choice(3, size=jobs, p=mix)
    specs, classes = [], {}
    for i, a in enumerate(slots):
        cls = CLASSES[int(drawn[i])]
        job_id = f"job-{i:04d}"
        specs.append(make_job(rng, job_id, int(a), cls, gamma1, scale=scale))
        classes[job_id] = cls
    return Workload(cluster, tuple(specs), classes, horizon)
