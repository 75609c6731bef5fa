"""Fleet simulation at scale: generation, simulation time, peak memory, and a regional outage.

    .venv/bin/python benchmarks/fleet_scale.py --clusters 10 --regions 3 --gpus 10000 --jobs 10000
    .venv/bin/python benchmarks/fleet_scale.py --clusters 30 --regions 3 --gpus 100000 --jobs 1000000 \
        --global gain --outage-h 6

Clusters get equal shares of ``--gpus`` (nodes of 8); jobs come from ``stint.sim.fleet_workload``
at ``--load``. With ``--outage-h H`` region r0 is down for H hours from a third of the arrival
window. Prints one JSON line per global scheduler: wall and CPU seconds of the simulation (the
generation apart), peak RSS of the process, events, and the fleet's figures, with
``cold_demand``: the mean demand over the window of a fleet started empty, as a share of its
GPUs (``load x`` the mean over t in the window of ``E[GPUs x min(dur, t)] / E[GPUs x dur]``,
docs/fleet.md): what any scheduler that places every job measures as utilization when the
fleet is never congested. ``--warm`` starts the fleet in its steady state instead.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from stint.model.fleet import Fleet, FleetCluster, FleetFailure
from stint.perf.scaling import ScalingModel
from stint.policies.fleet.registry import make_global
from stint.policies.registry import make
from stint.sim.fleet import FleetResult, FleetSimulator
from stint.sim.fleet_workload import generate, philly_shapes


def cold_demand(fleet: Fleet, load: float, window_s: float) -> float:
    """The mean demand over ``[0, window_s]`` of the fleet started empty (module docstring)."""
    gpus, dur = philly_shapes(max(c.gpus for c in fleet.clusters))
    m = np.minimum(dur, window_s)
    served = (gpus * (m * window_s - m * m / 2)).mean() / window_s  # mean over t of E[g min(d, t)]
    return load * float(served / (gpus * dur).mean()) if window_s > 0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--regions", type=int, default=3)
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--policy", default="tiresias")
    ap.add_argument("--global", dest="schedulers", default="gain,static,least-loaded")
    ap.add_argument("--outage-h", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", action="store_true", help="start in the steady state (generate(warm=True))")
    ap.add_argument("--groups", action="store_true", help="with --outage-h: also the mean attainment of the "
                    "jobs of r0 / the other regions arriving before, during and after the outage")
    a = ap.parse_args()
    nodes = max(1, a.gpus // 8 // a.clusters)
    clusters = tuple(FleetCluster(f"c{i}", f"r{i % a.regions}", nodes, 8) for i in range(a.clusters))
    fleet = Fleet(clusters)
    t0 = time.perf_counter()
    jobs = generate(fleet, a.jobs, a.load, a.seed, warm=a.warm)
    gen_s = time.perf_counter() - t0
    window = jobs[-1].spec.arrival_s
    outage = (window / 3, window / 3 + a.outage_h * 3600)
    if a.outage_h > 0:
        fleet = Fleet(clusters, failures=(FleetFailure("region", "r0", *outage),))
    for name in a.schedulers.split(","):
        sim = FleetSimulator(fleet, jobs, make_global(name), lambda: make(a.policy), ScalingModel())
        res = sim.run()
        s = res.summary()
        s.pop("per_cluster")
        if a.groups:
            s["groups"] = groups(res, {j.job_id: j.home_region for j in jobs}, outage)
        rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        print(json.dumps({"global": name, "gpus": fleet.total_gpus, "generate_s": round(gen_s, 1),
                          "window_h": round(window / 3600, 1),
                          "cold_demand": round(cold_demand(fleet, a.load, window), 3),
                          "peak_rss_gb": round(rss_gb, 2), **s}), flush=True)


def groups(res: FleetResult, home: dict[str, str], outage: tuple[float, float]) -> dict[str, list[float]]:
    """Mean attainment (and job count) by submitter's region (r0, the one down, or another) and
    arrival before, during or after the outage; warm-up jobs left out."""
    out: dict[str, list[float]] = {}
    for r in res.records:
        if r.warmup:
            continue
        phase = "before" if r.arrival_s < outage[0] else "during" if r.arrival_s < outage[1] else "after"
        out.setdefault(f"{'r0' if home[r.job_id] == 'r0' else 'other'}-{phase}", []).append(r.attainment)
    return {k: [round(float(np.mean(v)), 3), len(v)] for k, v in sorted(out.items())}


if __name__ == "__main__":
    main()
