"""A writer SIGKILLed in the middle of a checkpoint never leaves one that loads as valid but corrupt.

The writer is a forked child (no second torch import: the test stays fast); it builds its tensors
with NumPy so that it never touches an OpenMP pool inherited across fork.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch_helpers import write_shared

from stint.torch.store import CheckpointStore

N = 4 << 20  # 16 MiB per checkpoint: a blob write takes long enough to be caught in the middle


def _state(step: int) -> dict:
    return {
        "a": torch.from_numpy(np.full(N, float(step), dtype=np.float32)),
        "b": torch.from_numpy(np.full(1000, step, dtype=np.int64)),
        "step": step,
    }


def _write_forever(root: Path, writers: int = 1) -> None:
    latest = CheckpointStore(root, keep=2).checkpoints()
    step = latest[0].step + 1 if latest else 1
    while True:
        if writers == 1:
            CheckpointStore(root, keep=2).save(step, _state(step))
        else:  # writer threads sharing each checkpoint, as the workers of a job do
            state = _state(step)
            private = {"step": state.pop("step")}
            results = write_shared(root, step, [state] * writers, private)
            assert not any(isinstance(r, Exception) for r in results), results
        step += 1


def _temp_files(root: Path) -> list[Path]:
    return list(root.rglob(".tmp-*")) if root.exists() else []


def _kill_when(root: Path, trigger: Callable[[Path], bool], timeout: float = 20.0, writers: int = 1) -> bool:
    """Fork a writer, SIGKILL it as soon as ``trigger(root)`` holds; True if the trigger fired."""
    pid = os.fork()
    if pid == 0:  # child
        try:
            _write_forever(root, writers)
        finally:
            os._exit(1)
    deadline, fired = time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        if trigger(root):
            fired = True
            break
        time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return fired


def _check_every_listed_checkpoint_is_whole(root: Path) -> int:
    store = CheckpointStore(root, keep=2)
    found = store.checkpoints()
    for ckpt in found:
        state = store.load(ckpt)  # verifies every blob's hash
        assert state["step"] == ckpt.step
        assert torch.equal(state["a"], _state(ckpt.step)["a"])
        assert torch.equal(state["b"], _state(ckpt.step)["b"])
    return len(found)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # renamed or deleted since it was listed
        return 0


def _checkpoint_files(root: Path) -> set[str]:
    return {p.name for p in root.glob("step-*")} if root.exists() else set()


def _after_next_checkpoint(seen: set[str], delay: float) -> Callable[[Path], bool]:
    """A trigger that holds ``delay`` seconds after a checkpoint not in ``seen`` appears."""
    marks: list[float] = []

    def trigger(root: Path) -> bool:
        if not marks and _checkpoint_files(root) - seen:
            marks.append(time.monotonic())
        return bool(marks) and time.monotonic() - marks[0] > delay

    return trigger


def test_sigkill_during_writes_leaves_only_whole_checkpoints(tmp_path):
    # 1. Killed while a checkpoint is being written (its temp file exists). The rename may win the
    #    race with the kill now and then: try until a half-written temp file is really left behind.
    for _ in range(5):
        assert _kill_when(tmp_path, lambda r: bool(_temp_files(r)))
        _check_every_listed_checkpoint_is_whole(tmp_path)
        if _temp_files(tmp_path):
            break
    assert _temp_files(tmp_path), "no kill left a half-written temp file behind"
    # 2. Killed once the temp file has grown past the blobs (manifest and footer being written,
    #    fsync or rename under way), if the poll catches it.
    _kill_when(tmp_path, lambda r: any(_size(p) >= 4 * N for p in _temp_files(r)))
    _check_every_listed_checkpoint_is_whole(tmp_path)
    # 3. Killed at random moments after the writer's next checkpoint.
    rng = random.Random(5)
    for _ in range(3):
        assert _kill_when(tmp_path, _after_next_checkpoint(_checkpoint_files(tmp_path), rng.uniform(0.0, 0.2)))
        _check_every_listed_checkpoint_is_whole(tmp_path)
    # 4. The next writer cleans up what the killed ones left and goes on.
    store = CheckpointStore(tmp_path, keep=2)
    step = store.checkpoints()[0].step + 1
    store.save(step, _state(step))
    assert not _temp_files(tmp_path)
    assert _check_every_listed_checkpoint_is_whole(tmp_path) == 2


def _parts_without_manifest(root: Path) -> bool:
    """A worker's part is durable under its name, the checkpoint's manifest not yet committed."""
    steps = {p.name.split(".")[0] for p in root.glob("step-*.ckpt")} if root.exists() else set()
    return any(p.name.split(".")[0] not in steps for p in root.glob("step-*.part")) if root.exists() else False


def test_sigkill_during_a_shared_write_leaves_the_previous_checkpoint_valid(tmp_path):
    """Three writers share each checkpoint; the process is killed while parts are being written,
    between the parts and the manifest, and at random moments: only whole checkpoints list."""
    part_tmp = lambda r: any(".part-" in p.name for p in _temp_files(r))
    assert _kill_when(tmp_path, part_tmp, writers=3)
    _check_every_listed_checkpoint_is_whole(tmp_path)
    after_one = lambda r: any(r.glob("step-*.ckpt")) and _parts_without_manifest(r)
    for _ in range(5):  # the commit may win the race now and then
        if _kill_when(tmp_path, after_one, writers=3) and _parts_without_manifest(tmp_path):
            break
    assert _parts_without_manifest(tmp_path), "no kill landed between the parts and the manifest"
    assert _check_every_listed_checkpoint_is_whole(tmp_path) >= 1  # the previous one is valid
    rng = random.Random(7)
    for _ in range(2):
        assert _kill_when(tmp_path, _after_next_checkpoint(_checkpoint_files(tmp_path), rng.uniform(0.0, 0.2)),
                          writers=3)
        _check_every_listed_checkpoint_is_whole(tmp_path)
    store = CheckpointStore(tmp_path, keep=2)
    step = store.checkpoints()[0].step + 1
    state = _state(step)
    write_shared(tmp_path, step, [state] * 2, {"step": state.pop("step")})  # resumed on 2 writers
    assert not _temp_files(tmp_path) and not _parts_without_manifest(tmp_path)  # leftovers pruned
    assert _check_every_listed_checkpoint_is_whole(tmp_path) == 2
