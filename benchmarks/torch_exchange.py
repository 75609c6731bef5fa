"""stint.torch's exact gradient exchange against one all_reduce of the same gradients, on gloo.

Per configuration it starts P worker processes on 127.0.0.1 (same run, one after the other) and
times, per step, after a warm-up step:

- ``allreduce``: one ``dist.all_reduce`` of a flat gradient buffer, then the division by P (what
  DDP does with its buckets, minus the bucketing; the gradients are already in the buffer);
- ``sharded-sync``: the sharded exchange with each slice's all_to_all waited for before the next
  (``Exchange(overlap=False)``, the exchange before slices overlapped), for before/after figures;
- ``sharded`` / ``gathered``: stint's exact exchange (stint.torch.exchange): each hosted logical
  rank's gradients folded in (a copy into the flat buffer, as DDP copies into its buckets), then
  the left fold in logical-rank order, by an all_to_all per time slice + an all-gather, or by one
  all_gather.

Peak memory: the worker's peak RSS growth over its parameters and gradients (ru_maxrss).

    .venv/bin/python benchmarks/torch_exchange.py            # all configurations
    .venv/bin/python benchmarks/torch_exchange.py --quick    # 20 MB only
    .venv/bin/python benchmarks/torch_exchange.py --small    # 64 KiB to 4 MiB: sharded or gathered
    .venv/bin/python benchmarks/torch_exchange.py --anchors  # 2, 20, 200 MB at L = 4 and 8: the bar's
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from stint.torch import launch
from stint.torch.env import read_env, round_robin
from stint.torch.exchange import Exchange


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(modes: list[str], mb: float, rounds: int) -> None:
    """Time each mode per round, the modes in a rotating order within the round (same load for
    all); with one mode, its peak RSS growth is that mode's alone."""
    env = read_env()
    torch.set_num_threads(1)
    if env.world_size > 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{env.master_port}", rank=env.rank,
                                world_size=env.world_size, timeout=timedelta(seconds=600))
    n = int(mb * 2**20) // 32 * 8  # float32 values, in 8 tensors
    params = [torch.zeros(n // 8) for _ in range(8)]
    grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(env.rank)) for p in params]
    flat = torch.cat(grads)
    placement = [round_robin(w, env.world_size, env.logical_world_size) for w in range(env.world_size)]
    exchanges = {m: Exchange(params, placement, sharded=m.startswith("sharded"), overlap=m != "sharded-sync")
                 for m in modes if m != "allreduce"}
    base = _rss_mb()
    times: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(rounds + 1):
        for m in modes[r % len(modes):] + modes[: r % len(modes)]:
            if env.world_size > 1:
                dist.barrier()
            t0 = time.perf_counter()
            if m == "allreduce":
                if env.world_size > 1:
                    dist.all_reduce(flat)
                flat.div_(env.world_size)
            else:
                exchanges[m].start_step(reuse=True)  # what Job does after zero_grad()
                for lr in env.logical_ranks:
                    for p, g in zip(params, grads):
                        p.grad = g
                    exchanges[m].take(lr)
                exchanges[m].reduce(0)
            times[m].append(time.perf_counter() - t0)
    print(json.dumps({"rank": env.rank, "seconds": {m: statistics.median(t[1:]) for m, t in times.items()},
                      "extra_mb": _rss_mb() - base}), flush=True)
    if env.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()  # gloo's threads torn down before exit (else a rare abort)


def run(modes: list[str], mb: float, workers: int, logical: int, rounds: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", ",".join(modes), "--mb", str(mb), "--rounds", str(rounds)]
    procs = launch.start(cmd, workers, logical, None, stdout=subprocess.PIPE)
    outs = [json.loads(p.communicate()[0].decode().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{modes} {mb} MB: a worker failed")
    return {"seconds": {m: max(o["seconds"][m] for o in outs) for m in modes},
            "extra_mb": max(o["extra_mb"] for o in outs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--mb", type=float, default=20, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="20 MB only")
    p.add_argument("--small", action="store_true",
                   help="sharded against gathered for small models (where the switch should be)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-RSS runs (times only)")
    p.add_argument("--anchors", action="store_true",
                   help="the sharded exchange (chosen from 256 KiB) against one all_reduce at 2, 20 and "
                   "200 MB, L = 4 and 8 on 4 workers")
    a = p.parse_args()
    if a.worker:
        worker(a.worker.split(","), a.mb, a.rounds)
        return
    configs: list[tuple[float, int, int, list[str]]] = [
        (20, 4, 4, ["allreduce", "sharded", "gathered"]), (20, 4, 8, ["allreduce", "sharded"])]
    if a.small:
        configs = [(mb, 4, 4, ["allreduce", "sharded", "gathered"]) for mb in (0.0625, 0.25, 1, 4)]
    if a.anchors:
        configs = [(mb, 4, lws, ["allreduce", "sharded", "sharded-sync"]) for mb in (2, 20, 200) for lws in (4, 8)]
    if not (a.quick or a.small or a.anchors):
        configs += [(200, 4, 4, ["allreduce", "sharded"])]
    print("| gradients | P | L | exchange | ms/step (same run) | / all_reduce | peak RSS growth MB |")
    print("|---|---|---|---|---|---|---|")
    for mb, workers, lws, modes in configs:
        timed = run(modes, mb, workers, lws, a.rounds)["seconds"]
        for m in modes:
            memory = "" if a.no_memory else f"{run([m], mb, workers, lws, 2)['extra_mb']:.0f}"
            print(f"| {mb:g} MB | {workers} | {lws} | {m} | {1000 * timed[m]:.1f} | "
                  f"{timed[m] / timed['allreduce']:.2f} | {memory} |", flush=True)
    if not (a.quick or a.small or a.anchors):  # memory against L on one worker hosting every logical rank (no peers)
        for lws in (1, 2, 4, 8):
            memory = run(["sharded" if lws > 1 else "allreduce"], 100, 1, lws, 2)["extra_mb"]
            print(f"| 100 MB | 1 | {lws} | {'fold' if lws > 1 else 'none'} | | | {memory:.0f} |", flush=True)
        for lws in (4, 8):
            memory = run(["sharded"], 100, 4, lws, 2)["extra_mb"]
            print(f"| 100 MB | 4 | {lws} | sharded | | | {memory:.0f} |", flush=True)


if __name__ == "__main__":
    main()
