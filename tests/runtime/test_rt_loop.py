"""The ``stint serve`` control loop survives failing steps: a real ``ControlLoop`` thread over a
real LocalExecutor and real worker processes, with an executor wrapper that raises on chosen calls
(or blocks in them, as on a job's file that does not answer).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from rt_helpers import FlakyExecutor, counter_cmd, wait_for

from stint.policies import make
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import ExecutorError
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.serve import ControlLoop, add_health_route
from stint.runtime.store import NewJob, Store

STEPS = 20


@pytest.fixture
def loop_over(store: Store, tmp_path: Path) -> Iterator[Any]:
    made: list[tuple[ControlLoop, LocalExecutor, FlakyExecutor]] = []

    def start(fail: dict[str, int], error: type[Exception] = ExecutorError,
              stuck_step_s: float = 60.0) -> tuple[ControlLoop, FlakyExecutor]:
        inner = LocalExecutor(tmp_path / "executor", nodes=2, gpus_per_node=2)
        flaky = FlakyExecutor(inner, fail, error)
        config = ControllerConfig(jobs_dir=tmp_path / "jobs", max_retries=3, grace_s=10.0)
        loop = ControlLoop(Controller(store, flaky, make("fifo"), config), tick_s=0.05,  # type: ignore[arg-type]
                           stuck_step_s=stuck_step_s)
        made.append((loop, inner, flaky))
        loop.start()
        return loop, flaky

    yield start
    for loop, inner, flaky in made:
        for gate in flaky.gates.values():
            gate.set()  # (a step still blocked would keep the loop from stopping)
        loop.stopping.set()
        loop.join(10)
        for jid in inner.running():
            inner.kill(jid)
        wait_for(lambda inner=inner: not inner.running(), 10, "workers to exit")
        inner.close()


def submit(store: Store, out: Path) -> int:
    caller = store.caller_for_token(store.create_token("alice", time.time()))
    assert caller is not None
    spec = NewJob("t", counter_cmd(STEPS, out), 1, 1, 1, "standard", 1.0, None)
    return store.add_job(spec, caller, time.time()).id


def state(store: Store, job_id: int) -> str:
    job = store.get_job(job_id)
    assert job is not None
    return str(job.state)


def test_failing_launch_is_retried_and_the_job_completes(loop_over: Any, store: Store,
                                                         tmp_path: Path) -> None:
    job = submit(store, tmp_path / "out")
    # Not an ExecutorError (which the controller turns into a failed attempt): an unexpected
    # error, e.g. a lost connection to the cluster, escapes the step after its intents committed.
    loop, flaky = loop_over({"launch": 1}, ConnectionError)
    wait_for(lambda: state(store, job) == "succeeded", 60, "the job to succeed")
    assert loop.is_alive()  # the failing step did not end the thread
    assert flaky.calls["launch"] == 2  # the failed launch, then the retry that worked
    assert loop.failures == 1 and loop.consecutive_failures == 0
    assert loop.last_error is not None and "injected failure in launch" in loop.last_error
    assert loop.health()["status"] == "ok"
    out = tmp_path / "out"
    assert json.loads((out / "result.json").read_text())["total"] == STEPS * (STEPS + 1) // 2
    assert (out / "completions").read_text().count("\n") == 1  # ran to completion exactly once
    assert [t.dst for t in store.transitions(job)][-3:] == ["starting", "running", "succeeded"]


def test_failing_recover_and_poll_are_retried_and_health_reports_them(
        loop_over: Any, store: Store, tmp_path: Path) -> None:
    job = submit(store, tmp_path / "out")
    loop, flaky = loop_over({"running": 2, "poll": 3})
    app = FastAPI()
    add_health_route(app, loop)
    http = TestClient(app)
    wait_for(lambda: state(store, job) == "succeeded", 60, "the job to succeed")
    assert loop.recovered and loop.failures == 5
    assert flaky.calls["running"] >= 3  # recover ran three times: two failures, then success
    r = http.get("/v1/health/controller")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert r.json()["failures"] == 5


def test_health_is_503_while_steps_keep_failing(loop_over: Any, store: Store) -> None:
    loop, _ = loop_over({"poll": 10_000})
    app = FastAPI()
    add_health_route(app, loop)
    http = TestClient(app)
    wait_for(lambda: loop.consecutive_failures >= 2, 30, "two failed steps")
    r = http.get("/v1/health/controller")
    assert r.status_code == 503
    assert r.json()["status"] == "failing" and "injected failure in poll" in r.json()["last_error"]
    assert loop.is_alive()


def test_health_is_503_while_a_step_is_blocked_and_ok_once_it_finishes(loop_over: Any) -> None:
    loop, flaky = loop_over({}, stuck_step_s=2.0)
    app = FastAPI()
    add_health_route(app, loop)
    http = TestClient(app)
    wait_for(lambda: loop.recovered and loop.steps >= 2, 30, "the loop to step")
    gate = flaky.gates["poll"] = threading.Event()  # the next step blocks in poll
    blocked_at = flaky.calls.get("poll", 0)
    wait_for(lambda: flaky.calls.get("poll", 0) > blocked_at, 30, "a step to block")
    seen = time.monotonic()
    r = http.get("/v1/health/controller")
    if time.monotonic() - seen < 1.0:  # (surely within the threshold, even on a busy machine)
        assert r.status_code == 200 and r.json()["status"] == "ok"
    wait_for(lambda: http.get("/v1/health/controller").status_code == 503, 30,
             "the blocked step to pass the threshold")
    body = http.get("/v1/health/controller").json()
    assert body["status"] == "stuck" and re.fullmatch(r"step running for \d+ s", body["detail"])
    steps = loop.steps
    gate.set()
    wait_for(lambda: loop.steps > steps, 30, "the step to finish")
    r = http.get("/v1/health/controller")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["detail"] is None
