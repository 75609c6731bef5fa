"""The training stall of a periodic checkpoint: stint's background checkpoint against
``torch.distributed.checkpoint.async_save``, side by side in the same run (one CPU worker).

State = parameters + SGD momentum (benchmarks/torch_ckpt.py's ``build``: square Linear layers), or
with ``--tensor-mb T`` the same state in tensors of T MB each (parameters and momentum alike: many
small tensors with T = 0.0625, i.e. 64 KiB). A round trains a few
steps and takes one checkpoint with each, in alternating order; the stall is how long the training
thread is blocked (stint: ``job.checkpoint_stall``, the in-memory snapshot; dcp: until
``async_save`` returns, its staging), and "durable" is until the checkpoint is on disk (stint:
the write thread's ``SaveStats.seconds`` after the snapshot; dcp: until its future completes).
Each waits for its previous write before the next, as stint does (one write in flight).

    .venv/bin/python benchmarks/torch_ckpt_stall.py --sizes 100,1000 --rounds 3
    .venv/bin/python benchmarks/torch_ckpt_stall.py --sizes 300 --tensor-mb 0.0625,4,16 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_ckpt import build

import stint.torch as stint
from stint.torch import launch


class Tensors(torch.nn.Module):
    """Parameters of ``tensor_mb`` MB each, ``state_mb`` MB with their SGD momentum."""

    def __init__(self, state_mb: float, tensor_mb: float) -> None:
        super().__init__()
        count = max(1, round(state_mb / (2 * tensor_mb)))
        n = int(tensor_mb * 2**20) // 4
        self.ps = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(n) * 0.01) for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([p[:4].sum() for p in self.ps]).sum() * x.sum()


def measure(mb: float, rounds: int, base: Path, tensor_mb: float | None) -> dict[str, list[float]]:
    if tensor_mb is None:
        model, opt = build(mb)
        x = torch.randn(4, model[0].in_features)
    else:
        model = Tensors(mb, tensor_mb)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        x = torch.randn(4)
    job = stint.init(model=model, optimizer=opt, ckpt_dir=base / "stint", interval=stint.Interval(steps=2),
                     background=True, final_checkpoint=False, check_every=None)
    out: dict[str, list[float]] = {k: [] for k in ("stint stall", "stint durable", "dcp stall", "dcp durable")}
    for step in job.steps(2 * rounds + 1):
        if step % 2 == 0 and step > 0:  # the boundary just took stint's background checkpoint
            out["stint stall"].append(job.checkpoint_stall or 0.0)
            job.wait_for_checkpoint()  # durable before dcp starts: the two never share the disk
            out["stint durable"].append(out["stint stall"][-1] + (job.last_save.seconds if job.last_save else 0.0))
            t0 = time.perf_counter()
            future = dcp.async_save({"model": model.state_dict(), "optim": opt.state_dict()},
                                    checkpoint_id=str(base / "dcp" / f"step-{step}"))
            out["dcp stall"].append(time.perf_counter() - t0)
            future.result()
            out["dcp durable"].append(time.perf_counter() - t0)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000", help="state sizes in MB")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    p.add_argument("--tensor-mb", default=None,
                   help="comma-separated tensor sizes in MB (default: the square Linear layers)")
    a = p.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{launch.free_port()}", rank=0, world_size=1)
    print("| state | tensors | stint stall | dcp.async_save stall | stint / dcp | stint durable | dcp durable |")
    print("|---|---|---|---|---|---|---|")
    shapes = [None] if a.tensor_mb is None else [float(t) for t in a.tensor_mb.split(",")]
    for mb in (float(s) for s in a.sizes.split(",")):
        for tensor_mb in shapes:
            base = Path(tempfile.mkdtemp(prefix="stint-stall-", dir=a.dir))
            try:
                r = {k: statistics.median(v) for k, v in measure(mb, a.rounds, base, tensor_mb).items()}
            finally:
                shutil.rmtree(base, ignore_errors=True)
            what = "Linear layers" if tensor_mb is None else f"{tensor_mb:g} MB each"
            print(f"| {mb:g} MB | {what} | {r['stint stall']:.3f} s | {r['dcp stall']:.3f} s "
                  f"| {r['stint stall'] / r['dcp stall']:.2f} | {r['stint durable']:.2f} s "
                  f"| {r['dcp durable']:.2f} s |", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
