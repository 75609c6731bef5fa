"""Builders shared by the stint.torch tests: tiny models, bitwise digests, worker jobs."""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from stint.torch import launch

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def digest(model: nn.Module) -> tuple[bytes, ...]:
    """Every parameter and buffer's raw bytes: equal digests mean bitwise-equal models."""
    return tuple(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                 for t in model.state_dict().values())


def dropout_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))


def data(n: int = 96, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def logged_steps(text: str) -> list[int]:
    """The N of every ``step N ...`` line."""
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith("step ")]


def run_workers(script: str | Path, argv: Sequence[str], workers: int, logical: int, ckpt: Path | None,
                out: Path, timeout: float = 120.0, stop_after: int | None = None,
                signum: int = signal.SIGTERM) -> tuple[list[int], list[str]]:
    """Run ``script`` on ``workers`` warm-forked processes; their exit codes and stdout texts.

    ``stop_after``: send ``signum`` to every worker once worker 0 logged ``step N`` with N >= it.
    """
    outs = [out.with_suffix(f".{r}.txt") for r in range(workers)]
    procs = launch.start_warm(script, list(argv), workers, logical, ckpt, stdout=outs)
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if stop_after is not None and outs[0].exists() and max(logged_steps(outs[0].read_text()),
                                                                default=-1) >= stop_after:
            stop_after = None
            for p in procs:
                p.send_signal(signum)
        time.sleep(0.01)
    launch.wait(procs, grace=2.0)
    return [p.poll() or 0 for p in procs], [o.read_text() if o.exists() else "" for o in outs]
