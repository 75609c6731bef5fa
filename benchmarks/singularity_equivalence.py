"""Does ``singularity`` still make the same decisions, and how much cheaper is it? Side by side.

Runs the policy of this tree and the one of a git revision (``--ref``, default HEAD) on the same
workloads and prints, per workload and version, the CPU seconds of the simulation, CPU-ms per job
and a digest of every job's record (start, finish, work received, preemptions, migrations,
resizes, attained GPU-s; in a fleet also every fleet record: cluster, moves, work lost); "same" when the digests are equal.

    .venv/bin/python benchmarks/singularity_equivalence.py --ref fd10718
    .venv/bin/python benchmarks/singularity_equivalence.py --ref fd10718 --workloads fleet30

Workloads: ``pollux`` (pollux:6 on 16 x 4 GPUs), ``philly`` (Philly's first 3,000 jobs on 128 GPUs,
tiers premium 10 % / standard 30 % / basic 60 %, reservation peak=0.3,start=9,end=21),
``fleet10`` (10 clusters, 10,000 GPUs, 10,000 jobs, global ``gain``), ``fleet30`` (30
clusters, 100,000 GPUs, 30,000 jobs) and ``fleetwarm`` (``fleet10``'s fleet in its steady state,
20,000 jobs, region r0 down for 6 hours from a third of the arrival window: the congested regime,
``benchmarks/fleet_scale.py --warm --outage-h 6``), ``fleetbig`` (the same with 3 clusters of
416 nodes, the size of the bar's clusters, one per region) and ``fleetll`` (``fleetbig`` under
the global ``least-loaded``: the clusters of the two regions left keep the jobs the outage sent
them, the long congestion of that baseline).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from stint.model.fleet import Fleet, FleetCluster, FleetFailure
from stint.perf.scaling import ScalingModel
from stint.policies import registry
from stint.policies.base import PolicyBase
from stint.policies.fleet.registry import make_global
from stint.policies.registry import make
from stint.sim.engine import Simulator
from stint.sim.fleet import FleetSimulator
from stint.sim.fleet_workload import generate
from stint.sim.reservation import Reservation
from stint.sim.runner import SimConfig, perf_for
from stint.sim.traces import Filters, TierMix, load

Factory = Callable[[], PolicyBase]
FIELDS = ("job_id", "first_start_s", "finish_s", "work_received", "preemptions", "migrations", "resizes",
          "attained_gpu_s")


def reference(rev: str) -> Factory:
    """The ``Singularity`` class of ``rev``, loaded without registering it."""
    src = subprocess.run(["git", "show", f"{rev}:src/stint/policies/singularity.py"], check=True,
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    path = Path(tempfile.mkdtemp()) / "singularity_ref.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("singularity_ref", path)
    assert spec is not None and spec.loader is not None
    mod = sys.modules["singularity_ref"] = importlib.util.module_from_spec(spec)
    saved = registry.register
    registry.register = lambda name: (lambda cls: cls)  # type: ignore[assignment]
    try:
        spec.loader.exec_module(mod)
    finally:
        registry.register = saved
    cls: Factory = mod.Singularity
    return cls


def digest(records: Iterable[Any], more: Iterable[Any] = ()) -> tuple[str, int]:
    """A digest of the records' ``FIELDS`` (``more``: any other records, whole); how many records."""
    h, n = hashlib.sha256(), 0
    for r in sorted(records, key=lambda r: r.job_id):
        h.update(repr(tuple(getattr(r, f) for f in FIELDS)).encode())
        n += 1
    for r in more:
        h.update(repr(r).encode())
    return h.hexdigest()[:16], n


def single(trace_spec: str, nodes: int, per_node: int, filters: Filters, reservation: Reservation | None
           ) -> Callable[[Factory], tuple[str, int]]:
    cfg = SimConfig(trace=trace_spec, nodes=nodes, gpus_per_node=per_node, filters=filters,
                    tiers=TierMix.parse("premium=0.1,standard=0.3,basic=0.6") if trace_spec == "philly" else TierMix())
    trace = load(cfg.trace, seed=cfg.seed, filters=cfg.filters, tiers=cfg.tiers)
    cluster, costs = cfg.cluster(trace), cfg.cost_model(trace)
    perf, _ = perf_for(trace, "singularity", cfg.batch)
    res = replace(reservation, clock0_s=trace.clock0_s) if reservation is not None else None

    def run(factory: Factory) -> tuple[str, int]:
        return digest(Simulator(cluster, trace.jobs, factory(), perf, costs.costs, reservation=res).run().records)
    return run


def fleet(clusters: int, gpus: int, jobs: int, warm: bool = False, outage_h: float = 0.0,
          scheduler: str = "gain") -> Callable[[Factory], tuple[str, int]]:
    members = tuple(FleetCluster(f"c{i}", f"r{i % 3}", max(1, gpus // 8 // clusters), 8) for i in range(clusters))
    specs = generate(Fleet(members), jobs, 0.8, 0, warm=warm)
    start = specs[-1].spec.arrival_s / 3  # as benchmarks/fleet_scale.py's outage
    f = Fleet(members, failures=(FleetFailure("region", "r0", start, start + outage_h * 3600),) if outage_h else ())

    def run(factory: Factory) -> tuple[str, int]:
        res = FleetSimulator(f, specs, make_global(scheduler), factory, ScalingModel()).run()
        return digest([r for c in res.clusters for r in c.records], res.records)
    return run


WORKLOADS: dict[str, Callable[[], Callable[[Factory], tuple[str, int]]]] = {
    "pollux": lambda: single("pollux:6", 16, 4, Filters(), None),
    "philly": lambda: single("philly", 16, 8, Filters(limit=3000), Reservation.parse("peak=0.3,start=9,end=21", 0)),
    "fleet10": lambda: fleet(10, 10_000, 10_000),
    "fleet30": lambda: fleet(30, 100_000, 30_000),
    "fleetwarm": lambda: fleet(10, 10_000, 20_000, warm=True, outage_h=6),
    "fleetbig": lambda: fleet(3, 9_984, 20_000, warm=True, outage_h=6),
    "fleetll": lambda: fleet(3, 9_984, 20_000, warm=True, outage_h=6, scheduler="least-loaded"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="HEAD", help="git revision of the reference policy")
    ap.add_argument("--workloads", default="pollux,philly,fleet10")
    ap.add_argument("--only", choices=("both", "new", "ref"), default="both")
    a = ap.parse_args()
    versions: dict[str, Factory] = {}
    if a.only in ("both", "ref"):
        versions[f"ref {a.ref}"] = reference(a.ref)
    if a.only in ("both", "new"):
        versions["this tree"] = lambda: make("singularity")  # type: ignore[return-value]
    for name in a.workloads.split(","):
        run = WORKLOADS[name]()
        seen = {}
        for label, factory in versions.items():
            t0 = time.process_time()
            d, n = run(factory)
            cpu = time.process_time() - t0
            seen[label] = (d, cpu)
            print(f"{name:8s} {label:14s} jobs {n:6d}  CPU {cpu:7.1f} s  {1000 * cpu / n:6.3f} ms/job  digest {d}",
                  flush=True)
        if len(seen) == 2:
            (d0, c0), (d1, c1) = seen.values()
            print(f"{name:8s} {'same' if d0 == d1 else 'DIFFERENT'}  ref/new CPU {c0 / max(c1, 1e-9):.2f}x", flush=True)


if __name__ == "__main__":
    main()
