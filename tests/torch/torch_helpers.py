"""Builders shared by the stint.torch tests: tiny models, bitwise digests, worker jobs."""

from __future__ import annotations

import signal
import threading
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


class ThreadPeers:
    """stint.torch.store.Peers for writers that are threads of one process (the tests' stand-in
    for the job's process group: the same protocol, real files)."""

    def __init__(self, rank: int, size: int, barrier: threading.Barrier, slots: list) -> None:
        self.rank, self.size, self._barrier, self._slots = rank, size, barrier, slots

    @classmethod
    def group(cls, size: int) -> list[ThreadPeers]:
        barrier, slots = threading.Barrier(size), [None] * size
        return [cls(r, size, barrier, slots) for r in range(size)]

    def gather(self, obj):
        self._slots[self.rank] = obj
        self._barrier.wait()
        out = list(self._slots) if self.rank == 0 else None
        self._barrier.wait()
        return out

    def broadcast(self, obj):
        if self.rank == 0:
            self._slots[0] = obj
        self._barrier.wait()
        out = self._slots[0]
        self._barrier.wait()
        return out


def write_shared(root: Path, step: int, states: Sequence[dict], private: dict | None = None,
                 keep: int = 2) -> list:
    """Write checkpoint ``step`` by len(states) writer threads (writer w cuts states[w]; writer 0
    adds ``private``); each thread's SaveStats, or the exception it raised."""
    from stint.torch.store import CheckpointStore

    peers = ThreadPeers.group(len(states))
    results: list = [None] * len(states)

    def run(w: int) -> None:
        store = CheckpointStore(root, keep=keep)
        try:
            cut = store.cut(states[w], private if w == 0 else None, writers=len(states))
            results[w] = store.write(step, cut, {"step": step}, peers[w])
        except Exception as e:  # noqa: BLE001 - returned to the test
            results[w] = e

    threads = [threading.Thread(target=run, args=(w,)) for w in range(len(states))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
