"""Policies beyond FIFO under a real ``stint serve`` with real worker processes, one per family:
Tiresias demoting and rotating SDK jobs; OASiS admitting, rejecting and finishing jobs slot by
slot; an elastic policy (Optimus) resizing an SDK job only to sizes it can run on, its result
bitwise equal to an unresized run. SQLite only: the parity test covers both databases."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import MLP, ServeProc, counter_cmd, final_digest, kill_leftover_workers, wait_for

ENDED = ("succeeded", "failed", "cancelled", "rejected")


def _serve(tmp_path: Path, *extra: str) -> ServeProc:
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}", *extra)
    serve.start()
    return serve


def _all_end(serve: ServeProc, ids: list[int], timeout: float) -> list[dict[str, Any]]:
    with serve.client() as c:
        wait_for(lambda: all(c.show(j)["state"] in ENDED for j in ids), timeout, "every job to end")
        return [c.show(j) for j in ids]




@pytest.mark.slow
def test_tiresias_demotes_and_rotates_sdk_jobs(tmp_path: Path) -> None:
    # Two one-worker jobs of ~9 s on one GPU: each is demoted after 6 GPU-s and the other runs
    # (one worker a job keeps each restart cheap on a loaded machine).
    serve = _serve(tmp_path, "--nodes", "1", "--gpus-per-node", "1", "--policy", "tiresias",
                   "--policy-opt", "thresholds_gpu_s=6", "--policy-opt", "tick_s=1")
    try:
        ids = [int(serve.cli("submit", "--gpus", "1", "--", sys.executable, MLP, "--steps", "60",
                             "--sleep", "0.15")) for _ in range(2)]
        details = _all_end(serve, ids, 280)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    assert [d["state"] for d in details] == ["succeeded"] * 2, [d["reason"] for d in details]
    demoted = [t for d in details for t in d["transitions"]
               if t["dst"] == "checkpointing" and "tiresias: preempt" in t["reason"]]
    assert demoted, "no demotion-driven preemption"
    assert all(d["attained_gpu_s"] > 0 for d in details)


@pytest.mark.slow
def test_oasis_admits_rejects_and_finishes_every_job_slot_by_slot(tmp_path: Path) -> None:
    serve = _serve(tmp_path, "--policy", "oasis", "--policy-opt", "slot_s=5")
    try:
        ids = [int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--est-s", "4", "--",
                             *counter_cmd(150, tmp_path / f"out{i}"))) for i in range(5)]
        # worth nothing unless done within a second: no schedule has a positive payoff
        ids.append(int(serve.cli("submit", "--gpus", "2", "--est-s", "100", "--deadline", "1",
                                 "--", *counter_cmd(10, tmp_path / "late"))))
        details = _all_end(serve, ids, 300)
        shown = serve.cli("show", str(ids[0]))
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    states = [d["state"] for d in details]
    assert states[:5] == ["succeeded"] * 5, [d["reason"] for d in details]
    assert states[5] == "rejected" and "deadline" in details[5]["reason"]
    # admitted at arrival; a job past its 4 s declaration is re-admitted for the work left, and
    # one that waited is planned again when another ends early or late: each names its schedule
    said = [d["decision"] or "" for d in details[:5]]
    assert all(re.match(r"oasis: (admitted|re-admitted|planned (earlier|again))", t)
               for t in said), said
    assert all("workers per slot" in t for t in said), said
    assert "decision" in shown and "workers per slot" in shown


@pytest.mark.slow
def test_oasis_admits_jobs_without_a_declared_length_on_an_idle_cluster(tmp_path: Path) -> None:
    """Five 2-GPU jobs with no --est-s, no deadline, no priority on an idle 2 x 2 cluster with
    5 s slots: none stays queued, the admitted ones run at once or when a job ends early, and a
    rejection names its cause and what to change."""
    serve = _serve(tmp_path, "--policy", "oasis", "--policy-opt", "slot_s=5")
    try:
        ids = [int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--max-gpus", "2", "--",
                             *counter_cmd(30, tmp_path / f"out{i}"))) for i in range(5)]
        details = _all_end(serve, ids, 400)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    states = [d["state"] for d in details]
    assert "queued" not in states and states.count("succeeded") >= 1, states
    for d in details:
        if d["state"] == "rejected":
            assert "oasis: not admitted" in d["reason"] and "--" in d["reason"], d["reason"]
        else:
            assert d["state"] == "succeeded", d["reason"]
    # one restart costs more than a 5 s slot: an admitted job ran on one attempt
    assert all(d["attempt"] == 1 for d in details if d["state"] == "succeeded"), \
        [d["attempt"] for d in details]


@pytest.mark.slow
def test_elastic_policy_resizes_sdk_job_only_to_feasible_sizes(tmp_path: Path) -> None:
    steps = 40
    reference = subprocess.run([sys.executable, MLP, "--steps", str(steps), "--logical", "4",
                                "--ckpt-dir", str(tmp_path / "ref")], capture_output=True,
                               text=True, timeout=300, check=True).stdout
    serve = _serve(tmp_path, "--nodes", "1", "--gpus-per-node", "3", "--policy", "optimus",
                   "--policy-opt", "tick_s=1")
    try:
        # 4 logical ranks, up to 3 workers: 3 would be infeasible (Optimus grows to it)
        big = int(serve.cli("submit", "--gpus", "1", "--min-gpus", "1", "--max-gpus", "3",
                            "--logical-ranks", "4", "--", sys.executable, MLP, "--steps",
                            str(steps), "--sleep", "0.2", "--log-every", "5"))
        log_path = serve.jobs_dir / str(big) / "log.txt"
        wait_for(lambda: log_path.exists() and "step 5 digest" in log_path.read_text(), 120,
                 "training")
        small = int(serve.cli("submit", "--gpus", "2", "--", *counter_cmd(100, tmp_path / "s")))
        details = _all_end(serve, [big, small], 300)
        log = log_path.read_text()
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    d, s = details
    assert (d["state"], s["state"]) == ("succeeded", "succeeded"), (d["reason"], s["reason"])
    sizes = [int(m) for m in re.findall(r"attempt \d+ on \S+x(\d+)", " ".join(
        t["reason"] for t in d["transitions"]))]
    assert set(sizes) == {1, 2}, sizes  # resized, never to the infeasible 3 workers
    assert any(t["dst"] == "resizing" for t in d["transitions"])
    assert final_digest(log, steps) == final_digest(reference, steps)


@pytest.mark.slow
def test_serve_refuses_a_bad_policy_option_or_config_in_one_line(tmp_path: Path) -> None:
    from rt_helpers import STINT

    conf = tmp_path / "stint.toml"
    conf.write_text('[policy]\nname = "oasis"\n[policy.options]\nslot = 5\n')
    for args in (["--policy", "tiresias", "--policy-opt", "tick=1"], ["--config", str(conf)]):
        r = subprocess.run([STINT, "serve", "--data-dir", str(tmp_path / "d"), *args],
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 2 and "has no option" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "d").exists()  # refused before touching anything


@pytest.mark.slow
def test_singularity_shrinks_a_basic_sdk_job_for_a_premium_one(tmp_path: Path) -> None:
    steps = 60
    reference = subprocess.run([sys.executable, MLP, "--steps", str(steps), "--logical", "2",
                                "--ckpt-dir", str(tmp_path / "ref")], capture_output=True,
                               text=True, timeout=300, check=True).stdout
    serve = _serve(tmp_path, "--nodes", "1", "--gpus-per-node", "2", "--policy", "singularity")
    try:  # the basic job fills the cluster; it can run on 1 or 2 workers (2 logical ranks)
        basic = int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--max-gpus", "2",
                              "--logical-ranks", "2", "--tier", "basic", "--", sys.executable, MLP,
                              "--steps", str(steps), "--sleep", "0.2", "--log-every", "5"))
        log_path = serve.jobs_dir / str(basic) / "log.txt"
        wait_for(lambda: log_path.exists() and "step 5 digest" in log_path.read_text(), 120,
                 "training")
        premium = int(serve.cli("submit", "--gpus", "1", "--tier", "premium", "--",
                                *counter_cmd(60, tmp_path / "p")))
        with serve.client() as c:
            wait_for(lambda: c.show(premium)["first_start_at"] is not None, 120, "premium start")
            started, during = c.show(premium), c.show(basic)
        details = _all_end(serve, [basic, premium], 300)
        listing = serve.cli("jobs")
        log = log_path.read_text()
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    b, p = details
    assert (b["state"], p["state"]) == ("succeeded", "succeeded"), (b["reason"], p["reason"])
    waited = started["first_start_at"] - started["submitted_at"]
    print(f"premium job waited {waited:.2f} s from submission to running")
    since = started["submitted_at"]
    basic_path = [(f'{t["at"] - since:+.2f}', t["dst"], t["reason"][:60]) for t in b["transitions"]
                  if t["at"] >= since - 1]
    premium_path = [(f'{t["at"] - since:+.2f}', t["dst"], t["reason"][:80]) for t in p["transitions"]]
    assert waited < 10.0, (basic_path, premium_path)  # the bar: within seconds (~1 s) locally
    assert during["decision"] == f"shrunk to 1 workers for premium job {premium}"
    assert any(t["dst"] == "resizing" for t in b["transitions"])  # time-sliced onto 1 worker
    assert final_digest(log, steps) == final_digest(reference, steps)  # no lost work, bitwise
    assert 0 < b["attainment"] <= 1 and 0 < p["attainment"] <= 1
    assert "premium" in listing and "basic" in listing  # the TIER column
