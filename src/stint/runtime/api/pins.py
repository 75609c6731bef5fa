"""An admin's pins of a job: resize it, migrate it to a node or (in a fleet) a cluster, unpin it.
The policy decides for everyone else; the controller enacts a pin at its next step."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from stint.runtime.api.context import ApiContext, Ctx, JobId, Who
from stint.runtime.api.errors import unprocessable
from stint.runtime.schemas import JobOut, MigrateIn, ResizeIn
from stint.runtime.store import Caller, load_alloc
from stint.runtime.tables import Job
from stint.runtime.view import worker_counts

router = APIRouter()


@router.post("/v1/jobs/{job_id}/resize", status_code=202)
def resize(job_id: JobId, body: ResizeIn, who: Who, api: Ctx) -> JobOut:
    job = _pinnable(api, job_id, who)
    counts = worker_counts(job.gpus, job.min_gpus, job.max_gpus, job.logical_ranks)
    if body.workers not in counts:
        raise unprocessable("workers", f"job {job_id} runs on {list(counts)} workers (the "
                            f"divisors of its {job.logical_ranks or job.max_gpus} logical "
                            f"ranks within min_gpus..max_gpus), not {body.workers}")
    if job.pin_node is not None and body.workers > api.nodes.gpus().get(job.pin_node, 0):
        raise unprocessable("workers", f"job {job_id} is pinned to {job.pin_node}, which "
                            f"has fewer than {body.workers} GPUs")
    api.store.request(job_id, who, "resize", str(body.workers), api.settings.clock(),
                      pin_workers=body.workers)
    return api.out(api.own_job(job_id, who), who)


@router.post("/v1/jobs/{job_id}/migrate", status_code=202)
def migrate(job_id: JobId, body: MigrateIn, who: Who, api: Ctx) -> JobOut:
    job = _pinnable(api, job_id, who)
    if body.to_cluster is not None:
        return _to_cluster(api, job, body.to_cluster, who)
    assert body.node is not None
    gpus = api.nodes.gpus()
    if body.node not in gpus:
        raise unprocessable("node", f"no node {body.node!r}; nodes are {sorted(gpus)}")
    workers = job.pin_workers or load_alloc(job.allocation).num_workers or job.gpus
    if workers > gpus[body.node]:
        raise unprocessable("node", f"node {body.node} has {gpus[body.node]} GPUs; job "
                            f"{job_id} needs {workers}")
    api.store.request(job_id, who, "migrate", body.node, api.settings.clock(), pin_node=body.node)
    return api.out(api.own_job(job_id, who), who)


@router.post("/v1/jobs/{job_id}/unpin", status_code=202)
def unpin(job_id: JobId, who: Who, api: Ctx) -> JobOut:
    _pinnable(api, job_id, who)
    api.store.request(job_id, who, "unpin", "", api.settings.clock(), pin_workers=None, pin_node=None)
    return api.out(api.own_job(job_id, who), who)


def _pinnable(api: ApiContext, job_id: int, who: Caller) -> Job:
    if not who.is_admin:
        raise HTTPException(403, "only an admin may pin a job (resize or migrate); the "
                            "policy decides for everyone else")
    return api.live_job(job_id, who)


def _to_cluster(api: ApiContext, job: Job, cluster: str, who: Caller) -> JobOut:
    if cluster not in api.settings.clusters:
        known = sorted(api.settings.clusters) or "none: not a fleet"
        raise unprocessable("to_cluster", f"no cluster {cluster!r}; clusters are {known}")
    if job.gpus > api.nodes.cluster_gpus(cluster):
        raise unprocessable("to_cluster", f"cluster {cluster} has "
                            f"{api.nodes.cluster_gpus(cluster)} GPUs; job {job.id} needs {job.gpus}")
    if job.cluster == cluster and not job.to_cluster:
        raise HTTPException(409, f"job {job.id} is already on cluster {cluster}")
    if job.to_cluster:
        raise HTTPException(409, f"job {job.id} is already moving to cluster {job.to_cluster}")
    api.store.request(job.id, who, "migrate", f"cluster={cluster}", api.settings.clock(),
                      to_cluster=cluster)
    return api.out(api.own_job(job.id, who), who)
