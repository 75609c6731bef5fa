"""The cluster as a whole: ``/v1/health`` (the one route without a token), ``/v1/history`` (the
timeline of allocations), ``/v1/cluster`` (the policy, GPUs and SLA attainment), ``/v1/nodes``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from stint.runtime.api.context import HISTORY_S, Ctx, Since, Who
from stint.runtime.reads import cluster_out, history_out
from stint.runtime.schemas import MAX_ID, ClusterOut, HistoryOut, NodeOut
from stint.runtime.states import HOLDING
from stint.runtime.store import Caller, Store, load_alloc

router = APIRouter()


@router.get("/v1/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/history")
def history(who: Who, api: Ctx, since: Since = None,
            job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None) -> HistoryOut:
    """The timeline of allocations (preemptions, resizes, migrations marked), GPUs held
    and jobs waiting over time, from ``since``; ``job``: that job's alone."""
    now = api.settings.clock()
    if job is not None:
        api.own_job(job, who)
    return history_out(api.store, who, now - HISTORY_S if since is None else since, now, job)


@router.get("/v1/cluster")
def cluster(who: Who, api: Ctx, since: Since = None) -> ClusterOut:
    """The policy, GPUs, SLA attainment per tier of the jobs since ``since``."""
    now = api.settings.clock()
    return cluster_out(api.store, api.settings.policy, now - HISTORY_S if since is None else since,
                       now)


@router.get("/v1/nodes")
def list_nodes(who: Who, api: Ctx) -> list[NodeOut]:
    return _nodes(api.store, who)


def _nodes(store: Store, who: Caller) -> list[NodeOut]:
    """Every node's used and free GPUs and the parameter servers on it; the job ids on it
    (workers or PSs) are the caller's only (all for an admin)."""
    rows = store.nodes()
    used = {(n.cluster, n.position): 0 for n in rows}
    servers = dict.fromkeys(used, 0)
    jobs: dict[tuple[str, int], list[int]] = {(n.cluster, n.position): [] for n in rows}
    for job in store.list_jobs(Caller(0, "", True), [str(s) for s in HOLDING], limit=1_000_000):
        alloc = load_alloc(job.allocation)
        for node, count in (*alloc.workers, *((n, 0) for n, _ in alloc.ps)):
            key = (job.cluster or "", node)
            used[key] = used.get(key, 0) + count
            if (who.is_admin or job.user_id == who.user_id) and job.id not in jobs.get(key, []):
                jobs.setdefault(key, []).append(job.id)
        for node, count in alloc.ps:
            key = (job.cluster or "", node)
            servers[key] = servers.get(key, 0) + count
    return [NodeOut(name=n.name, gpus=n.gpus, used=used[(n.cluster, n.position)],
                    free=n.gpus - used[(n.cluster, n.position)], state=n.state,
                    jobs=jobs[(n.cluster, n.position)], cluster=n.cluster, region=n.region,
                    gpu_type=n.gpu_type, role=n.role, cpus=n.cpus, mem_gb=n.mem_gb,
                    ps=servers[(n.cluster, n.position)])
            for n in rows]
