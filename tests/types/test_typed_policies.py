"""Every policy on a typed cluster, over a random workload: a job limited to some types never holds
another type's GPUs, no allocation spans types, a resize keeps the type, and the step rate
follows the type (the bars of accelerator types)."""

from __future__ import annotations

import random

import pytest
from typed_helpers import two_type_cluster  # type: ignore[import-not-found]

from stint.model import Allocation, Cluster, JobSpec
from stint.perf.scaling import ScalingModel
from stint.perf.types import TypedPerf, TypeSpeeds
from stint.placement.types import alloc_type
from stint.policies import available, make
from stint.policies.base import ClusterView, JobStatus, PolicyBase
from stint.policies.typed import TypeBlind, wrap
from stint.reconcile import Action, ActionKind
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator

OPTIONS = {"oasis": {"slot_s": 10.0, "horizon_slots": 80}, "oasis-replan": {"slot_s": 10.0, "horizon_slots": 80},
           "rrh": {"slot_s": 10.0, "threshold": 0.0}, "optimus": {"tick_s": 10.0},
           "tiresias": {"tick_s": 10.0, "thresholds_gpu_s": (60.0,)}, "gavel": {"tick_s": 20.0},
           "sia": {"tick_s": 10.0}}
CHOICES = [(), ("v100",), ("k80",), ("v100", "k80")]


def _jobs(seed: int, n: int = 24) -> list[JobSpec]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        req = rng.choice([1, 1, 2, 4])
        elastic = rng.random() < 0.4
        out.append(JobSpec(f"j{i}", t, rng.uniform(20, 120), req, 1 if elastic else req,
                           2 * req if elastic else req, application=rng.choice(["a", "b"]),
                           gpu_types=rng.choice(CHOICES)))
        t += rng.expovariate(1 / 6.0)
    return out


def _run(name: str, cluster: Cluster, jobs: list[JobSpec]) -> tuple[list[tuple[float, Action]], list[str], int]:
    seen: list[tuple[float, Action]] = []
    speeds = TypeSpeeds({("a", "k80"): 0.25}, {"k80": 0.5})
    sim = Simulator(cluster, jobs, wrap(make(name, **OPTIONS.get(name, {})), cluster),
                    TypedPerf(ScalingModel(), cluster, speeds), CostModel.free(),
                    on_action=lambda t, a: seen.append((t, a)))
    res = sim.run()
    return seen, res.refusals, sum(r.completed for r in res.records)


@pytest.mark.slow
@pytest.mark.parametrize("name", available())
def test_no_job_holds_a_type_it_may_not_use_nor_two_types(name: str) -> None:
    cluster = two_type_cluster()
    for seed in (1, 2):
        jobs = _jobs(seed)
        specs = {j.job_id: j for j in jobs}
        actions, refusals, done = _run(name, cluster, jobs)
        assert actions, f"{name} did nothing"
        for t, a in actions:
            kind = alloc_type(cluster, a.after)
            assert kind != "*mixed*", (name, t, a)
            assert not a.after or specs[a.job_id].allows_type(kind), (name, t, a, specs[a.job_id].gpu_types)
            if a.kind is ActionKind.RESIZE:
                assert kind == alloc_type(cluster, a.before), (name, t, a)
        assert not [r for r in refusals if "type" in r], refusals
        if name not in ("oasis", "oasis-replan", "rrh", "dorm", "drf-ps", "fifo-fixed"):  # PS-host policies
            assert done == len(jobs), f"{name}: {done} of {len(jobs)} done"


class _Grower(PolicyBase):
    """Starts j on one v100 node, then asks for 8 workers packed from node 0 (4 v100 + 4 on the
    next node, a k80 one once v100-1 is taken): a type-blind resize across types."""

    name = "grower"
    tick_s = 5.0

    def plan(self, view: ClusterView) -> object:  # type: ignore[override]
        from stint.model.allocation import Plan

        by_id = {st.job_id: st for st in view.jobs}
        st: JobStatus | None = by_id.get("j")
        if st is None:
            return Plan()
        if not st.allocation:
            return Plan({"j": Allocation.of({0: 2}), **({"x": Allocation.of({1: 4})} if "x" in by_id else {})})
        return Plan({"j": Allocation.of({0: 4, 2: 4})})


def test_a_type_blind_resize_is_kept_on_the_jobs_type() -> None:
    cluster = two_type_cluster()
    jobs = [JobSpec("j", 0.0, 100.0, 2, 1, 8), JobSpec("x", 0.0, 1000.0, 4, 4, 4, gpu_types=("v100",))]
    seen: list[Action] = []
    sim = Simulator(cluster, jobs, TypeBlind(_Grower()), ScalingModel(), CostModel.free(),  # type: ignore[arg-type]
                    on_action=lambda t, a: seen.append(a))
    sim.run()
    resize = [a for a in seen if a.kind is ActionKind.RESIZE and a.job_id == "j"]
    assert resize, seen
    # v100-1 is held by x: j grows to the 4 GPUs of its own node only, never onto k80's
    assert resize[0].after == Allocation.of({0: 4})


def test_the_step_rate_follows_the_type() -> None:
    cluster = two_type_cluster()
    job = JobSpec("j", 0.0, 100.0, 4, 4, 4, application="a", gpu_types=("k80",))
    _, _, done = _run("fifo", cluster, [job])
    sim = Simulator(cluster, [job], wrap(make("fifo"), cluster),
                    TypedPerf(ScalingModel(), cluster, TypeSpeeds({("a", "k80"): 0.25})), CostModel.free())
    (rec,) = sim.run().records
    assert done == 1 and rec.jct_s == pytest.approx(400.0)  # 100 s of work at a quarter speed
