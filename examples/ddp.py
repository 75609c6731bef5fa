"""Data-parallel training over gloo on 127.0.0.1: P worker processes host L logical ranks.

The training script is examples/cnn.py or examples/mlp.py, unchanged: the same five stint lines
make it a multi-process job. Alone, this file launches P workers of it (like torchrun) and
forwards SIGUSR1/SIGTERM to them:

    python examples/ddp.py --workers 2 --logical 4 --model cnn --ckpt-dir /tmp/ddp-ckpt --log-every 10

Under stint (STINT_RANK set by the executor) this process is one worker. Gradients of the L
logical ranks are reduced by stint in a fixed order (do not wrap the model in
DistributedDataParallel as well), so the result is bitwise the same for any P dividing L.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

from stint.torch import launch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="workers to launch when run alone")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--logical", type=int, default=None, help="logical ranks (default: --workers)")
    p.add_argument("--ckpt-dir", default=None)
    args, rest = p.parse_known_args()
    script = str(Path(__file__).with_name(f"{args.model}.py"))
    if "STINT_RANK" in os.environ:  # started by stint's executor: be one worker
        sys.argv = [script, *rest]
        runpy.run_path(script, run_name="__main__")
        return
    logical = args.logical or args.workers
    cmd = [sys.executable, script, *rest]
    sys.exit(launch.run(cmd, args.workers, logical, args.ckpt_dir))


if __name__ == "__main__":
    main()
