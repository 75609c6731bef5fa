"""Real worker processes over gloo on 127.0.0.1: consistent cut, resize 4->2->4 and 4->1, migration.

The job is examples/ddp.py (a CNN with BatchNorm, SGD with momentum) with L = 4 logical ranks. The
test plays the executor: it starts P workers with the STINT_* environment, sends SIGUSR1 to all of
them, expects exit code 75 from each, and restarts the job with another P or placement. Workers
are forked from a warm fork server (one torch import for all) to keep the test fast.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from stint.torch import launch
from stint.torch.store import CheckpointStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp.py"
STEPS = 14
ARGS = ["--model", "cnn", "--steps", str(STEPS), "--batch-size", "32", "--log-every", "1", "--sleep", "0.05"]


def run_job(workers: int, ckpt: Path, out: Path, stop_after: int | None = None, placement=None,
            signalled=None):
    """Run the job on ``workers`` processes; SIGUSR1 the ranks in ``signalled`` (default: all) once
    rank 0 logged step ``stop_after``.

    Returns (every worker's exit code, {step: parameter digest} logged by rank 0).
    """
    extra = [{"STINT_LOGICAL_RANKS": ",".join(map(str, r))} for r in placement] if placement else None
    outs = [out.with_suffix(f".{r}.txt") for r in range(workers)]
    procs = launch.start_warm(EXAMPLE, ARGS, workers, 4, ckpt, extra_env=extra, stdout=outs)
    digests: dict = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = all(p.poll() is not None for p in procs)
        lines = outs[0].read_text().splitlines() if outs[0].exists() else []
        digests = _parse(lines)
        if stop_after is not None and max((s for s in digests if s != "done"), default=0) >= stop_after:
            stop_after = None
            for r, p in enumerate(procs):
                if signalled is None or r in signalled:
                    p.send_signal(signal.SIGUSR1)
        if done:
            break
        time.sleep(0.01)
    launch.wait(procs)
    return [p.poll() for p in procs], digests


def _parse(lines: list[str]) -> dict:
    words = [line.split() for line in lines if line.endswith(tuple("0123456789abcdef"))]
    return {(int(w[1]) if w[0] == "step" else "done"): w[3] for w in words if len(w) == 4}


def run_in_process(ckpt: Path, monkeypatch) -> dict:
    """P = 1 in this (already warm) process: the same code path as one worker, minus a torch import."""
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), *ARGS])
    for name, value in launch.worker_env(0, 1, 4, ckpt, launch.free_port(), base={}).items():
        monkeypatch.setenv(name, value)  # the executor's environment for a single worker
    import ddp

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ddp.main()
    return _parse(out.getvalue().splitlines())


def _writers(ckpt: Path) -> tuple[int, set[str]]:
    """How many workers wrote the newest checkpoint, and the files its blobs are in."""
    manifest = CheckpointStore(ckpt).checkpoints()[0].manifest
    return manifest["writers"], {loc["file"] for loc in manifest["blobs"].values()}


def _newest_checkpoint(ckpt: Path) -> int:
    return CheckpointStore(ckpt).checkpoints()[0].step


@pytest.fixture(scope="module", autouse=True)
def _fork_server():
    yield
    launch.stop_warm()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    with pytest.MonkeyPatch.context() as mp:
        return run_in_process(tmp_path_factory.mktemp("ref"), mp)  # never resized: P = 1 hosts all 4


def test_resize_4_2_4_and_4_1_and_migration_follow_the_unresized_run_bitwise(tmp_path, reference, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    codes, first = run_job(4, a, tmp_path / "p1", stop_after=3)
    assert codes == [75] * 4
    (cut,) = [c.step for c in CheckpointStore(a).checkpoints()]  # one checkpoint for the job
    assert 4 <= cut <= 6 and max(first) == cut  # stopped within two steps of the request
    assert _writers(a) == (4, {f"step-{cut:012d}.ckpt"} | {f"step-{cut:012d}.w{w}.part" for w in (1, 2, 3)})
    shutil.copytree(a, b)  # migration: the checkpoint moves to "another node"
    # 4 -> 2, with the logical ranks placed the other way round on the two workers; only rank 1
    # is asked to stop: the agreement on the step's collective stops rank 0 at the same boundary.
    codes, second = run_job(2, a, tmp_path / "p2", stop_after=cut + 3, placement=[(2, 3), (0, 1)],
                            signalled={1})
    assert codes == [75, 75]
    cut2 = _newest_checkpoint(a)
    assert cut < cut2 < STEPS and max(second) == cut2
    assert _writers(a) == (2, {f"step-{cut2:012d}.ckpt", f"step-{cut2:012d}.w1.part"})  # 4 -> 2 resumed, 2 wrote
    codes, third = run_job(4, a, tmp_path / "p3")  # 2 -> 4
    assert codes == [0] * 4
    assert {**first, **second, **third} == reference
    single = run_in_process(b, monkeypatch)  # 4 -> 1 on the migrated copy
    assert single == {s: d for s, d in reference.items() if s == "done" or s > cut}
