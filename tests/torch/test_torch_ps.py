"""Parameter-server training (stint.torch.ps) with real processes on CPU: synchronous mode
bitwise equal across worker and PS counts, through a stop and a resume at other counts (the
shards cut again); asynchronous mode trains, stops at a round every worker reaches, resumes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from builders import wait_for  # type: ignore[import-not-found]
from torch import nn

from stint.torch import ps

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "ps_cnn.py")


def test_shard_bounds_cover_the_vector_once() -> None:
    for numel, servers in ((10, 3), (7, 7), (5, 1), (1000, 4)):
        b = ps.shard_bounds(numel, servers)
        assert b[0][0] == 0 and b[-1][1] == numel
        assert all(b[k][1] == b[k + 1][0] for k in range(servers - 1))
        assert max(hi - lo for lo, hi in b) - min(hi - lo for lo, hi in b) <= 1


def test_the_update_has_the_same_bits_whatever_the_shard_cut() -> None:
    g = torch.Generator().manual_seed(3)
    p, buf, grad = (torch.randn(1001, generator=g) for _ in range(3))
    whole_p, whole_b = p.clone(), buf.clone()
    ps.sgd_momentum(whole_p, whole_b, grad, 0.05, 0.9)
    for servers in (2, 3, 7):
        parts_p, parts_b = p.clone(), buf.clone()
        for lo, hi in ps.shard_bounds(p.numel(), servers):
            sp, sb = parts_p[lo:hi].clone(), parts_b[lo:hi].clone()
            ps.sgd_momentum(sp, sb, grad[lo:hi], 0.05, 0.9)
            parts_p[lo:hi], parts_b[lo:hi] = sp, sb
        assert torch.equal(parts_p, whole_p) and torch.equal(parts_b, whole_b)


def test_a_model_with_buffers_is_refused() -> None:
    with pytest.raises(ValueError, match="BatchNorm"):
        ps.init(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), lr=0.1)


def test_bad_environment_is_named() -> None:
    with pytest.raises(ps.JobEnvError, match="W = 3"):
        ps.read_ps_env({"STINT_ROLE": "worker", "STINT_WORLD_SIZE": "3",
                        "STINT_LOGICAL_WORLD_SIZE": "4"}, None, None)
    with pytest.raises(ps.JobEnvError, match="STINT_ROLE"):
        ps.read_ps_env({"STINT_ROLE": "boss"}, None, None)


def _run(workers: int, servers: int, *args: str, ckpt: Path | None = None, logical: int = 4,
         stop_after: int | None = None) -> tuple[int, str]:
    """Run the example as a PS job; with ``stop_after``, SIGUSR1 to every worker once worker 0
    logged that step. Returns (exit code, worker 0's output)."""
    cmd = [sys.executable, EXAMPLE, *args]
    procs = ps.start_local(cmd, workers, servers, logical, ckpt, stdout=subprocess.PIPE)
    out = ""
    stdout = procs[0].stdout
    assert stdout is not None
    for raw in stdout:
        line = raw.decode()
        out += line
        if stop_after is not None and line.startswith(f"step {stop_after} "):
            for p in procs[:workers]:  # asynchronous workers may lag: each one's handler first
                wait_for(lambda p=p: _catches(p.pid, signal.SIGUSR1), 120, f"worker {p.pid} ready")
                p.send_signal(signal.SIGUSR1)
    codes = [p.wait(timeout=300) for p in procs]
    bad = [c for c in codes if c not in (0, ps.PREEMPTED_EXIT_CODE)]
    assert not bad, (codes, out)
    return (ps.PREEMPTED_EXIT_CODE if ps.PREEMPTED_EXIT_CODE in codes else 0), out


def _catches(pid: int, sig: int) -> bool:
    """True once process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _digest(out: str, steps: int) -> str:
    m = re.search(rf"^done step {steps} digest (\w+)$", out, re.MULTILINE)
    assert m, out
    return m.group(1)


@pytest.mark.slow
def test_sync_mode_is_bitwise_equal_across_counts_and_a_resize(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = 8
    code, ref = _run(1, 1, "--steps", str(steps))
    assert code == 0
    want = _digest(ref, steps)
    for w, p in ((2, 2), (4, 3)):
        assert _digest(_run(w, p, "--steps", str(steps))[1], steps) == want
    ck = tmp_path / "ck"
    code, first = _run(2, 1, "--steps", str(steps), "--sleep", "0.3", "--log-every", "1",
                       ckpt=ck, stop_after=2)
    assert code == ps.PREEMPTED_EXIT_CODE and "done step" not in first
    m = ps.newest_checkpoint(ck)
    assert m is not None and 2 <= m["round"] < steps and m["servers"] == 1
    status = tmp_path / "status.json"
    monkeypatch.setenv("STINT_STATUS_FILE", str(status))  # worker 0 reports there
    code, second = _run(4, 3, "--steps", str(steps), ckpt=ck)  # more workers, more PSs
    assert code == 0 and _digest(second, steps) == want
    report = json.loads(status.read_text())
    assert (report["state"], report["step"], report["total_steps"]) == ("finished", steps, steps)
    assert (report["world_size"], report["ps"]) == (4, 3)
    last = ps.newest_checkpoint(ck)
    assert last is not None and (last["round"], last["servers"]) == (steps, 3)


@pytest.mark.slow
def test_async_mode_trains_stops_at_one_round_and_resumes(tmp_path: Path) -> None:
    steps = 8
    ck = tmp_path / "ck"
    code, _ = _run(2, 2, "--mode", "async", "--steps", str(steps), "--sleep", "0.3",
                       "--log-every", "1", ckpt=ck, stop_after=2)
    assert code == ps.PREEMPTED_EXIT_CODE
    m = ps.newest_checkpoint(ck)
    assert m is not None and 2 <= m["round"] < steps
    code, second = _run(1, 3, "--mode", "async", "--steps", str(steps), ckpt=ck)
    assert code == 0 and f"done step {steps} digest" in second


def test_a_stop_file_asks_for_a_stop_before_any_signal(tmp_path: Path) -> None:
    # A stop requested while the process is still starting reaches it by the file only (its
    # supervisor signals a ready worker); without it the request waits out the grace period.
    stop = tmp_path / "stop-3"
    env = ps.read_ps_env({"STINT_ROLE": "ps", "STINT_PS_COUNT": "2", "STINT_PS_RANK": "1",
                          "STINT_STOP_FILE": str(stop)}, None, None)
    assert env.stop_file == stop and not env.stop_asked()
    stop.touch()
    assert env.stop_asked()
