"""``/v1/jobs``: submit (and its dry run), list, show, cancel and preempt a job. Handlers check
input and record requests in the store; the controller carries them out at its next step."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.exceptions import RequestValidationError

from stint.model.job import Tier
from stint.runtime.api.checks import _check_job, _check_limits, _run_as
from stint.runtime.api.context import Ctx, JobId, Who, progress_of
from stint.runtime.schemas import (
    MAX_ID,
    USER_NAME,
    DryRunOut,
    JobDetail,
    JobIn,
    JobOut,
    PlanStepOut,
    TransitionOut,
)
from stint.runtime.states import JobState
from stint.runtime.store import Caller, JobFilter, JobOrder

router = APIRouter()


@router.post("/v1/jobs", status_code=201, response_model=JobOut)
async def submit(body: JobIn, who: Who, api: Ctx) -> Response:
    """On the event loop (no thread-pool hop); answered once committed, in a transaction
    shared with the submissions that arrived meanwhile (``runtime.intake``)."""
    settings, nodes, out = api.settings, api.nodes, api.out
    spec = _check_job(body, nodes.gpus(), _run_as(who, settings), nodes.type_gpus(),
                      nodes.hosts())
    limits, key = settings.limits.of(who.name), settings.limits.key_of(who.name)
    job = await api.intake.add_job(spec, who, settings.clock(),
                                   check=lambda usage: _check_limits(spec, usage, limits, key))
    return Response(out(job, who).model_dump_json(), 201, media_type="application/json")


@router.post("/v1/jobs/dry-run")
def dry_run(body: JobIn, who: Who, api: Ctx) -> DryRunOut:
    """Whether the job would fit and when, from a forecast with it added; not stored."""
    from stint.runtime.whatif import infeasible, out_of, what_if

    store, settings, nodes = api.store, api.settings, api.nodes
    spec = _check_job(body, nodes.gpus(), _run_as(who, settings), nodes.type_gpus(),
                      nodes.hosts())
    limits, key = settings.limits.of(who.name), settings.limits.key_of(who.name)
    try:
        _check_limits(spec, store.live_usage(who.user_id), limits, key)
    except HTTPException as exc:
        return out_of(infeasible(f"over your limits: {exc.detail}", settings.policy))
    except RequestValidationError as exc:
        return out_of(infeasible(f"over your limits: {exc.errors()[0]['msg']}",
                                 settings.policy))
    return out_of(what_if(store, spec, who, settings.clock(), settings.policy))


@router.get("/v1/jobs")
def list_jobs(
    who: Who,
    api: Ctx,
    response: Response,
    state: Annotated[list[JobState] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    user: Annotated[str | None, Query(pattern=USER_NAME)] = None,
    tier: Tier | None = None,
    array: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    order: JobOrder = "asc",
) -> list[JobOut]:
    """A page of the jobs the caller sees; ``X-Total-Count``: how many match in all."""
    store = api.store
    users = store.user_names()
    only = _only_user(who, user, users)
    states = [str(s) for s in state or []]
    where = JobFilter(tier=tier.value if tier else None, array_id=array,
                      order=order)
    jobs = store.list_jobs(who, states, limit, offset, only, where)
    response.headers["X-Total-Count"] = str(store.count_listed(who, states, only, where))
    return [JobOut.of(j, users.get(j.user_id, "?"), api.nodes.names(j.cluster),
                      progress=progress_of(api.settings, j)) for j in jobs]


@router.get("/v1/jobs/{job_id}")
def show(job_id: JobId, who: Who, api: Ctx) -> JobDetail:
    job = api.own_job(job_id, who)
    trans = [TransitionOut.of(t) for t in api.store.transitions(job_id)]
    plan = [PlanStepOut.of(d) for d in api.store.decisions(job_id)]
    return JobDetail(**api.out(job, who).model_dump(), transitions=trans, plan=plan)


@router.post("/v1/jobs/{job_id}/cancel", status_code=202)
def cancel(job_id: JobId, who: Who, api: Ctx) -> JobOut:
    api.live_job(job_id, who)
    api.store.request(job_id, who, "cancel", "", api.settings.clock(), cancel_requested=True)
    return api.out(api.own_job(job_id, who), who)


@router.post("/v1/jobs/{job_id}/preempt", status_code=202)
def preempt(job_id: JobId, who: Who, api: Ctx) -> JobOut:
    job = api.live_job(job_id, who)
    if job.state not in (JobState.RUNNING, JobState.STARTING):
        raise HTTPException(409, f"job {job_id} is {job.state}, not running")
    api.store.request(job_id, who, "preempt", "", api.settings.clock(), preempt_requested=True)
    return api.out(api.own_job(job_id, who), who)


def _only_user(who: Caller, user: str | None, users: dict[int, str]) -> int | None:
    """The user id ``GET /v1/jobs?user=NAME`` lists (None: every job the caller sees); 403 for
    someone else's unless the caller is an admin, 404 for no such user."""
    if user is None:
        return None
    if user != who.name and not who.is_admin:
        raise HTTPException(403, f"only an admin may list another user's jobs (you are "
                            f"{who.name})")
    ids = [uid for uid, name in users.items() if name == user]
    if not ids:
        raise HTTPException(404, f"no user {user}")
    return ids[0]
