"""The daily inference reservation: nodes leave at peak hours and come back at night, their jobs
resume with no work lost, and reserved GPU-hours leave the utilization denominator.

The scaling model runs a job at 1 work unit/s on its requested size, so work is run time; times
are hours (H = 3600 s) from trace time 0 = midnight.
"""

import json

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.model import Cluster, JobSpec, Plan
from stint.perf.scaling import ScalingModel
from stint.policies.base import ClusterView
from stint.policies.fifo import Fifo
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.reservation import Reservation, Span

H = 3600.0


class SeeingFifo(Fifo):
    """FIFO that records the down nodes and the free GPUs of every view it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, frozenset[int], int]] = []

    def plan(self, view: ClusterView) -> Plan:
        self.seen.append((view.now, view.down_nodes, sum(view.free_gpus)))
        return super().plan(view)


def rigid(jid: str, arrival_h: float, gpus: int, hours: float) -> JobSpec:
    return JobSpec(jid, arrival_h * H, hours * H, gpus, gpus, gpus, duration_s=hours * H)


def test_spans_climb_and_fall_with_the_ramp_and_wrap_midnight():
    r = Reservation(peak=1.0, start_h=9, end_h=21, ramp_h=2)
    # 4 slots: slot i from 9 + 2i/4 h to 21 - 2i/4 h; the next day 24 h later.
    spans = [s for _, s in zip(range(5), r.spans(0.0, 4), strict=False)]
    assert spans[:4] == [Span(i, (9 + 0.5 * i) * H, (21 - 0.5 * i) * H) for i in range(4)]
    assert spans[4] == Span(0, 33 * H, 45 * H)
    # From 10 h on, a window already open starts now; a slot already given back is left out.
    late = [s for _, s in zip(range(2), r.spans(20.8 * H, 4), strict=False)]
    assert late == [Span(0, 20.8 * H, 21 * H), Span(0, 33 * H, 45 * H)]
    # A window from 20 to 6 wraps midnight; the trace's clock starts at 22 h (clock0).
    night = Reservation(peak=0.5, start_h=20, end_h=6, clock0_s=22 * H)
    assert night.window_h == 10
    assert next(night.spans(0.0, 4)) == Span(0, 0.0, 8 * H)  # opened at 20 h, 2 h before time 0
    assert night.slots(4) == 2 and Reservation(peak=0.01).slots(64) == 1


@pytest.mark.parametrize("text, why", [
    ("peak=1.5", "peak must be in"), ("start=9,end=21", "peak=F"), ("peak=0.3,start=9,end=9", "must differ"),
    ("peak=0.3,ramp=7", "at most half"), ("peak=x", "not a number"), ("peak=0.3,noon=12", "expected"),
])
def test_bad_reservations_say_why(text, why):
    with pytest.raises(ValueError, match=why):
        Reservation.parse(text)


def test_capacity_leaves_at_peak_and_a_preempted_job_resumes_and_completes():
    # 2 nodes x 2 GPUs; X and Y (2 GPUs, 12 h each) start at 0, one per node. At 9 h one node is
    # reserved (both hold 2 GPUs in use: the seeded order picks one): its job, call it P, is
    # preempted after 9 h of work; the other, Q, ends at 12 h, then P resumes on Q's node with
    # 3 h left after a 30 s restart: it ends at 15 h + 30 s. The node comes back at 21 h.
    jobs = [rigid("X", 0, 2, 12), rigid("Y", 0, 2, 12), rigid("Z", 22, 4, 1)]
    policy = SeeingFifo()
    sim = Simulator(Cluster.uniform(2, 2), jobs, policy, ScalingModel(), CostModel(),
                    reservation=Reservation(peak=0.5, start_h=9, end_h=21))
    res = sim.run()
    rec = {r.job_id: r for r in res.records}
    p, q = sorted(("X", "Y"), key=lambda j: -rec[j].preemptions)
    assert (rec[p].preemptions, rec[q].preemptions) == (1, 0)
    assert rec[q].finish_s == 12 * H
    assert rec[p].finish_s == pytest.approx(15 * H + 30)
    assert all(r.completed and r.work_received == pytest.approx(r.work) for r in res.records)  # no work lost
    # Z needs both nodes: it can start only once the node is back, at 22 h (arrival), and the
    # reservation of the next day (33 h) finds it done at 23 h.
    assert rec["Z"].first_start_s == 22 * H and rec["Z"].preemptions == 0
    # The policy saw the node down from 9 h to 21 h, and 2 GPUs in all; every node up otherwise.
    during = [(t, down, free) for t, down, free in policy.seen if 9 * H <= t < 21 * H]
    assert during and all(len(down) == 1 and free <= 2 for _, down, free in during)
    assert all(not down for t, down, _ in policy.seen if t < 9 * H or t >= 21 * H)
    times, gpus = res.reserved
    assert list(zip(times, gpus, strict=True))[:2] == [(9 * H, 2.0), (21 * H, 0.0)]
    s = res.summary()
    # Reserved until the last finish (23 h): 2 GPUs from 9 to 21 h = 24 GPU-h. Busy: Q 24, P
    # 2 x (9 + 3 h + 30 s), Z 4 x 1 = 52 GPU-h + 60 GPU-s; offered 4 x 23 - 24 = 68 GPU-h.
    assert s["reserved_gpu_hours"] == pytest.approx(24.0)
    assert s["gpu_utilization"] == pytest.approx((52 * H + 60) / (68 * H))
    assert "reserved_gpu_hours" in s["utilization_basis"]
    assert s["mechanism_gpu_hours"] == pytest.approx(60 / H)  # P's resume: 30 s on 2 GPUs


def test_an_elastic_job_is_shrunk_onto_its_other_node():
    # E (2 to 4 workers, 10 h at 4) runs on both nodes; at 9 h one is reserved and E is resized
    # onto the other, keeping its work; it ends with a resize and no preemption.
    e = JobSpec("E", 0.0, 10 * H, 4, 2, 4, duration_s=10 * H)
    res = Simulator(Cluster.uniform(2, 2), [e], Fifo(), ScalingModel(), CostModel(),
                    reservation=Reservation(peak=0.5, start_h=9, end_h=21)).run()
    (r,) = res.records
    assert (r.resizes, r.preemptions, r.completed) == (1, 0, True)
    assert r.work_received == pytest.approx(r.work)
    assert r.finish_s > 10 * H  # slower on 2 workers after 9 h (and a 30 s resize)


def test_stint_sim_reservation_flag(tmp_path):
    out = tmp_path / "o"
    args = ["sim", "--trace", "pollux:6", "--policy", "fifo", "--no-plots", "--out", str(out), "--format", "json"]
    ok = CliRunner().invoke(app, [*args, "--reservation", "peak=0.25,start=0,end=12"])
    assert ok.exit_code == 0, ok.output
    s = json.loads((out / "summary.json").read_text())["fifo"]
    assert s["reservation"]["peak"] == 0.25 and s["reserved_gpu_hours"] > 0
    bad = CliRunner().invoke(app, [*args, "--reservation", "peak=2"])
    assert bad.exit_code == 2 and "peak must be in (0, 1]" in bad.output
