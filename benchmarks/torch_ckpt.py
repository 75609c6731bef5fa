"""stint.torch checkpoint costs for 10 MB, 100 MB and 1 GB of training state.

For each size, in one run:
1. the disk's sequential write speed (the same tensor bytes written into one file in writes of at
   most 8 MiB, each followed by a write-back hint, fsynced once, same directory);
2. a checkpoint write of that much state (CheckpointStore.save: hash, write, fsync, rename),
   as MB/s and as a fraction of (1) (five alternating rounds after a warm-up write; medians, and
   the median checkpoint against the fastest disk round as a conservative ratio); then the same
   state saved again (all deduplicated) and loaded with every hash verified;
3. preemption latency: a real worker process (`python this_file --worker`) training a model with
   that much state (parameters + SGD momentum) gets SIGUSR1; time until the process has exited
   with code 75 (finish the step, write the checkpoint, exit);
4. resume latency: a new worker process from spawn to its first step done, split into interpreter
   and imports, building the model, stint.init (finding, reading and verifying the checkpoint), and
   the first step; cold (a fresh interpreter) and warm (forked from a fork server that has already
   imported torch: what an executor with a warm pool would get).
Also: the first and the next checkpoint of a fine-tuning job with all but one layer frozen
(deduplicated blobs: the incremental checkpoint writes only what changed), and the cost per step
of periodic checkpoints written synchronously or in the background (snapshot, then a thread).

Run:  .venv/bin/python benchmarks/torch_ckpt.py [--sizes 10,100,1000] [--dir /tmp/...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stint.torch import codec, launch
from stint.torch.store import CheckpointStore

T_SPAWN = time.time()  # the worker's own clock origin (the parent passes its spawn time too)
MB = 1_000_000
WIDTH = 2048  # Linear(2048, 2048) = 16.8 MB of float32 parameters (+ the same in momentum)


def disk_write_speed(directory: Path, views: list[memoryview]) -> float:
    """Bytes per second for writing ``views`` back to back into one file, fsynced once.

    The same bytes as the checkpoint (the tensors' own buffers, not a cache-hot repeated chunk),
    in writes of at most 8 MiB, each followed by a hint to start writing it back, in the same
    directory: the disk's sequential write speed for exactly this data, with one fsync.
    """
    path = directory / "disk-speed.bin"
    nbytes = sum(len(v) for v in views)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        offset = 0
        for view in views:
            view = view.cast("B")
            while view:
                n = os.write(fd, view[: 8 << 20])
                # The same write-back hint the store gives: without it the device idles until the
                # fsync, and a checkpoint that gives it would beat "the disk" (up to 128% at 100 MB).
                os.posix_fadvise(fd, offset, n, os.POSIX_FADV_DONTNEED)
                offset += n
                view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - t0
    path.unlink()
    return nbytes / seconds


def build(state_mb: float):
    """A model whose parameters plus SGD momentum hold about ``state_mb`` MB."""
    import torch
    from torch import nn

    per_layer = 2 * (WIDTH * WIDTH + WIDTH) * 4
    layers = max(1, round(state_mb * MB / per_layer))
    if state_mb * MB < per_layer:  # small sizes: one narrower layer
        width = int((state_mb * MB / 8) ** 0.5)
        model = nn.Sequential(nn.Linear(width, width))
    else:
        model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(layers)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    return model, opt


def worker(args: argparse.Namespace) -> None:
    """A training process: report timings as JSON lines on stdout."""
    t_imported0 = time.time()
    import torch
    import torch._dynamo  # imported by the first optimizer anyway: counted with the imports

    import stint.torch as stint

    torch.set_num_threads(1)
    t_imported = time.time()
    model, opt = build(args.mb)
    t_built = time.time()
    job = stint.init(model=model, optimizer=opt, final_checkpoint=False)
    t_init = time.time()
    width = model[0].in_features
    x = torch.randn(4, width)
    for step in job.steps(10**9):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        if step == job.checkpoint_step or (job.checkpoint_step is None and step == 0):
            print(json.dumps({"first_step": time.time(), "start": T_SPAWN, "imports": t_imported - t_imported0,
                              "imported": t_imported, "built": t_built, "init": t_init, "step": step}),
                  flush=True)


def spawn_worker(mb: float, ckpt: Path, warm: bool = False) -> tuple[Any, float, Callable[[], str]]:
    """Start a worker, cold (``python this_file``) or warm (forked from a preloaded fork server).

    Returns the process, its spawn time, and a function that blocks for its next stdout line.
    """
    argv = ["--worker", "--mb", str(mb)]
    if warm:
        out = ckpt.parent / f"warm-{mb:g}-{time.monotonic_ns()}.txt"
        t = time.time()
        (proc,) = launch.start_warm(__file__, argv, 1, 1, ckpt, stdout=[out])

        def next_line() -> str:
            while not out.exists() or not out.read_text().endswith("\n"):
                time.sleep(0.005)
            return out.read_text().splitlines()[0]

        return proc, t, next_line
    env = dict(os.environ, STINT_CKPT_DIR=str(ckpt), STINT_JOB_ID=f"bench-{mb:g}")
    t = time.time()
    popen = subprocess.Popen([sys.executable, __file__, *argv], env=env, stdout=subprocess.PIPE, text=True)
    return popen, t, popen.stdout.readline  # type: ignore[union-attr]


def _resume(mb: float, ckpt: Path, warm: bool) -> dict[str, float]:
    proc, t_spawn, next_line = spawn_worker(mb, ckpt, warm)
    first = json.loads(next_line())
    proc.kill()
    proc.wait() if hasattr(proc, "wait") else launch.wait([proc])
    return {
        "resume": first["first_step"] - t_spawn,
        "python_and_imports": first["imported"] - t_spawn,
        "build_model": first["built"] - first["imported"],
        "init_load": first["init"] - first["built"],
        "first_step": first["first_step"] - first["init"],
    }


def preempt_and_resume(mb: float, ckpt: Path) -> dict[str, Any]:
    """One cold start and a preemption, then a cold and a warm resume; latencies in seconds."""
    proc, _, next_line = spawn_worker(mb, ckpt)
    json.loads(next_line())  # first step done: now in steady state
    time.sleep(0.5)
    t_signal = time.time()
    proc.send_signal(signal.SIGUSR1)
    proc.wait()
    t_gone = time.time()
    if proc.returncode != 75:
        raise SystemExit(f"worker exited with {proc.returncode}, expected 75")
    (newest,) = CheckpointStore(ckpt).checkpoints()[:1]
    return {
        "preempt": t_gone - t_signal,
        "preempt_cut": newest.manifest["meta"]["cut_at"] - t_signal,
        "preempt_committed": newest.manifest["created"] - t_signal,
        "cold": _resume(mb, ckpt, warm=False),
        "warm": [_resume(mb, ckpt, warm=True) for _ in range(2)][-1],  # the first starts the server
    }


def write_throughput(mb: float, directory: Path, rounds: int = 5) -> dict[str, float]:
    import torch

    torch.manual_seed(0)
    model, opt = build(mb)
    for p in model.parameters():  # momentum buffers exist after one step
        p.grad = torch.randn_like(p)
    opt.step()
    state = {"model": model.state_dict(), "opt": opt.state_dict()}
    views = [codec.tensor_bytes(t) for t in codec.split(state)[1]]
    nbytes = sum(len(v) for v in views)
    disk_write_speed(directory, views)  # warm-up: the first write after a while is often slow
    disks, saves, hashes = [], [], []
    store = CheckpointStore(directory / "store", keep=2)

    def save() -> None:
        # A fresh store each round, as after a step of training: every tensor counts as changed and
        # is written while it is hashed. A store that saw these very tensors unchanged would hash
        # them first (they may be deduplicated), which is the re-save figure below.
        nonlocal first, store
        shutil.rmtree(directory / "store", ignore_errors=True)
        store = CheckpointStore(directory / "store", keep=2)
        first = store.save(1, state)
        saves.append(first.bytes_total / first.seconds)

    first = None
    for i in range(rounds):  # interleaved, alternating which goes first: the disk's speed drifts
        t0 = time.perf_counter()
        for view in views:  # the CPU ceiling right now: SHA-256 of the same bytes, one thread
            hashlib.sha256(view).digest()
        hashes.append(nbytes / (time.perf_counter() - t0))
        for run in ((lambda: disks.append(disk_write_speed(directory, views))), save)[:: 1 if i % 2 else -1]:
            run()
    assert first is not None
    again = store.save(2, state)
    t0 = time.perf_counter()
    store.load_latest()
    load = time.perf_counter() - t0
    shutil.rmtree(directory / "store")
    disk, ckpt = statistics.median(disks), statistics.median(saves)
    return {
        "state_MB": first.bytes_total / MB,
        "disk_MBps": disk / MB,
        "disk_max_MBps": max(disks) / MB,
        "ckpt_MBps": ckpt / MB,
        "fraction": ckpt / disk,
        "fraction_of_max": ckpt / max(disks),
        "sha256_MBps": statistics.median(hashes) / MB,
        "resave_written_MB": again.bytes_written / MB,
        "resave_s": again.seconds,
        "load_verify_s": load,
    }


def incremental(directory: Path, layers: int = 30) -> str:
    """Fine-tuning: every layer but the last frozen. First checkpoint versus the next one, saved
    directly and as a background checkpoint saves (copies of the tensors, plus the originals)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(layers)])
    for p in model[:-1].parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4, momentum=0.9)
    x = torch.randn(4, WIDTH)
    lines = []
    for mode in ("direct", "background copy"):
        store = CheckpointStore(directory / "incremental", keep=2)
        sizes = []
        for step in (1, 2):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            state = {"model": model.state_dict(), "opt": opt.state_dict()}
            if mode == "direct":
                sizes.append(store.save(step, state))
            else:  # what Job does with background=True
                skeleton, tensors = codec.split(state)
                copy = codec.join(skeleton, [t.detach().clone() for t in tensors])
                sizes.append(store.save(step, copy, sources=tensors))
        shutil.rmtree(directory / "incremental")
        first, second = sizes
        lines.append(f"incremental checkpoint ({mode}), {layers - 1} of {layers} layers frozen: first "
                     f"{first.bytes_written / MB:.0f} MB written in {first.seconds:.2f} s, next "
                     f"{second.bytes_written / MB:.0f} MB of {second.bytes_total / MB:.0f} MB in "
                     f"{second.seconds:.2f} s ({first.bytes_written / second.bytes_written:.0f}x smaller)")
    return "\n".join(lines)


def periodic(directory: Path, mb: float = 100.0, checkpoints: int = 5) -> str:
    """How long a periodic checkpoint blocks training: synchronous write versus background."""
    import torch

    import stint.torch as stint

    torch.set_num_threads(1)
    stalls: dict[str, list[float]] = {}
    for name, background in [("synchronous", False), ("background", True)]:
        model, opt = build(mb)
        x = torch.randn(4, model[0].in_features)
        job = stint.init(model=model, optimizer=opt, ckpt_dir=directory / f"periodic-{name}",
                         interval=stint.Interval(steps=3), background=background, final_checkpoint=False)
        stalls[name] = []
        for step in job.steps(3 * checkpoints + 1):
            if step % 3 == 0 and step > 0:
                stalls[name].append(job.checkpoint_stall or 0.0)
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        shutil.rmtree(directory / f"periodic-{name}", ignore_errors=True)
    sync, bg = (statistics.median(stalls[k]) for k in ("synchronous", "background"))
    return (f"periodic checkpoint of {mb:g} MB, training blocked per checkpoint (median of {checkpoints}): "
            f"synchronous {sync:.2f} s, background {bg:.2f} s (snapshot; the write overlaps training)")


def _phases(r: dict[str, float]) -> str:
    return (f"{r['resume']:.2f} s ({r['python_and_imports']:.2f} / {r['build_model']:.2f} / "
            f"{r['init_load']:.2f} / {r['first_step']:.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mb", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="10,100,1000", help="state sizes in MB")
    p.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    p.add_argument("--incremental-only", action="store_true",
                   help="only the frozen-layers and periodic-checkpoint figures")
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    base = Path(tempfile.mkdtemp(prefix="stint-ckpt-bench-", dir=a.dir))
    try:
        print(incremental(base), flush=True)
        print(periodic(base), flush=True)
        if a.incremental_only:
            return
        print("| state | disk seq. write, median (max) | SHA-256, 1 thread | checkpoint write, median "
              "| fraction (of max) | re-save (dedup) | load+verify "
              "| preemption latency (cut reached / checkpoint committed) | resume, cold | resume, warm |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for mb in (float(s) for s in a.sizes.split(",")):
            w = write_throughput(mb, base)
            r = preempt_and_resume(mb, base / f"job-{mb:g}")
            print(f"| {w['state_MB']:.0f} MB | {w['disk_MBps']:.0f} ({w['disk_max_MBps']:.0f}) MB/s "
                  f"| {w['sha256_MBps']:.0f} MB/s "
                  f"| {w['ckpt_MBps']:.0f} MB/s "
                  f"| {100 * w['fraction']:.0f}% ({100 * w['fraction_of_max']:.0f}%) "
                  f"| {w['resave_written_MB']:.0f} MB written, {w['resave_s']:.2f} s "
                  f"| {w['load_verify_s']:.2f} s | {r['preempt']:.2f} s "
                  f"({r['preempt_cut']:.2f} / {r['preempt_committed']:.2f} s) "
                  f"| {_phases(r['cold'])} | {_phases(r['warm'])} |", flush=True)
        print("resume = spawn to first step done: total (python+imports / build model / stint.init with "
              "checkpoint load / first step); warm = forked from a fork server with torch imported")
    finally:
        launch.stop_warm()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
