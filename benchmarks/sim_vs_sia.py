"""Sia's own simulator beside ``stint sim`` on one of Sia's shipped workloads and its default
cluster: per policy the ratio (stint / Sia) of average JCT, makespan and CPU time.

Usage: python benchmarks/sim_vs_sia.py SIA_SIMULATOR [--python SIA_PYTHON]
       [--workload workloads/saturn/workload-1.csv] [--policies sia,gavel,pollux]
       [--ours singularity,oasis,pollux]

SIA_SIMULATOR is the ``sia-simulator`` folder of Sia's artifact; SIA_PYTHON an interpreter with
its packages (numpy 1.23, pandas, scipy, cvxpy with GLPK and CBC, pymoo 0.4.2.1 for Pollux).
Sia runs as its ``run_experiment.sh`` does (sia: p = -0.5, lambda_n = 1.1, 60 s rounds;
gavel: 360 s rounds; pollux: its heterogeneity-unaware simulator, p = -1, 60 s rounds) on its
default cluster (aws 6 x 4, dgx-ext 2 x 8, rtx 3 x 8 GPUs). stint runs the same workload on
the same node groups; each application's speed on a type is its single-GPU step time on aws
(the type its Pollux tables are measured on) over the type's, the median over the local batch
sizes both tables list. CPU time is the child process's user + system time, start-up included.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CLUSTER = {"aws": (6, 4), "dgx-ext": (2, 8), "rtx": (3, 8)}  # Sia's simulator_config defaults
SIA_ARGS = {
    "sia": ["multi_simulator.py", "--policy=sia", "--policy_p_val=-0.5", "--mip_lambda_a=0.01",
            "--mip_lambda_n=1.1", "--interval=60", "--project_throughput", "--share_max_replicas"],
    "gavel": ["multi_simulator.py", "--policy=gavel", "--interval=360"],
    "pollux": ["multi_simulator_unaware.py", "--policy=pollux", "--interval=60", "--policy_p_val=-1"],
}


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _makespan(rows: list[dict[str, str]], jcts: dict[str, float]) -> float:
    return max(float(r["time"]) + jcts[r["name"]] for r in rows) - min(float(r["time"]) for r in rows)


def run_sia(sim: Path, python: str, workload: Path, policy: str) -> dict[str, float]:
    rows = list(csv.DictReader(workload.open()))
    with tempfile.TemporaryDirectory() as tmp:
        wdir, out = Path(tmp) / "w", Path(tmp) / "out"
        wdir.mkdir()
        out.mkdir()
        shutil.copy(workload, wdir / workload.name)
        before = _child_cpu()
        subprocess.run([python, *SIA_ARGS[policy][:1], str(wdir), *SIA_ARGS[policy][1:], f"--output={out}"],
                       cwd=sim, capture_output=True, text=True, check=True)
        cpu = _child_cpu() - before
        jcts = json.loads((out / "summary.json").read_text())["jcts"][workload.stem]
    return {"avg_jct_s": statistics.fmean(jcts.values()), "makespan_s": _makespan(rows, jcts), "cpu_s": cpu}


def _step_times(path: Path) -> dict[int, float]:
    return {int(r["local_bsz"]): float(r["step_time"]) for r in csv.DictReader(path.open())
            if r["placement"].strip() == "1"}


def speeds(sim: Path, apps: set[str]) -> dict[str, dict[str, float]]:
    """Per application, per type: single-GPU step time on aws / on the type (median)."""
    out: dict[str, dict[str, float]] = {}
    for app in sorted(apps):
        ref = _step_times(sim / "traces" / app / "placements-aws.csv")
        out[app] = {}
        for kind in CLUSTER:
            t = _step_times(sim / "traces" / app / f"placements-{kind}.csv")
            common = [b for b in ref if b in t]
            out[app][kind] = statistics.median(ref[b] / t[b] for b in common) if common else 1.0
    return out


def cluster_file(sim: Path, apps: set[str]) -> str:
    lines: list[str] = []
    for kind, (nodes, per) in CLUSTER.items():
        lines += ["[[group]]", f'gpu_type = "{kind}"', f"nodes = {nodes}", f"gpus_per_node = {per}", ""]
    for app, per_type in speeds(sim, apps).items():
        lines.append(f"[speeds.{app}]")
        lines += [f'"{kind}" = {v:.4f}' for kind, v in per_type.items()]
        lines.append("")
    return "\n".join(lines)


def run_stint(sim: Path, workload: Path, policies: list[str]) -> dict[str, dict[str, float]]:
    apps = {r["application"] for r in csv.DictReader(workload.open())}
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "types.toml").write_text(cluster_file(sim, apps))
        for policy in policies:
            before = _child_cpu()
            subprocess.run(
                [sys.executable, "-c", "from stint.cli import main; main()", "sim", "--cluster",
                 f"{tmp}/types.toml", "--trace", str(workload), "--policy", policy, "--out", f"{tmp}/{policy}"],
                capture_output=True, text=True, check=True)
            cpu = _child_cpu() - before
            s = json.loads((Path(tmp) / policy / "summary.json").read_text())[policy]
            out[policy] = {"avg_jct_s": s["avg_jct_s"], "makespan_s": s["makespan_s"], "cpu_s": cpu,
                           "done": s.get("done", float("nan"))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sia", type=Path, help="Sia's sia-simulator folder")
    ap.add_argument("--python", default=sys.executable, help="the interpreter for Sia's simulator")
    ap.add_argument("--workload", default="workloads/saturn/workload-1.csv", help="relative to SIA_SIMULATOR")
    ap.add_argument("--policies", default="sia,gavel,pollux", help="run by both simulators")
    ap.add_argument("--ours", default="singularity,oasis", help="stint's own policies, run beside")
    args = ap.parse_args()
    workload = (args.sia / args.workload).resolve()
    both = [p for p in args.policies.split(",") if p]
    ours = [p for p in args.ours.split(",") if p and p not in both]
    mine = run_stint(args.sia.resolve(), workload, both + ours)  # first: seconds, so a failure costs no Sia run
    theirs = {p: run_sia(args.sia.resolve(), args.python, workload, p) for p in both}
    print(f"workload {args.workload}, cluster " + ", ".join(f"{k} {n} x {g}" for k, (n, g) in CLUSTER.items()))
    print(f"{'policy':12}{'metric':14}{'Sia':>10}{'stint':>10}{'stint/Sia':>11}")
    for p in both:
        for key, name, unit in (("avg_jct_s", "avg JCT (h)", 3600), ("makespan_s", "makespan (h)", 3600),
                                ("cpu_s", "CPU (s)", 1)):
            g, s = theirs[p][key], mine[p][key]
            print(f"{p:12}{name:14}{g / unit:10.3f}{s / unit:10.3f}{s / g:11.3f}")
        print(f"{'':12}{'Sia/stint CPU':14}{theirs[p]['cpu_s'] / mine[p]['cpu_s']:31.1f}x")
    for p in ours:
        m = mine[p]
        print(f"{p:12}avg JCT {m['avg_jct_s'] / 3600:.3f} h, makespan {m['makespan_s'] / 3600:.3f} h, "
              f"CPU {m['cpu_s']:.2f} s (stint only)")


if __name__ == "__main__":
    main()
