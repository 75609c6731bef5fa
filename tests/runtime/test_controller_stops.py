"""A job a plan starts in the place of one it stops launches as soon as that stop completes,
whatever the controller did in between (a full reload of its cache, a re-plan). The real
controller and store, the clocked executor with checkpoints that take time: no processes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import Outcome
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.view import spec_of


@dataclass
class SlowStops(ClockedExecutor):
    """A clocked executor whose attempts checkpoint only when the test says (``stops_done``)."""

    asked: set[str] = field(default_factory=set)

    def request_stop(self, job_id: str, grace_s: float = 0.0) -> None:
        if job_id in self.live:
            self.asked.add(job_id)

    def stops_done(self) -> None:
        for jid in self.asked & self.live.keys():
            self.live[jid].stop = Outcome.CHECKPOINTED
        self.asked.clear()


@dataclass
class Cluster:
    store: Store
    ex: SlowStops
    ctl: Controller
    caller: Caller

    def submit(self, name: str, at: float, gpus: int, lo: int, hi: int, tier: str, est_s: float,
               logical: int | None = None) -> int:
        job = self.store.add_job(NewJob(name, ["true"], gpus, lo, hi, tier, 1.0, None,
                                        est_s=est_s, logical_ranks=logical), self.caller, at)
        self.ex.specs = {**self.ex.specs, str(job.id): spec_of(job, "admin", 0.0)}
        return job.id

    def step(self, at: float) -> None:
        self.ex.now = at
        self.ctl.step(at)

    def state(self, job_id: int) -> str:
        row = self.store.get_job(job_id)
        assert row is not None
        return row.state


def _cluster(store: Store, tmp_path: Path, policy: str, gpus: int, **opts: object) -> Cluster:
    store.epoch(0.0)
    store.create_token("admin", 0.0, admin=True)
    ex = SlowStops([gpus], {}, ScalingModel())
    ctl = Controller(store, ex, make(policy, **opts), ControllerConfig(tmp_path / "jobs"))
    return Cluster(store, ex, ctl, Caller(1, "admin", True))


# The job that runs first (GPUs, min, max, logical ranks, tier, length) and the one that
# arrives at 5 s and takes its GPUs, by shrinking it (singularity) or by preempting it.
BIG = {"singularity": (2, 1, 2, 2, "basic", 600.0), "srtf": (2, 2, 2, None, "standard", 600.0),
       "tiresias": (2, 2, 2, None, "standard", 600.0)}
SMALL = {"singularity": (1, "premium", 600.0), "srtf": (2, "standard", 20.0),
         "tiresias": (2, "standard", 600.0)}
OPTS: dict[str, dict[str, object]] = {"tiresias": {"thresholds_gpu_s": (4.0,), "tick_s": 1.0}}
AFTER = {"singularity": "running", "srtf": "preempted", "tiresias": "preempted"}


@pytest.mark.parametrize("mid_s", [6.0, 10.0])  # a plain step, a full reload (every 10 s)
@pytest.mark.parametrize("policy", ["singularity", "srtf", "tiresias"])
def test_a_job_started_in_a_stopped_jobs_place_launches_once_the_stop_completes(
        store: Store, tmp_path: Path, policy: str, mid_s: float) -> None:
    c = _cluster(store, tmp_path, policy, 2, **OPTS.get(policy, {}))
    gpus, lo, hi, logical, tier, est = BIG[policy]
    big = c.submit("big", 0.0, gpus, lo, hi, tier, est, logical)
    c.step(0.0)
    assert c.state(big) == "running"
    gpus, tier, est = SMALL[policy]
    small = c.submit("small", 5.0, gpus, gpus, gpus, tier, est)
    c.step(5.0)  # the plan: shrink or preempt the big job, start the small one in its place
    assert (c.state(big), c.state(small)) == ("checkpointing", "admitted")
    c.step(mid_s)  # a step while the big job is still checkpointing
    c.ex.stops_done()
    c.step(mid_s + 0.5)
    assert (c.state(big), c.state(small)) == (AFTER[policy], "running")
