"""``GET /metrics``: the control plane in Prometheus' text format (prometheus-client).

Series (all prefixed ``stint_``):
- ``jobs{state, tier}``: jobs by lifecycle state and SLA tier (from the store, at each scrape);
- ``gpus{node, kind}``: GPUs per node, ``kind`` = ``held`` or ``free``;
- ``queue_wait_seconds{stat}``: how long queued jobs have waited, ``stat`` = ``max`` or ``mean``;
- ``actions_total{kind}``: actions the controller carried out (start, resume, preempt, resize,
  migrate, reject); ``refused_actions_total``: actions the capacity ledger refused;
- ``controller_step_seconds``, ``policy_plan_seconds``: histograms of a controller step and of
  the policy's ``plan`` within it;
- ``api_request_seconds{method, route, status}``: a histogram of API requests.
Each control plane has a registry of its own (no global state; tests run several side by side).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from stint.runtime.states import HOLDING, JobState
from stint.runtime.store import Store, load_alloc
from stint.runtime.tables import Job

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The series of one control plane (module docstring)."""

    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.actions = Counter("stint_actions", "Actions the controller carried out", ["kind"],
                               registry=self.registry)
        self.refused = Counter("stint_refused_actions", "Actions the capacity ledger refused",
                               registry=self.registry)
        self.step_s = Histogram("stint_controller_step_seconds", "One controller step",
                                registry=self.registry)
        self.plan_s = Histogram("stint_policy_plan_seconds", "The policy's plan() in a step",
                                registry=self.registry)
        self.api_s = Histogram("stint_api_request_seconds", "API requests",
                               ["method", "route", "status"], registry=self.registry)
        self.registry.register(_StoreCollector(store))

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _StoreCollector(Collector):
    """The gauges read from the store at scrape time: jobs, GPUs, queue wait."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("stint_jobs", "Jobs by state and tier", labels=["state", "tier"])
        gpus = GaugeMetricFamily("stint_gpus", "GPUs per node", labels=["node", "kind"])
        wait = GaugeMetricFamily("stint_queue_wait_seconds", "Wait of queued jobs so far",
                                 labels=["stat"])
        with self.store.read() as r:
            counts = r.execute(select(Job.state, Job.tier, func.count()).group_by(Job.state,
                                                                                  Job.tier))
            for state, tier, n in counts:
                jobs.add_metric([state, tier], float(n))
            held: dict[int, int] = {}
            q = select(Job.allocation).where(Job.state.in_([str(s) for s in HOLDING]))
            for (alloc,) in r.execute(q):
                for node, c in load_alloc(alloc).workers:
                    held[node] = held.get(node, 0) + c
            queued = [t for (t,) in r.execute(select(Job.submitted_at).where(
                Job.state == str(JobState.QUEUED)))]
        for row in self.store.nodes():
            used = held.get(row.position, 0)
            gpus.add_metric([row.name, "held"], float(used))
            gpus.add_metric([row.name, "free"], float(max(row.gpus - used, 0)))
        now = time.time()
        waits = [max(0.0, now - t) for t in queued]
        wait.add_metric(["max"], max(waits, default=0.0))
        wait.add_metric(["mean"], sum(waits) / len(waits) if waits else 0.0)
        yield jobs
        yield gpus
        yield wait
