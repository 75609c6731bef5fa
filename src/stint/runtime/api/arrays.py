"""``/v1/arrays``: submit a job array (tasks of one spec, each its own job), list and cancel it."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from stint.runtime.api.checks import _check_array_limits, _check_job, _run_as
from stint.runtime.api.context import Ctx, JobId, Who
from stint.runtime.schemas import ArrayCancelOut, ArrayIn, ArrayOut, JobOut

router = APIRouter()


@router.post("/v1/arrays", status_code=201)
def submit_array(body: ArrayIn, who: Who, api: Ctx) -> ArrayOut:
    settings, nodes = api.settings, api.nodes
    spec = _check_job(body, nodes.gpus(), _run_as(who, settings), nodes.type_gpus(),
                      nodes.hosts())
    limits, key = settings.limits.of(who.name), settings.limits.key_of(who.name)
    indices = body.indices()
    ids = api.store.add_array(spec, who, settings.clock(), indices, body.array_parallel,
                              check=lambda usage: _check_array_limits(spec, len(indices), usage,
                                                                      limits, key))
    return ArrayOut(array_id=ids[0], tasks=len(ids), job_ids=ids, first_index=indices[0])


@router.get("/v1/arrays/{array_id}")
def list_array(array_id: JobId, who: Who, api: Ctx) -> list[JobOut]:
    tasks = api.store.array_tasks(array_id, who)
    if not tasks:
        raise HTTPException(404, f"no job array {array_id}")
    users = api.store.user_names()
    return [JobOut.of(j, users.get(j.user_id, "?"), api.nodes.names(j.cluster)) for j in tasks]


@router.post("/v1/arrays/{array_id}/cancel", status_code=202)
def cancel_array(array_id: JobId, who: Who, api: Ctx) -> ArrayCancelOut:
    if not api.store.array_tasks(array_id, who):
        raise HTTPException(404, f"no job array {array_id}")
    return ArrayCancelOut(array_id=array_id,
                          cancelling=api.store.cancel_array(array_id, who, api.settings.clock()))
