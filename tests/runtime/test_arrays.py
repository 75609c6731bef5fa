"""Job arrays: one request, a task per index sharing one spec, listed and cancelled as a group;
each task runs once with its index in its command and in ``STINT_ARRAY_INDEX``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rt_helpers import Harness, ServeProc, wait_for

from stint.config import Limits, UserLimits
from stint.runtime.api import ApiSettings, create_app
from stint.runtime.states import HOLDING
from stint.runtime.store import NewJob, Store


def _api(store: Store, tmp_path: Path, limits: Limits | None = None) -> tuple[TestClient, dict[str, str]]:
    store.set_nodes([("node-0", 2), ("node-1", 2)])
    token = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    app = create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs", limits=limits or Limits()))
    return TestClient(app), {"Authorization": f"Bearer {token}"}


def test_an_array_is_one_request_listed_and_cancelled_as_a_group(store: Store,
                                                                 tmp_path: Path) -> None:
    api, h = _api(store, tmp_path)
    r = api.post("/v1/arrays", json={"command": ["train", "--seed", "{i}", "x{i}y"], "gpus": 2,
                                     "array": "3-7", "array_parallel": 2}, headers=h)
    assert r.status_code == 201, r.text
    got = r.json()
    assert got["tasks"] == 5 and got["first_index"] == 3 and got["array_id"] == got["job_ids"][0]
    tasks = api.get(f"/v1/arrays/{got['array_id']}", headers=h).json()
    assert [t["array_index"] for t in tasks] == [3, 4, 5, 6, 7]
    assert [t["id"] for t in tasks] == got["job_ids"]
    assert {t["array_id"] for t in tasks} == {got["array_id"]}
    assert [t["command"] for t in tasks] == [["train", "--seed", str(i), f"x{i}y"]
                                             for i in range(3, 8)]
    assert all(t["state"] == "queued" and t["gpus"] == 2 for t in tasks)
    single = api.post("/v1/jobs", json={"command": ["true"]}, headers=h).json()
    assert single["array_id"] is None
    r = api.post(f"/v1/arrays/{got['array_id']}/cancel", headers=h)
    assert r.status_code == 202 and r.json()["cancelling"] == got["job_ids"]
    tasks = api.get(f"/v1/arrays/{got['array_id']}", headers=h).json()
    assert all(t["cancel_requested"] for t in tasks)
    assert not api.get(f"/v1/jobs/{single['id']}", headers=h).json()["cancel_requested"]
    assert api.get("/v1/arrays/999", headers=h).status_code == 404
    assert api.post("/v1/arrays/999/cancel", headers=h).status_code == 404


def test_bad_arrays_and_arrays_past_the_limits_are_refused(store: Store, tmp_path: Path) -> None:
    api, h = _api(store, tmp_path, Limits(UserLimits(max_jobs=10)))
    for array in ("7-3", "a-b", "0-100000", "5"):
        r = api.post("/v1/arrays", json={"command": ["x"], "array": array}, headers=h)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "array"], array
    r = api.post("/v1/arrays", json={"command": ["x"], "array": "0-1", "array_parallel": 0},
                 headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "array_parallel"]
    assert api.post("/v1/arrays", json={"command": ["x"], "array": "0-7"},
                    headers=h).status_code == 201
    r = api.post("/v1/arrays", json={"command": ["x"], "array": "0-2"}, headers=h)
    assert r.status_code == 429 and "3 more" in r.json()["detail"]
    assert len(api.get("/v1/jobs", headers=h).json()) == 8  # nothing of the refused array


@pytest.mark.slow
def test_every_task_runs_exactly_once_with_its_index_within_the_parallelism(h: Harness) -> None:
    out = h.root / "ran.txt"
    code = ("import os, sys, time; time.sleep(0.3); open(sys.argv[1], 'a').write("
            "sys.argv[2] + ' ' + os.environ['STINT_ARRAY_INDEX'] + '\\n')")
    spec = NewJob("sweep", [sys.executable, "-c", code, str(out), "{i}"], 1, 1, 1, "standard",
                  1.0, None)
    ids = h.store.add_array(spec, h.caller, time.time(), range(7), parallel=2)
    most = 0

    def step() -> None:
        nonlocal most
        h.ctl.step(time.time())
        most = max(most, sum(h.job(i).state in HOLDING for i in ids))

    wait_for(lambda: all(h.job(i).state == "succeeded" for i in ids), 90, "every task",
             tick=step)
    lines = sorted(out.read_text().splitlines(), key=lambda x: int(x.split()[0]))
    assert lines == [f"{i} {i}" for i in range(7)]  # each once, {i} and the variable agree
    assert most == 2  # the cluster has 4 GPUs: the array's limit kept it to 2


@pytest.mark.slow
def test_the_cli_submits_lists_and_cancels_an_array(serve: ServeProc) -> None:
    array_id = int(serve.cli("submit", "--array", "0-2", "--array-parallel", "1", "--gpus", "4",
                             "--", "sleep", "60{i}").strip())
    listed = serve.cli("jobs", "--array", str(array_id)).splitlines()
    assert listed[0].split()[:2] == ["ID", "INDEX"]
    assert [line.split()[1] for line in listed[1:]] == ["0", "1", "2"]
    assert "3 tasks" in serve.cli("cancel", "--array", str(array_id))
    with serve.client() as c:
        wait_for(lambda: all(t["state"] == "cancelled" for t in c.array_jobs(array_id)), 60,
                 "the tasks to be cancelled")
        assert [t["command"] for t in c.array_jobs(array_id)] == [["sleep", f"60{i}"]
                                                                  for i in range(3)]


def test_a_large_array_is_stored_whole_across_insert_batches(store: Store, tmp_path: Path) -> None:
    """More tasks than one multi-row insert holds (SQLite; PostgreSQL copies them): every task
    and its first transition stored, in order, with the spec's columns."""
    token = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    assert token is not None
    caller = store.caller_for_token(token)
    assert caller is not None
    spec = NewJob("big", ["run", "--i={i}"], 2, 1, 2, "standard", 1.5, None, env={"A": "b"},
                  time_limit_s=30.0, gpu_types=("h100",))
    ids = store.add_array(spec, caller, time.time(), range(3, 1503), parallel=4)
    tasks = store.array_tasks(ids[0], caller)
    assert [t.id for t in tasks] == ids and len(ids) == 1500
    assert [t.array_index for t in tasks] == list(range(3, 1503))
    last = tasks[-1]
    assert (last.command, last.env, last.time_limit_s, last.gpu_types, last.array_parallel,
            last.array_id, last.cancel_requested, last.memory_max) == (
        '["run", "--i=1502"]', '{"A": "b"}', 30.0, "h100", 4, ids[0], False, None)
    assert len(store.transitions(ids[-1])) == 1
