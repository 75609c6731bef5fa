"""A dry-run submission (``POST /v1/jobs/dry-run``, ``stint submit --test-only``): nothing is
stored; the answer says whether the job fits now, needs a preemption or waits (and until when),
and which jobs it would delay, from a forecast of the live state with the job added."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from stint.config import Limits, UserLimits
from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.runtime.api import ApiSettings, create_app
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.store import NewJob, Store

T0 = 1000.0  # the store's epoch, wall seconds


def _running(store: Store, tmp_path: Path, policy: str, jobs: list[tuple[int, float, str]],
             ) -> tuple[TestClient, str]:
    """A cluster of 2 x 2 GPUs whose controller has started ``jobs`` ((gpus, est_s, tier)) at
    T0, and an API on it with its clock at T0 + 10."""
    store.epoch(T0)
    token = store.create_token("alice", T0)
    who = store.caller_for_token(token)
    assert who is not None
    specs = {str(i + 1): JobSpec(str(i + 1), 0.0, est, gpus, gpus, gpus)
             for i, (gpus, est, _) in enumerate(jobs)}
    ctl = Controller(store, ClockedExecutor([2, 2], specs, ScalingModel()), make(policy),
                     ControllerConfig(tmp_path / "jobs"))
    for i, (gpus, est, tier) in enumerate(jobs):
        store.add_job(NewJob(f"j{i + 1}", ["true"], gpus, gpus, gpus, tier, 1.0, None, est_s=est),
                      who, T0)
    for _ in range(3):
        ctl.step(T0)
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs",
                                                   clock=lambda: T0 + 10.0, policy=policy)))
    return api, token


def _ask(api: TestClient, token: str, **body: object) -> dict[str, object]:
    r = api.post("/v1/jobs/dry-run", json={"command": ["true"], **body},
                 headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    got: dict[str, object] = r.json()
    return got


def test_a_job_that_fits_starts_now_and_is_not_stored(store: Store, tmp_path: Path) -> None:
    api, token = _running(store, tmp_path, "fifo", [(2, 100.0, "standard")])
    before = store.count_jobs()
    got = _ask(api, token, gpus=2, est_s=50.0)
    assert got["admissible"] == "fits-now"
    assert got["est_start_at"] == T0 + 10.0 and got["est_finish_at"] == T0 + 60.0
    assert got["delays"] == []
    assert store.count_jobs() == before  # a dry run stores nothing


def test_a_job_on_a_full_cluster_waits_for_the_first_to_end(store: Store, tmp_path: Path) -> None:
    api, token = _running(store, tmp_path, "fifo", [(2, 100.0, "standard"), (2, 40.0, "standard")])
    got = _ask(api, token, gpus=2, est_s=30.0)
    assert got["admissible"] == "waits"
    assert got["est_start_at"] == T0 + 40.0 and got["est_finish_at"] == T0 + 70.0
    assert got["delays"] == []  # FIFO: the newcomer queues behind everyone


def test_a_premium_job_names_the_basic_job_it_preempts_and_delays(store: Store,
                                                                   tmp_path: Path) -> None:
    api, token = _running(store, tmp_path, "singularity",
                          [(2, 100.0, "basic"), (2, 100.0, "basic")])
    got = _ask(api, token, gpus=2, est_s=30.0, tier="premium")
    assert got["admissible"] == "needs-preemption", got
    assert got["est_start_at"] == T0 + 10.0
    delays = got["delays"]
    assert isinstance(delays, list) and len(delays) >= 1
    assert all(d["finish_s"] and d["finish_s"] > 0 for d in delays)


def test_bad_input_is_a_422_and_no_token_a_401(store: Store, tmp_path: Path) -> None:
    api, token = _running(store, tmp_path, "fifo", [(2, 100.0, "standard")])
    r = api.post("/v1/jobs/dry-run", json={"command": ["true"], "gpus": 9},
                 headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 422 and "gpus" in r.text
    assert api.post("/v1/jobs/dry-run", json={"command": ["true"]}).status_code == 401


def test_a_job_past_the_users_limits_is_infeasible(store: Store, tmp_path: Path) -> None:
    api, token = _running(store, tmp_path, "fifo", [(2, 100.0, "standard")])
    limited = ApiSettings(jobs_dir=tmp_path / "jobs", clock=lambda: T0 + 10.0, policy="fifo",
                          limits=Limits(UserLimits(max_gpus=3)))
    api = TestClient(create_app(store, limited))
    got = _ask(api, token, gpus=2)
    assert got["admissible"] == "infeasible"
    assert "limit of 3" in str(got["reason"])


def test_the_cli_answer_names_the_verdict_times_and_delays() -> None:
    from stint.runtime.cli import _dry_run_text

    got = _dry_run_text({"admissible": "needs-preemption", "reason": "it starts now by stopping "
                         "or shrinking job(s) 3", "policy": "singularity", "est_start_at": 100.0,
                         "est_finish_at": 160.0, "delays": [{"job_id": 3, "start_s": None,
                                                             "finish_s": 60.0}],
                         "basis": "B"}, 100.0)
    assert got.splitlines() == [
        "needs-preemption: it starts now by stopping or shrinking job(s) 3 (policy singularity)",
        "estimated start: 00:01:40 UTC (in 0s)", "estimated finish: 00:02:40 UTC (in 1m00s)",
        "delays: job 3 finishes 60 s later", "basis: B"]
