"""Checkpoints of 4 workers on gloo/CPU: stint's shared write against rank 0 writing alone and
against ``torch.distributed.checkpoint`` (``dcp.save``, ``dcp.async_save``), same run.

Four worker processes on 127.0.0.1, each holding the same state (a replicated model: parameters +
SGD momentum, benchmarks/torch_ckpt.py's ``build``). A round trains one step (every tensor
changes: nothing deduplicates) and takes one checkpoint with each mode, the modes in a rotating
order; every mode waits for the disk (fsync) and starts from a barrier. Per mode:

- ``stint shared``: every worker writes its share (``CheckpointStore.write`` over the job's
  checkpoint group), worker 0 commits the manifest once all parts are durable;
- ``stint rank 0``: rank 0 writes the whole state (``CheckpointStore.save``), the others wait;
- ``stint background``: what a periodic checkpoint does: each worker copies its share into kept
  buffers (the stall), then writes it on a thread;
- ``dcp.save`` / ``dcp.async_save`` (default planner: replicated tensors written once, spread over
  the ranks; ``FileSystemWriter`` fsyncs its files); async: the stall is until it returns.

"durable" is until every worker's write is on disk; "per writer" is the most bytes one worker wrote
(its files' sizes) over that time.

    .venv/bin/python benchmarks/torch_ckpt_shard.py --sizes 100,1000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_ckpt import build

from stint.torch import launch
from stint.torch.env import read_env
from stint.torch.peers import GroupPeers
from stint.torch.store import CheckpointStore

MODES = ["stint shared", "stint rank 0", "stint background", "dcp.save", "dcp.async_save"]
MB = 1e6


def _bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def _one(mode: str, step: int, state: dict[str, Any], base: Path, peers: GroupPeers,
         stores: dict[str, CheckpointStore], staging: dict[int, torch.Tensor]) -> tuple[float, float, int]:
    """(stall, durable, bytes this worker wrote) of one checkpoint in ``mode``."""
    rank = peers.rank
    dist.barrier()
    t0 = time.perf_counter()
    stall = None
    if mode == "stint shared":
        store = stores[mode]
        store.write(step, store.cut(state, writers=peers.size), {}, peers)
    elif mode == "stint rank 0":
        if rank == 0:
            stores[mode].save(step, state)
    elif mode == "stint background":
        store = stores[mode]
        snapshot = store.cut(state, writers=peers.size).staged(rank, staging)
        writer = threading.Thread(target=store.write, args=(step, snapshot, {}, peers))
        writer.start()
        stall = time.perf_counter() - t0
        writer.join()
    elif mode == "dcp.save":
        dcp.save(state, checkpoint_id=str(base / "dcp" / f"step-{step}"))
    else:
        future = dcp.async_save(state, checkpoint_id=str(base / "dcp-async" / f"step-{step}"))
        stall = time.perf_counter() - t0
        future.result()
    dist.barrier()  # durable on every worker
    durable = time.perf_counter() - t0
    if mode.startswith("stint"):
        root = stores[mode].root
        mine = list(root.glob(f"step-{step:012d}.w{rank}.part")) if rank else [root / f"step-{step:012d}.ckpt"]
    else:
        d = base / ("dcp" if mode == "dcp.save" else "dcp-async") / f"step-{step}"
        mine = list(d.glob(f"__{rank}_*.distcp"))
    return (durable if stall is None else stall), durable, _bytes(mine)


def worker(mb: float, rounds: int, base: Path) -> None:
    env = read_env()
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{env.master_port}", rank=env.rank,
                            world_size=env.world_size, timeout=timedelta(seconds=900))
    peers = GroupPeers(env.rank, env.world_size, 900)
    model, opt = build(mb)
    x = torch.randn(4, model[0].in_features, generator=torch.Generator().manual_seed(0))
    stores = {m: CheckpointStore(base / m.replace(" ", "-"), keep=1) for m in MODES if m.startswith("stint")}
    staging: dict[int, torch.Tensor] = {}
    out: dict[str, list[tuple[float, float, int]]] = {m: [] for m in MODES}
    for r in range(rounds):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()  # every parameter and momentum buffer changes
        state = {"model": model.state_dict(), "optim": opt.state_dict()}
        for m in MODES[r % len(MODES):] + MODES[: r % len(MODES)]:
            out[m].append(_one(m, r + 1, state, base, peers, stores, staging))
            dist.barrier()
            if env.rank == 0:  # only the newest of each kept: the disk holds what one round writes
                for d in ("dcp", "dcp-async"):
                    shutil.rmtree(base / d, ignore_errors=True)
            dist.barrier()
    state_bytes = sum(t.numel() * t.element_size() for t in [*model.state_dict().values()]
                      + [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)])
    print(json.dumps({"rank": env.rank, "state": state_bytes, "runs": out}), flush=True)
    peers.close()
    dist.barrier()
    dist.destroy_process_group()


def run(mb: float, rounds: int, workers: int, where: str | None) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="stint-shard-", dir=where))
    try:
        cmd = [sys.executable, __file__, "--worker", "--mb", str(mb), "--rounds", str(rounds), "--dir", str(base)]
        procs = launch.start(cmd, workers, workers, None, stdout=subprocess.PIPE)
        outs = [json.loads(p.communicate()[0].decode().splitlines()[-1]) for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"{mb} MB: a worker failed")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result: dict[str, Any] = {"state": outs[0]["state"]}
    for m in MODES:
        per_round = list(zip(*(o["runs"][m] for o in outs)))  # round -> every worker's figures
        result[m] = {
            "stall": statistics.median(max(w[0] for w in rnd) for rnd in per_round),
            "durable": statistics.median(max(w[1] for w in rnd) for rnd in per_round),
            "max_bytes": statistics.median(max(w[2] for w in rnd) for rnd in per_round),
            "writers": statistics.median(sum(1 for w in rnd if w[2] > 0) for rnd in per_round),
        }
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000", help="state sizes in MB (per worker: replicated)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mb", type=float, default=100, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.mb, a.rounds, Path(a.dir))
        return
    print("| state | mode | stall s | durable s | job MB/s | writers | most bytes one wrote MB | its MB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for mb in (float(s) for s in a.sizes.split(",")):
        r = run(mb, a.rounds, a.workers, a.dir)
        for m in MODES:
            f = r[m]
            print(f"| {r['state'] / MB:.0f} MB | {m} | {f['stall']:.3f} | {f['durable']:.3f} | "
                  f"{r['state'] / MB / f['durable']:.0f} | {f['writers']:g} | {f['max_bytes'] / MB:.0f} | "
                  f"{f['max_bytes'] / MB / f['durable']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
