"""The dashboard's reads in-process: the timeline, utilization and waiting series from the
transitions the store keeps, SLA per tier, a job's progress report; and the pages themselves."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fastapi.testclient import TestClient

from stint.runtime.api import ApiSettings, create_app
from stint.runtime.states import JobState as S
from stint.runtime.store import Store, record_transition
from stint.runtime.tables import Job, Transition

T0 = 1_000.0


def _walk(store: Store, job_id: int, steps: list[tuple[S, float, str | None]]) -> None:
    """Move a job through ``(state, at, allocation JSON or None)`` as the controller would."""
    with store.session() as s:
        job = s.get(Job, job_id)
        assert job is not None
        for dst, at, alloc in steps:
            cols = {"allocation": alloc} if alloc is not None else {}
            if dst == S.STARTING:
                job.attempt += 1
            record_transition(s, job, dst, at, f"to {dst}", **cols)


def test_history_cluster_and_progress(store: Store, tmp_path: Path) -> None:
    store.set_nodes([("node-0", 2), ("node-1", 2)])
    clock = [T0]
    app = create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs", clock=lambda: clock[0],
                                        policy="fifo"))
    api = TestClient(app)
    admin = store.ensure_admin_token(tmp_path / "admin.token", T0)
    alice = store.create_token("alice", T0)

    def get(path: str, token: str | None = admin) -> dict:  # type: ignore[type-arg]
        r = api.get(path, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    mine = api.post("/v1/jobs", json={"command": ["x"], "gpus": 2, "min_gpus": 1,
                                      "total_steps": 100},
                    headers={"Authorization": f"Bearer {alice}"}).json()["id"]
    other = api.post("/v1/jobs", json={"command": ["x"], "gpus": 1, "tier": "premium"},
                     headers={"Authorization": f"Bearer {admin}"}).json()["id"]
    with store.session() as s:  # submitted at T0 (the API's clock is ours)
        for j in s.query(Job):
            j.submitted_at = j.last_change_at = T0
    # alice's job: runs on node-0 x2 from T0+10, resized to 1 worker at T0+20, preempted at T0+30
    _walk(store, mine, [(S.ADMITTED, T0 + 10, None), (S.STARTING, T0 + 10, "[[0, 2]]"),
                        (S.RUNNING, T0 + 11, None), (S.CHECKPOINTING, T0 + 20, None),
                        (S.PREEMPTED, T0 + 20, None), (S.RESIZING, T0 + 20, None),
                        (S.STARTING, T0 + 20, "[[1, 1]]"), (S.RUNNING, T0 + 21, None),
                        (S.CHECKPOINTING, T0 + 30, None), (S.PREEMPTED, T0 + 31, None)])
    _walk(store, other, [(S.ADMITTED, T0 + 15, None), (S.STARTING, T0 + 15, "[[0, 1]]")])
    clock[0] = T0 + 40
    # a third job fails twice: its worker dies (a retry), then it overruns its time limit
    bad = api.post("/v1/jobs", json={"command": ["x"], "gpus": 1},
                   headers={"Authorization": f"Bearer {admin}"}).json()["id"]
    with store.session() as s:
        job = s.get(Job, bad)
        assert job is not None
        job.submitted_at = job.last_change_at = T0
    _walk(store, bad, [(S.ADMITTED, T0 + 1, None), (S.STARTING, T0 + 1, "[[1, 1]]"),
                       (S.RUNNING, T0 + 2, None), (S.PREEMPTED, T0 + 3, None),
                       (S.RESUMED, T0 + 4, None), (S.STARTING, T0 + 4, "[[1, 1]]"),
                       (S.CHECKPOINTING, T0 + 6, None), (S.FAILED, T0 + 7, None)])
    fails = get("/v1/history?since=900")["marks"]
    assert [(m["at"], m["kind"]) for m in fails if m["job"] == bad] == [(T0 + 3, "fail"),
                                                                        (T0 + 7, "fail")]
    with store.session() as s:  # the rest of the test reads the first two jobs only
        s.query(Transition).filter(Transition.job_id == bad).delete()
        s.delete(s.get(Job, bad))

    h = get("/v1/history?since=900")
    assert h["total_gpus"] == 4 and h["now"] == T0 + 40
    assert [(g["job"], g["attempt"], g["start"], g["end"], g["allocation"], g["ended"])
            for g in h["segments"]] == [
        (mine, 1, T0 + 10, T0 + 20, {"node-0": 2}, "preempted"),  # checkpointing holds
        (other, 1, T0 + 15, None, {"node-0": 1}, ""),
        (mine, 2, T0 + 20, T0 + 31, {"node-1": 1}, "preempted")]
    assert [(m["job"], m["at"], m["kind"]) for m in h["marks"]] == [
        (mine, T0 + 20, "resize"), (mine, T0 + 31, "preempt")]
    assert h["utilization"] == [[T0 + 10, 2], [T0 + 15, 3], [T0 + 20, 2], [T0 + 31, 1],
                                [T0 + 40, 0]]  # the open hold is counted up to now
    assert h["waiting"] == [[T0, 2], [T0 + 10, 1], [T0 + 15, 0], [T0 + 31, 1]]
    # a user sees the cluster's series, but only their own jobs' bars and marks
    h_alice = get("/v1/history?since=900", alice)
    assert {g["job"] for g in h_alice["segments"]} == {mine}
    assert h_alice["utilization"] == h["utilization"]
    # a window: its level at the start leads; only what reaches into it
    late = get(f"/v1/history?since={T0 + 25}")
    assert late["utilization"][0] == [T0 + 25, 2]
    assert [g["attempt"] for g in late["segments"] if g["job"] == mine] == [2]
    assert [m["kind"] for m in late["marks"]] == ["preempt"]
    assert [g["job"] for g in get(f"/v1/history?since=900&job={other}")["segments"]] == [other]
    assert api.get(f"/v1/history?job={other}",
                   headers={"Authorization": f"Bearer {alice}"}).status_code == 404

    c = get("/v1/cluster?since=900")
    assert (c["policy"], c["total_gpus"], c["used_gpus"]) == ("fifo", 4, 1)
    assert "nothing else arrives" in c["forecast_basis"]
    tiers = {t["tier"]: t for t in c["tiers"]}
    assert set(tiers) == {"premium", "standard"} and tiers["premium"]["target"] == 0.95
    # 40 s in the system: within the 60 s start-up allowance, every job attains 1 so far
    assert (tiers["standard"]["jobs"], tiers["standard"]["met"]) == (1, 1)
    assert tiers["premium"]["mean_attainment"] == 1.0
    assert get("/v1/history?since=900")["sla_met"] == {}  # nothing has finished

    # SLA over time: the premium job ends at T0+40 after 25 s of work (within the allowance:
    # attainment 1, met); alice's standard job at T0+200 after 20 s (20 / (200 - 60) = 0.14,
    # under 0.70: missed)
    with store.session() as s:
        for jid, at, work in ((other, T0 + 40, 25.0), (mine, T0 + 200, 20.0)):
            j = s.get(Job, jid)
            assert j is not None
            j.state, j.finished_at, j.work_done, j.holding_since = "succeeded", at, work, None
    clock[0] = T0 + 210
    assert get("/v1/history?since=900", alice)["sla_met"] == {
        "premium": [[T0 + 40, 1.0]], "standard": [[T0 + 200, 0.0]]}
    clock[0] = T0 + 40

    assert get(f"/v1/jobs/{mine}/progress", alice) == {
        "step": None, "total_steps": 100, "checkpoint_step": None, "reported_at": None}
    (tmp_path / "jobs" / str(mine)).mkdir(parents=True)
    (tmp_path / "jobs" / str(mine) / "status.json").write_text(json.dumps(
        {"state": "running", "step": 42, "checkpoint_step": 40}))
    p = get(f"/v1/jobs/{mine}/progress", alice)
    assert (p["step"], p["total_steps"], p["checkpoint_step"]) == (42, 100, 40)
    assert abs(p["reported_at"] - time.time()) < 600

    (tmp_path / "jobs" / str(mine) / "log.txt").write_text("x" * 100_000 + "the end\n")
    tail = get(f"/v1/jobs/{mine}/logs?tail=8", alice)
    assert (tail["text"], tail["next_offset"]) == ("the end\n", 100_008)

    page = api.get(f"/ui/jobs/{mine}")  # pages carry no data: no token needed
    assert page.status_code == 200 and f'data-job="{mine}"' in page.text
    assert "/ui/static/dashboard.js" in api.get("/ui/").text
    assert "localStorage" in api.get("/ui/static/dashboard.js").text
    assert api.get("/", follow_redirects=False).headers["location"] == "/ui/"
