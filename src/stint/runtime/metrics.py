"""``GET /metrics``: the control plane in Prometheus' text format (prometheus-client).

Series (all prefixed ``stint_``):
- ``jobs{state, tier}``: jobs by lifecycle state and SLA tier (from the store, at each scrape);
- ``gpus{node, kind}``: GPUs per node, ``kind`` = ``held`` or ``free``;
- ``queue_wait_seconds{stat}``: how long queued jobs have waited, ``stat`` = ``max`` or ``mean``;
- ``actions_total{kind}``: actions the controller carried out (start, resume, preempt, resize,
  migrate, reject); ``refused_actions_total``: actions the capacity ledger refused;
- ``controller_step_seconds``, ``policy_plan_seconds``: histograms of a controller step and of
  the policy's ``plan`` within it;
- ``api_request_seconds{method, route, status}``: a histogram of API requests;
- ``job_wait_seconds{tier}``: a histogram of a job's wait from submission to its first start;
- ``jobs_finished_total{outcome, tier}``: jobs that ended, ``outcome`` = their final state;
- ``preemptions_total{reason}``: attempts stopped and put back in the queue, ``reason`` = what
  stopped them (``policy``, ``operator``, ``drain``, ``stopped``: a worker exit nobody asked
  for...); ``resizes_total{reason}``, ``migrations_total{reason}``: jobs moved to another
  worker count or other nodes, ``reason`` = ``operator`` (pinned) or ``policy``;
- ``gpus_held{tier}``: GPUs held by running jobs per tier (from the store, at each scrape);
- ``job_wait_by_user_seconds{user}``: the wait histogram per user, and ``gpus_held_by_user{user}``:
  GPUs held per user. Users are capped so the series stay bounded: the wait's first
  ``MAX_USERS`` users to start a job keep their name, later ones count as ``other``; the gauge
  names the ``MAX_USERS`` users holding most GPUs and sums the rest into ``other``.
Each control plane has a registry of its own (no global state; tests run several side by side).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from stint.model.job import Tier
from stint.runtime.states import HOLDING, TERMINAL, JobState
from stint.runtime.store import Store, load_alloc
from stint.runtime.tables import Job, Transition

# Waits from seconds to a day: queues on a shared cluster range that far.
WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0)

MAX_USERS = 100  # user label values per series, besides "other"
OTHER = "other"

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
        self.wait_s = Histogram("stint_job_wait_seconds", "Wait from submission to first start",
                                ["tier"], buckets=WAIT_BUCKETS, registry=self.registry)
        self.finished = Counter("stint_jobs_finished", "Jobs that ended, by final state",
                                ["outcome", "tier"], registry=self.registry)
        self.preemptions = Counter("stint_preemptions", "Attempts stopped and requeued",
                                   ["reason"], registry=self.registry)
        self.resizes = Counter("stint_resizes", "Jobs moved to another worker count",
                               ["reason"], registry=self.registry)
        self.migrations = Counter("stint_migrations", "Jobs moved to other nodes", ["reason"],
                                  registry=self.registry)
        self.wait_user_s = Histogram("stint_job_wait_by_user_seconds",
                                     "Wait from submission to first start, per user", ["user"],
                                     buckets=WAIT_BUCKETS, registry=self.registry)
        self.store = store
        self.user_names: dict[int, str] = {}  # read from the store only for an unseen user
        self.wait_users: set[str] = set()
        self.registry.register(_StoreCollector(store))

    def transition(self, t: Transition, job: Job) -> None:
        """Count a transition the controller has committed (``job``: its row after it)."""
        dst = JobState(t.dst)
        if dst == JobState.STARTING and t.src == JobState.ADMITTED:
            wait = max(0.0, t.at - job.submitted_at)
            self.wait_s.labels(job.tier).observe(wait)
            self.wait_user_s.labels(self._user_label(job.user_id)).observe(wait)
        elif dst in TERMINAL:
            self.finished.labels(str(dst), job.tier).inc()
        elif dst == JobState.PREEMPTED:
            why = (t.reason or "").split(":", 1)[0]  # "<why>: how it stopped (...)"
            if why not in ("resize", "migrate"):  # a move, counted below
                self.preemptions.labels("operator" if why == "preempt" else why).inc()
        elif dst in (JobState.RESIZING, JobState.MIGRATING):
            pinned = job.pin_workers is not None or job.pin_node is not None
            counter = self.resizes if dst == JobState.RESIZING else self.migrations
            counter.labels("operator" if pinned else "policy").inc()

    def _user_label(self, user_id: int) -> str:
        if user_id not in self.user_names:
            self.user_names = self.store.user_names()
        name = self.user_names.get(user_id, OTHER)
        if name not in self.wait_users and len(self.wait_users) < MAX_USERS:
            self.wait_users.add(name)
        return name if name in self.wait_users else OTHER

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
        by_tier = GaugeMetricFamily("stint_gpus_held", "GPUs held by running jobs, per tier",
                                    labels=["tier"])
        by_user = GaugeMetricFamily("stint_gpus_held_by_user", "GPUs held by running jobs, per "
                                    f"user (the {MAX_USERS} holding most; the rest: other)",
                                    labels=["user"])
        tiers: dict[str, int] = {}
        users: dict[int, int] = {}
        with self.store.read() as r:
            counts = r.execute(select(Job.state, Job.tier, func.count()).group_by(Job.state,
                                                                                  Job.tier))
            for state, tier, n in counts:
                jobs.add_metric([state, tier], float(n))
            held: dict[int, int] = {}
            q = select(Job.allocation, Job.tier, Job.user_id).where(
                Job.state.in_([str(s) for s in HOLDING]))
            for alloc, tier, uid in r.execute(q):
                for node, c in load_alloc(alloc).workers:
                    held[node] = held.get(node, 0) + c
                    tiers[tier] = tiers.get(tier, 0) + c
                    users[uid] = users.get(uid, 0) + c
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
        for tier in (t.value for t in Tier):
            by_tier.add_metric([tier], float(tiers.get(tier, 0)))
        names = self.store.user_names()
        ranked = sorted(users.items(), key=lambda u: (-u[1], u[0]))
        for uid, n in ranked[:MAX_USERS]:
            by_user.add_metric([names.get(uid, OTHER)], float(n))
        if len(ranked) > MAX_USERS:
            by_user.add_metric([OTHER], float(sum(n for _, n in ranked[MAX_USERS:])))
        yield jobs
        yield gpus
        yield by_user
        yield wait
        yield by_tier
