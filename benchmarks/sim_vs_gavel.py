"""Gavel's own simulator beside ``stint sim --policy gavel`` on one of Gavel's shipped traces and
its cluster spec: the ratio (stint / Gavel) of average JCT, makespan and CPU time.

Usage: python benchmarks/sim_vs_gavel.py GAVEL_CHECKOUT [--python GAVEL_PYTHON]
       [--trace max_min_fairness.trace] [--cluster 8:8:8] [--per-server 4:4:4] [--restart-s 0]

GAVEL_CHECKOUT is a clone of github.com/stanford-futuredata/gavel with its RPC stubs built
(``make -C scheduler rpc_stubs``); GAVEL_PYTHON an interpreter with its simulator's packages
(cvxpy with ECOS, grpcio, preconditions, func_timeout, dill, psutil, matrix_completion,
scikit-learn). Gavel runs its ``max_min_fairness_perf`` policy (360 s rounds, ECOS), stint its
``gavel`` policy, both with Gavel's ``simulation_throughputs.json``. CPU time is the child
process's user + system time, interpreter start-up included.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

TYPES = ("v100", "p100", "k80")  # Gavel's cluster spec order


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_gavel(checkout: Path, python: str, trace: str, cluster: str, per_server: str) -> dict[str, float]:
    sched = checkout / "scheduler"
    before = _child_cpu()
    out = subprocess.run(
        [python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t", f"traces/physical_cluster/{trace}",
         "-p", "max_min_fairness_perf", "-c", cluster, "--num_gpus_per_server", per_server,
         "--solver", "ECOS", "--seed", "0"],
        cwd=sched, capture_output=True, text=True, check=True).stdout
    cpu = _child_cpu() - before
    jct = re.search(r"^Average job completion time: ([\d.]+) seconds", out, re.MULTILINE)
    span = re.search(r"^Total duration: ([\d.]+) seconds", out, re.MULTILINE)
    assert jct and span, out[-2000:]
    return {"avg_jct_s": float(jct[1]), "makespan_s": float(span[1]), "cpu_s": cpu}


def cluster_file(checkout: Path, cluster: str, per_server: str) -> str:
    lines = [f'throughputs = "{checkout / "scheduler" / "simulation_throughputs.json"}"']
    for kind, gpus, per in zip(TYPES, cluster.split(":"), per_server.split(":"), strict=True):
        if int(gpus):
            lines += ["", "[[group]]", f'gpu_type = "{kind}"', f"nodes = {int(gpus) // int(per)}",
                      f"gpus_per_node = {per}"]
    return "\n".join(lines) + "\n"


def run_stint(checkout: Path, trace: str, cluster: str, per_server: str, restart_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "types.toml").write_text(cluster_file(checkout, cluster, per_server))
        before = _child_cpu()
        subprocess.run(
            [sys.executable, "-c", "from stint.cli import main; main()", "sim", "--cluster", f"{tmp}/types.toml",
             "--trace", str(checkout / "scheduler" / "traces" / "physical_cluster" / trace),
             "--policy", "gavel", "--restart-s", f"{restart_s:g}", "--out", f"{tmp}/out"],
            capture_output=True, text=True, check=True)
        cpu = _child_cpu() - before
        s = json.loads((Path(tmp) / "out" / "summary.json").read_text())["gavel"]
    return {"avg_jct_s": s["avg_jct_s"], "makespan_s": s["makespan_s"], "cpu_s": cpu,
            "sim_cpu_s": s["cpu_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gavel", type=Path, help="Gavel's checkout")
    ap.add_argument("--python", default=sys.executable, help="the interpreter for Gavel's simulator")
    ap.add_argument("--trace", default="max_min_fairness.trace", help="a trace in traces/physical_cluster/")
    ap.add_argument("--cluster", default="8:8:8", help="GPUs of v100:p100:k80 (Gavel's -c)")
    ap.add_argument("--per-server", default="4:4:4", help="GPUs per server (Gavel's --num_gpus_per_server)")
    ap.add_argument("--restart-s", type=float, default=0.0, help="stint's cost of a restart (Gavel's is 0)")
    args = ap.parse_args()
    g = run_gavel(args.gavel, args.python, args.trace, args.cluster, args.per_server)
    s = run_stint(args.gavel, args.trace, args.cluster, args.per_server, args.restart_s)
    print(f"trace {args.trace}, cluster v100:p100:k80 = {args.cluster} ({args.per_server} per server)")
    print(f"{'':14}{'Gavel':>12}{'stint':>12}{'stint/Gavel':>13}")
    for key, name, unit in (("avg_jct_s", "avg JCT", 3600), ("makespan_s", "makespan", 3600), ("cpu_s", "CPU", 1)):
        shown = "h" if unit == 3600 else "s"
        print(f"{name + ' (' + shown + ')':14}{g[key] / unit:12.3f}{s[key] / unit:12.3f}{s[key] / g[key]:13.3f}")
    print(f"(stint's simulation alone, start-up left out: {s['sim_cpu_s']:.2f} CPU s; "
          f"Gavel / stint CPU: {g['cpu_s'] / s['cpu_s']:.2f}x)")


if __name__ == "__main__":
    main()
