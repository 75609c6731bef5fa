"""``FleetControl`` stepped by hand over two clusters of local virtual nodes on loopback (each
with its own storage and copy service) and real processes: placement by the global scheduler,
an arrival no cluster can take, a cancel before placement, an admin's move to the other cluster
(the checkpoint and the log copied, verified, and resumed there), each cluster's forecast of
its own queue -- on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_helpers import TWO_CLUSTERS, counter_cmd, wait_for

from stint.model.fleet import parse_fleet
from stint.policies import make
from stint.policies.fleet.baselines import LeastLoaded
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.copy import start_storage
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.fleet import FleetControl, Member
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.tables import Job

SECRET = "fleet-secret-for-the-test"


def _control(store: Store, tmp_path: Path, copies: dict[str, str]) -> FleetControl:
    """The fleet's control plane over executors and storages under ``tmp_path`` (a second call
    is a restart: new controllers and executors over the same state, the same copy services)."""
    members = {}
    for c in parse_fleet(TWO_CLUSTERS, "fleet.toml").clusters:
        storage = tmp_path / f"{c.name}-store"
        executor = LocalExecutor(tmp_path / f"{c.name}-exec", nodes=1, gpus_per_node=1)
        config = ControllerConfig(jobs_dir=storage, grace_s=10, forecast_policy=lambda: make("fifo"),
                                  forecast_s=0.2)
        ctl = Controller(store, executor, make("fifo"), config, member=c.name, region=c.region)
        members[c.name] = Member(ctl, storage, copies[c.name])
    control = FleetControl(store, parse_fleet(TWO_CLUSTERS, "fleet.toml"), members, LeastLoaded(), SECRET)
    control.recover(time.time())
    return control


@pytest.fixture
def copies(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Each cluster's copy service (they outlive a control plane's restart, as agents do)."""
    servers, out = [], {}
    for name in ("a", "b"):
        server, out[name] = start_storage(tmp_path / f"{name}-store", SECRET)
        servers.append(server)
    yield out
    for server in servers:
        server.shutdown()


def _stop(control: FleetControl) -> None:
    control.close()
    for m in control.members.values():
        for jid in m.controller.executor.running():
            m.controller.executor.kill(jid)
        wait_for(lambda m=m: not m.controller.executor.running(), 10, "workers to exit")


@pytest.fixture
def fleet(store: Store, tmp_path: Path, copies: dict[str, str]) -> Iterator[FleetControl]:
    control = _control(store, tmp_path, copies)
    yield control
    _stop(control)


def _job(store: Store, jid: int) -> Job:
    job = store.get_job(jid)
    assert job is not None
    return job


@pytest.mark.slow
def test_a_fleet_places_holds_cancels_and_moves(fleet: FleetControl, store: Store,
                                                tmp_path: Path) -> None:
    caller = store.caller_for_token(store.create_token("alice", time.time()))
    assert caller is not None and isinstance(caller, Caller)

    def submit(cmd: list[str], gpus: int = 1) -> int:
        return store.add_job(NewJob("t", cmd, gpus, gpus, gpus, "standard", 1.0, None), caller,
                             time.time()).id

    def until(jid: int, cond: object, what: str) -> Job:
        wait_for(lambda: cond(_job(store, jid)), 30, f"job {jid}: {what}",  # type: ignore[operator]
                 tick=lambda: fleet.step(time.time()))
        return _job(store, jid)

    out = tmp_path / "out"
    one = submit(counter_cmd(100, out, "--hold"))
    big = submit(["true"], gpus=2)  # no cluster has 2 GPUs
    job = until(one, lambda j: j.state == "running", "run")
    assert job.cluster == "a"
    assert {(n.name, n.cluster, n.region) for n in store.nodes()} == {
        ("a/node-0", "a", "east"), ("b/node-0", "b", "west")}
    held = _job(store, big)
    assert held.cluster is None and held.state == "queued" and "placed it nowhere" in held.reason
    store.request(big, caller, "cancel", "", time.time(), cancel_requested=True)
    until(big, lambda j: j.state == "cancelled", "be cancelled before placement")
    wait_for(lambda: (tmp_path / "a-store" / str(one) / "log.txt").read_text().count("starts"), 10)
    time.sleep(0.3)  # let it count
    store.request(one, caller, "migrate", "cluster=b", time.time(), to_cluster="b")
    job = until(one, lambda j: j.cluster == "b" and j.state == "running", "run on b")
    assert job.to_cluster is None and job.copy_bytes and job.copy_s is not None
    copied = (tmp_path / "b-store" / str(one) / "ckpt" / "counter.json").read_text()
    path = [(t.dst, t.reason) for t in store.transitions(one)]
    assert [d for d, _ in path][4:] == ["checkpointing", "preempted", "migrating", "preempted",
                                        "resumed", "starting", "running"]
    assert "verified" in path[7][1] and f"{job.copy_bytes} bytes" in path[7][1]
    # the log came with the checkpoint: b's holds both attempts (``stint logs`` reads b's)
    log = tmp_path / "b-store" / str(one) / "log.txt"
    wait_for(lambda: log.read_text().count("starts") == 2, 10, "the second attempt's log on b")
    (out / "release").touch()
    until(one, lambda j: j.state == "succeeded", "finish on b")
    resumes = json.loads((out / "result.json").read_text())["resumes"]
    assert [r[0] for r in resumes] == [1, 2]
    assert resumes[1][1] == json.loads(copied)["step"] > 0  # resumed from the copy, on b


@pytest.mark.slow
def test_each_cluster_forecasts_its_own_queue(fleet: FleetControl, store: Store, tmp_path: Path) -> None:
    caller = store.caller_for_token(store.create_token("alice", time.time()))
    assert caller is not None and isinstance(caller, Caller)

    def submit(cmd: list[str], est_s: float) -> int:
        return store.add_job(NewJob("t", cmd, 1, 1, 1, "standard", 1.0, None, est_s=est_s), caller,
                             time.time()).id

    # least-loaded: the first on a, the second on b, the third behind the first on a
    held = [submit(counter_cmd(100, tmp_path / f"out{i}", "--hold"), est_s=1000.0) for i in range(2)]
    third = submit(["true"], est_s=10.0)
    wait_for(lambda: all(_job(store, j).state == "running" for j in held), 30, "both to run",
             tick=lambda: fleet.step(time.time()))
    job = wait_for(lambda: (j := _job(store, third)).queue_position == 1 and j, 10,
                   "a forecast of the waiting job: first in a's queue", tick=lambda: fleet.step(time.time()))
    assert isinstance(job, Job) and job.cluster == "a" and job.est_start_at is not None
    first = _job(store, held[0])
    assert first.cluster == "a" and first.est_finish_at is not None
    # it starts when the job ahead of it on a is expected to finish (est 1000 s), not now
    assert job.est_start_at == pytest.approx(first.est_finish_at, abs=5.0)
    assert job.est_start_at > time.time() + 900


@pytest.mark.slow
def test_a_restart_during_a_copy_ends_with_the_job_in_one_place(store: Store, tmp_path: Path,
                                                                  copies: dict[str, str]) -> None:
    caller = store.caller_for_token(store.create_token("alice", time.time()))
    assert caller is not None and isinstance(caller, Caller)
    control = _control(store, tmp_path, copies)
    out = tmp_path / "out"
    jid = store.add_job(NewJob("t", counter_cmd(100, out, "--hold"), 1, 1, 1, "standard", 1.0, None),
                        caller, time.time()).id
    wait_for(lambda: _job(store, jid).state == "running", 30, "run on a", tick=lambda: control.step(time.time()))
    log = tmp_path / "a-store" / str(jid) / "log.txt"
    wait_for(lambda: log.exists() and log.read_text().count("starts"), 10, "the first attempt to start")
    time.sleep(0.3)  # let it count
    store.request(jid, caller, "migrate", "cluster=b", time.time(), to_cluster="b")
    wait_for(lambda: _job(store, jid).state == "migrating", 30, "the copy to start",
             tick=lambda: control.step(time.time()))
    control.close()  # the control plane stops with the copy in flight; the copy services live on
    restarted = _control(store, tmp_path, copies)  # recover() starts the copy again
    try:
        job = wait_for(lambda: (j := _job(store, jid)).cluster == "b" and j.state == "running" and j, 30,
                       "run on b after the restart", tick=lambda: restarted.step(time.time()))
        assert isinstance(job, Job) and job.to_cluster is None and job.copy_bytes
        assert [t.dst for t in store.transitions(jid)].count("migrating") == 1
        assert not [p for p in (tmp_path / "b-store" / str(jid)).iterdir() if p.name != "ckpt" and
                    p.name != "log.txt"]  # no half copy left beside the checkpoint
        a_ckpt, b_ckpt = (tmp_path / f"{c}-store" / str(jid) / "ckpt" / "counter.json" for c in "ab")
        copied = b_ckpt.read_text()
        assert copied == a_ckpt.read_text()  # the verified copy of a's last checkpoint
        assert not restarted.members["a"].controller.executor.running()  # one place: b alone runs it
        (out / "release").touch()
        wait_for(lambda: _job(store, jid).state == "succeeded", 30, "finish on b",
                 tick=lambda: restarted.step(time.time()))
        resumes = json.loads((out / "result.json").read_text())["resumes"]
        assert [r[0] for r in resumes] == [1, 2] and resumes[1][1] == json.loads(copied)["step"] > 0
    finally:
        _stop(restarted)
