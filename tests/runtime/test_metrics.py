"""``GET /metrics`` of a real ``stint serve``: parsed by the Prometheus client's own parser, with
the series the control plane promises, and their values following what happened."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rt_helpers import ServeProc, counter_cmd, kill_leftover_workers, wait_for


def _scrape(serve: ServeProc) -> dict[str, list[tuple[dict[str, str], float]]]:
    r = httpx.get(f"{serve.url}/metrics", timeout=10)  # no token, like the health routes
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.mark.slow
def test_metrics_carry_jobs_gpus_actions_and_latencies(tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}")
    serve.start()
    try:
        with serve.client() as c:
            done = c.submit(command=counter_cmd(5, tmp_path / "a"), gpus=1)["id"]
            wait_for(lambda: c.show(done)["state"] == "succeeded", 60, "the job to succeed")
            held = c.submit(command=counter_cmd(100000, tmp_path / "b"), gpus=2)["id"]
            wait_for(lambda: c.show(held)["state"] == "running", 60, "the second job to run")
            m = _scrape(serve)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    jobs = {(lab["state"], lab["tier"]): v for lab, v in m["stint_jobs"]}
    assert jobs[("succeeded", "standard")] == 1 and jobs[("running", "standard")] == 1
    gpus = {(lab["node"], lab["kind"]): v for lab, v in m["stint_gpus"]}
    assert sum(v for (_, kind), v in gpus.items() if kind == "held") == 2
    assert sum(gpus.values()) == 4  # 2 nodes x 2 GPUs, held + free
    starts = [v for lab, v in m["stint_actions_total"] if lab["kind"] == "start"]
    assert starts == [2.0]
    assert dict(m["stint_refused_actions_total"][0][0]) == {} and m["stint_refused_actions_total"][0][1] == 0
    assert m["stint_controller_step_seconds_count"][0][1] > 0
    assert m["stint_policy_plan_seconds_count"][0][1] > 0
    routes = {lab["route"] for lab, _ in m["stint_api_request_seconds_count"]}
    assert "/v1/jobs" in routes and "/v1/jobs/{job_id}" in routes
    assert {lab["stat"] for lab, _ in m["stint_queue_wait_seconds"]} == {"max", "mean"}
    waits = {lab["user"]: v for lab, v in m["stint_job_wait_by_user_seconds_count"]}
    assert waits == {"admin": 2}  # both first starts, by the user who submitted them
    assert {lab["user"]: v for lab, v in m["stint_gpus_held_by_user"]} == {"admin": 2}


@pytest.mark.slow
def test_alerting_series_follow_real_transitions(tmp_path: Path) -> None:
    """Waits per tier, outcomes, preemptions and resizes by reason, GPUs held per tier, read
    back after a job succeeded, one was preempted and resized by an operator, one cancelled."""
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}")
    serve.start()
    try:
        with serve.client() as c:
            done = c.submit(command=counter_cmd(5, tmp_path / "a"), gpus=1, tier="premium")["id"]
            wait_for(lambda: c.show(done)["state"] == "succeeded", 60, "the job to succeed")
            moved = c.submit(command=counter_cmd(100000, tmp_path / "b"), gpus=2, min_gpus=1,
                             max_gpus=2)["id"]
            wait_for(lambda: c.show(moved)["state"] == "running", 60, "the job to run")
            c.act(moved, "preempt", None)
            wait_for(lambda: c.show(moved)["preemptions"] == 1 and c.show(moved)["state"]
                     == "running", 90, "the job to be preempted and to run again")
            c.act(moved, "resize", {"workers": 1})
            wait_for(lambda: c.show(moved)["state"] == "running"
                     and sum(c.show(moved)["allocation"].values()) == 1, 90, "the resize")
            gone = c.submit(command=["sleep", "600"], gpus=4)["id"]  # waits: 1 GPU is held
            c.act(gone, "cancel", None)
            wait_for(lambda: c.show(gone)["state"] == "cancelled", 60, "the cancel")
            m = _scrape(serve)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    waits = {lab["tier"]: v for lab, v in m["stint_job_wait_seconds_count"]}
    assert waits["premium"] == 1 and waits["standard"] == 1  # first starts only
    finished = {(lab["outcome"], lab["tier"]): v for lab, v in m["stint_jobs_finished_total"]}
    assert finished == {("succeeded", "premium"): 1, ("cancelled", "standard"): 1}
    assert {lab["reason"]: v for lab, v in m["stint_preemptions_total"]} == {"operator": 1}
    assert {lab["reason"]: v for lab, v in m["stint_resizes_total"]} == {"operator": 1}
    assert "stint_migrations_total" not in m or not m["stint_migrations_total"]
    held = {lab["tier"]: v for lab, v in m["stint_gpus_held"]}
    assert held == {"premium": 0, "standard": 1, "basic": 0}


def test_per_user_series_name_at_most_a_hundred_users(store: object) -> None:
    """102 users each holding GPUs (the last two most): the gauge names the 100 holding most
    and sums the rest into ``other``; the wait histogram keeps its first 100 users' names."""
    import time

    from prometheus_client.parser import text_string_to_metric_families
    from sqlalchemy import update

    from stint.runtime.metrics import Metrics
    from stint.runtime.store import NewJob, Store
    from stint.runtime.tables import Job, Transition

    assert isinstance(store, Store)
    store.set_nodes([("node-0", 1000)])
    metrics, now = Metrics(store), time.time()
    spec = NewJob(name="j", command=["x"], gpus=1, min_gpus=1, max_gpus=1, tier="standard",
                  priority=0.0, deadline_s=None)
    for i in range(102):
        caller = store.caller_for_token(store.create_token(f"u{i:03d}", now))
        assert caller is not None
        job = store.add_job(spec, caller, now)
        gpus = 5 if i >= 100 else 1
        with store.session() as s:
            s.execute(update(Job).where(Job.id == job.id).values(
                state="running", allocation=f"[[0, {gpus}]]"))
        metrics.transition(Transition(job_id=job.id, src="admitted", dst="starting", at=now + 1,
                                      attempt=1, reason=""), job)
    samples: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(metrics.text().decode()):
        for x in family.samples:
            if "user" in x.labels:
                samples.setdefault(x.name, {})[x.labels["user"]] = x.value
    held = samples["stint_gpus_held_by_user"]
    assert len(held) == 101 and held["u100"] == held["u101"] == 5 and held["other"] == 2
    waits = samples["stint_job_wait_by_user_seconds_count"]
    assert len(waits) == 101 and waits["u099"] == 1 and waits["other"] == 2
    assert "u100" not in waits
