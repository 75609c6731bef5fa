"""Does ``singularity`` still make the same decisions, and how much cheaper is it? Side by side.

Runs this tree and a git revision (``--ref``, default HEAD) on the same workloads and prints, per
workload and version, the CPU seconds of the simulation, CPU-ms per job and a digest of every
job's record (start, finish, work received, preemptions, migrations, resizes, attained GPU-s; in
a fleet also every fleet record: cluster, moves, work lost); "same" when the digests are equal.
The reference is the revision's whole source tree (a temporary git worktree, run in a process of
its own, workload by workload just before this tree's run), so everything a pass calls —
placement, the table, the simulator — is the revision's.

    .venv/bin/python benchmarks/singularity_equivalence.py --ref 34e458f
    .venv/bin/python benchmarks/singularity_equivalence.py --ref 34e458f --workloads fleetll,fleet30

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
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from stint.model.fleet import Fleet, FleetCluster, FleetFailure
from stint.perf.scaling import ScalingModel
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


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A temporary checkout of ``rev`` (a git worktree), removed afterwards."""
    repo = Path(__file__).resolve().parent.parent
    path = Path(tempfile.mkdtemp()) / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), rev], check=True, cwd=repo)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], check=True, cwd=repo)


def run_ref(tree: Path, workload: str) -> tuple[str, int, float]:
    """Digest, records and CPU seconds of ``workload`` on the source tree ``tree`` (this script in
    a process whose ``stint`` is that tree's)."""
    out = subprocess.run([sys.executable, __file__, "--only", "new", "--json", "--workloads", workload],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree / "src")}).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return got["digest"], got["jobs"], got["cpu_s"]


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
    ap.add_argument("--ref", default="HEAD", help="git revision of the reference")
    ap.add_argument("--workloads", default="pollux,philly,fleet10")
    ap.add_argument("--only", choices=("both", "new", "ref"), default="both")
    ap.add_argument("--json", action="store_true", help="one JSON line per run (how a reference run reports)")
    a = ap.parse_args()
    with worktree(a.ref) if a.only != "new" else nullcontext(Path()) as tree:
        for name in a.workloads.split(","):
            seen: dict[str, tuple[str, float]] = {}
            if a.only != "new":
                d, n, cpu = run_ref(tree, name)
                seen[f"ref {a.ref}"] = (d, cpu)
                _report(name, f"ref {a.ref}", n, cpu, d)
            if a.only != "ref":
                run = WORKLOADS[name]()
                t0 = time.process_time()
                d, n = run(lambda: make("singularity"))  # type: ignore[arg-type, return-value]
                cpu = time.process_time() - t0
                seen["this tree"] = (d, cpu)
                if a.json:
                    print(json.dumps({"workload": name, "jobs": n, "cpu_s": cpu, "digest": d}), flush=True)
                else:
                    _report(name, "this tree", n, cpu, d)
            if len(seen) == 2:
                (d0, c0), (d1, c1) = seen.values()
                print(f"{name:8s} {'same' if d0 == d1 else 'DIFFERENT'}  ref/new CPU {c0 / max(c1, 1e-9):.2f}x",
                      flush=True)


def _report(name: str, label: str, jobs: int, cpu: float, digest_: str) -> None:
    print(f"{name:8s} {label:14s} jobs {jobs:6d}  CPU {cpu:7.1f} s  {1000 * cpu / jobs:6.3f} ms/job  "
          f"digest {digest_}", flush=True)


if __name__ == "__main__":
    main()
