"""Checkpoint write throughput: the store at a git revision against the working tree's, side by side.

For 10, 100 and 1000 MB of state (the states of benchmarks/torch_ckpt.py), several rounds, each running
the disk test (the same bytes, one file, one fsync), a save with the old store and a save with the
current store in a rotated order (--rounds, default 9); prints medians in MB/s and as a fraction of the disk's median.

Run:  .venv/bin/python benchmarks/torch_ckpt_ab.py [--rev 7b2d504] [--sizes 10,100,1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from torch_ckpt import build, disk_write_speed

from stint.torch import codec
from stint.torch import store as new_store


def old_store(rev: str, directory: Path):
    """The module ``stint.torch.store`` as it was at ``rev``."""
    source = subprocess.run(["git", "show", f"{rev}:src/stint/torch/store.py"], check=True,
                            capture_output=True, text=True, cwd=Path(__file__).parent).stdout
    path = directory / "old_store.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("stint_old_store", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["stint_old_store"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="7b2d504", help="git revision of the old store")
    p.add_argument("--sizes", default="10,100,1000", help="state sizes in MB")
    p.add_argument("--rounds", type=int, default=9, help="rounds per size (each runs all three once)")
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    a = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stint-ckpt-ab-", dir=a.dir))
    try:
        stores = {"old": old_store(a.rev, base), "new": new_store}
        for mb in (float(s) for s in a.sizes.split(",")):
            torch.manual_seed(0)
            model, opt = build(mb)
            for param in model.parameters():
                param.grad = torch.randn_like(param)
            opt.step()
            state = {"model": model.state_dict(), "opt": opt.state_dict()}
            views = [codec.tensor_bytes(t) for t in codec.split(state)[1]]
            disk_write_speed(base, views)  # warm-up
            speeds: dict[str, list[float]] = {"disk": [], "old": [], "new": []}
            for r in range(a.rounds):
                for name in (["disk", "old", "new"] * 2)[r % 3 : r % 3 + 3]:
                    if name == "disk":
                        speeds[name].append(disk_write_speed(base, views) / 1e6)
                        continue
                    shutil.rmtree(base / "store", ignore_errors=True)
                    stats = stores[name].CheckpointStore(base / "store").save(1, state)
                    speeds[name].append(stats.bytes_total / stats.seconds / 1e6)
            m = {k: statistics.median(v) for k, v in speeds.items()}
            print(f"{mb:g} MB: disk {m['disk']:.0f} MB/s | {a.rev} {m['old']:.0f} MB/s "
                  f"({100 * m['old'] / m['disk']:.0f}%) | now {m['new']:.0f} MB/s "
                  f"({100 * m['new'] / m['disk']:.0f}%)", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
