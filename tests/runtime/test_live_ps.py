"""stint.torch.ps jobs under a real ``stint serve``.

- ``stint submit --ps 2`` under a policy that places no PSs: two parameter servers start beside
  its first worker; resized from 2 workers to 1 mid-run, it ends with the digest of a run at a
  fixed size (synchronous mode is bitwise across worker and PS counts).
- Under ``--policy oasis`` on a cluster with a node of role "ps": OASiS places each job's
  workers and PSs per slot, the controller launches the PSs where the plan puts them and changes
  both counts at slot boundaries through a checkpoint, as a resize; the job whose payoff is not
  positive is rejected."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import ServeProc, final_digest, kill_leftover_workers, wait_for

from stint.runtime.store import Store, load_alloc
from stint.runtime.tables import Decision, Transition

ROOT = Path(__file__).resolve().parents[2]
PS_CNN = str(ROOT / "examples" / "ps_cnn.py")


@pytest.mark.slow
def test_ps_job_resized_under_serve_ends_with_the_fixed_size_digest(tmp_path: Path) -> None:
    steps = 30
    reference = subprocess.run(
        [sys.executable, "-m", "stint.torch.ps", "--workers", "1", "--ps", "1", "--logical", "2",
         PS_CNN, "--steps", str(steps)], capture_output=True, text=True, timeout=300,
        check=True).stdout
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}")
    serve.start()
    try:
        job = int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--max-gpus", "2",
                            "--logical-ranks", "2", "--ps", "2",
                            "--env", f"PYTHONPATH={ROOT / 'src'}",  # this tree's stint.torch
                            "--", sys.executable, PS_CNN,
                            "--steps", str(steps), "--sleep", "0.2", "--log-every", "5"))
        log_path = serve.jobs_dir / str(job) / "log.txt"
        wait_for(lambda: log_path.exists() and "step 5 digest" in log_path.read_text(), 180,
                 "training")
        serve.cli("resize", str(job), "1")
        with serve.client() as c:
            wait_for(lambda: c.show(job)["state"] in ("succeeded", "failed"), 300, "the job to end")
            detail = c.show(job)
        log = log_path.read_text()
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    assert detail["state"] == "succeeded", detail["reason"]
    assert detail["attempt"] >= 2  # it was resized: checkpointed and relaunched on 1 worker
    assert final_digest(log, steps) == final_digest(reference, steps)


ENDED = ("succeeded", "failed", "cancelled", "rejected")
# Two nodes of 2 GPUs for workers and one CPU-only node with room for two parameter servers.
CLUSTER = """\
[[group]]
nodes = 2
gpus_per_node = 2
role = "worker"

[[group]]
nodes = 1
gpus_per_node = 0
role = "ps"
cpus_per_node = 2
mem_gb_per_node = 4
"""
STEPS = 30


def _ps_job(serve: ServeProc, priority: float, est_s: float, *extra: str) -> int:
    return int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--max-gpus", "2",
                         "--logical-ranks", "2", "--ps", "2", "--min-ps", "1", "--max-ps", "2",
                         "--ps-cpus", "1", "--ps-mem-gb", "1", "--priority", str(priority),
                         "--est-s", str(est_s), *extra,
                         "--env", f"PYTHONPATH={ROOT / 'src'}",  # this tree's stint.torch
                         "--", sys.executable, PS_CNN, "--steps", str(STEPS), "--sleep", "0.2"))


def _counts(store: Store, job: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """For each attempt the controller launched for ``job``: its (workers, PSs), and those of
    the allocation OASiS had committed for it then (the latest decision the controller enacted
    before the launch: a slot's plan waits for the capacity its stops free)."""
    with store.read() as s:
        planned = [(d.at, (d.workers, d.ps)) for d in s.query(Decision).filter_by(job_id=job)
                   .order_by(Decision.id)]
        ran = [(t.at, load_alloc(t.allocation)) for t in s.query(Transition).filter_by(job_id=job)
               .order_by(Transition.id) if t.dst == "starting"]
    return [((a.num_workers, a.num_ps), [c for at, c in planned if at <= t][-1]) for t, a in ran]


@pytest.mark.slow
@pytest.mark.timeout(600)  # 20 s slots: a restart of a job's four processes takes 10-30 s loaded
def test_oasis_ps_jobs_change_worker_and_ps_counts_at_slot_boundaries(tmp_path: Path) -> None:
    reference = subprocess.run(
        [sys.executable, "-m", "stint.torch.ps", "--workers", "1", "--ps", "1", "--logical", "2",
         PS_CNN, "--steps", str(STEPS)], capture_output=True, text=True, timeout=300,
        check=True).stdout
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    db = f"sqlite:///{tmp_path / 'stint.db'}"
    serve = ServeProc(tmp_path / "data", db, "--cluster", str(tmp_path / "cluster.toml"),
                      "--policy", "oasis", "--policy-opt", "slot_s=20",
                      "--policy-opt", "restart_s=0", "--grace", "30")
    serve.start()
    try:
        ids = [_ps_job(serve, 3.0, 30), _ps_job(serve, 1.0, 30),
               _ps_job(serve, 1.0, 100, "--deadline", "1")]  # worth nothing after 1 s
        with serve.client() as c:
            wait_for(lambda: all(c.show(j)["state"] in ENDED for j in ids), 480, "every job to end")
            details: list[dict[str, Any]] = [c.show(j) for j in ids]
        shown = serve.cli("show", str(ids[0]))
        nodes = serve.cli("nodes")
        logs = [(serve.jobs_dir / str(j) / "log.txt").read_text() for j in ids[:2]]
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    states = [d["state"] for d in details]
    assert states == ["succeeded", "succeeded", "rejected"], [d["reason"] for d in details]
    assert "oasis: not admitted" in details[2]["reason"]
    store = Store(db)
    ran = [_counts(store, j) for j in ids[:2]]
    for pairs in ran:
        assert all(got == planned for got, planned in pairs), pairs  # as OASiS committed them
        assert all(ps >= 1 for (_, ps), _ in pairs)  # the servers ran where the plan put them
    assert any(len({got for got, _ in pairs}) > 1 for pairs in ran), ran  # counts changed
    for log in logs:
        assert final_digest(log, STEPS) == final_digest(reference, STEPS)
    assert re.search(r"\+ ps node-2x\d", shown) and "PLAN" in shown, shown  # the slots' counts
    assert "ps" in nodes and "node-2" in nodes
