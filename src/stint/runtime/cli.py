"""``stint serve`` and the client commands (submit, jobs, show, logs, cancel, preempt, resize,
migrate, nodes, user create, token create). Heavy imports stay inside the command bodies."""

from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from stint.config import ServeConfig

ServerOpt = Annotated[str | None, typer.Option("--server", help="API URL (env STINT_SERVER; "
                                               "default http://127.0.0.1:8765)")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", help="Where serve keeps its state "
                                                 "(env STINT_DATA_DIR; default ~/.stint)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
TokenOpt = Annotated[str | None, typer.Option("--token", help="API token (default: "
                                              "$STINT_TOKEN, else <data-dir>/admin.token)")]


def register(app: typer.Typer) -> None:
    """Add this layer's commands to the ``stint`` app."""
    app.command()(serve)
    app.command(context_settings={"allow_interspersed_args": False})(submit)
    app.command()(jobs)
    app.command()(show)
    app.command()(logs)
    app.command()(cancel)
    app.command()(preempt)
    app.command()(resize)
    app.command()(migrate)
    app.command()(unpin)
    app.command()(wait)
    app.command()(nodes)
    app.command()(replay)
    token_app = typer.Typer(help="API tokens (admin only).", no_args_is_help=True)
    token_app.command("create")(token_create)
    token_app.command("revoke")(token_revoke)
    app.add_typer(token_app, name="token")
    user_app = typer.Typer(help="Users and their OS accounts (admin only).", no_args_is_help=True)
    user_app.command("create")(user_create)
    user_app.command("list")(user_list)
    app.add_typer(user_app, name="user")
    app.command()(whoami)
    app.command()(drain)
    agent_app = typer.Typer(help="A fleet cluster's side: its executor and its copy service "
                            "(docs/fleet.md, Live).", no_args_is_help=True)
    agent_app.command("executor")(agent_executor)
    agent_app.command("storage")(agent_storage)
    app.add_typer(agent_app, name="agent")


def serve(
    config: Annotated[Path | None, typer.Option(help="A TOML config file (see docs/control-"
                                                "plane.md; --print-config writes one); the "
                                                "flags given win over it.")] = None,
    print_config: Annotated[bool, typer.Option("--print-config", help="Print the effective "
                                               "settings as TOML (a valid --config) and "
                                               "exit.")] = False,
    data_dir: DataDirOpt = None,
    db: Annotated[str | None, typer.Option(envvar="STINT_DB", help="Database URL, e.g. "
                                           "postgresql://host/db (default: SQLite in "
                                           "--data-dir). A password here shows in `ps`: put "
                                           "it in STINT_DB or PGPASSWORD instead.")] = None,
    jobs_dir: Annotated[Path | None, typer.Option(help="Each job's log and checkpoints "
                                                  "(default: <data-dir>-jobs).")] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on [default: "
                                             "127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [default: 8765].")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning or error "
                                                  "[default: info].")] = None,
    policy: Annotated[str | None, typer.Option(
        help="A registered policy (`stint policies`) [default: fifo].")] = None,
    policy_opt: Annotated[list[str] | None, typer.Option(
        help="A policy parameter, KEY=VALUE; repeatable (the same keys as `stint sim`).")] = None,
    executor: Annotated[str | None, typer.Option(help="local or ray [default: local].")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="Local executor: virtual nodes "
                                              "[default: 2].")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="Local executor: slots per node "
                                                      "[default: 2].")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Local executor: a cluster file of typed "
                                                 "virtual nodes (docs/simulator.md, Accelerator "
                                                 "types) instead of --nodes/--gpus-per-node.")] = None,
    job_ports: Annotated[str | None, typer.Option(help="Local executor: the jobs' rendezvous "
                                                  "ports (MASTER_PORT), FIRST-LAST or one port, "
                                                  "e.g. 29500-29600 [default: any free port].")]
    = None,
    tick: Annotated[float | None, typer.Option(help="Seconds between reconcile steps "
                                               "[default: 0.5].")] = None,
    grace: Annotated[float | None, typer.Option(help="Seconds a job has to checkpoint before "
                                                "SIGTERM [default: 30].")] = None,
    max_retries: Annotated[int | None, typer.Option(help="Worker failures a job survives "
                                                    "[default: 3].")] = None,
    slow_step: Annotated[float | None, typer.Option(help="Warn of a controller step slower "
                                                    "than this many seconds [default: 1].")]
    = None,
    ray_address: Annotated[str | None, typer.Option(help="--executor ray: the Ray cluster "
                                                    "(default: $RAY_ADDRESS).")] = None,
    drain: Annotated[bool | None, typer.Option("--drain/--no-drain", help="On SIGTERM/SIGINT, "
                                               "checkpoint and stop every job before exiting "
                                               "(default: leave them running for the next "
                                               "start).")] = None,
    max_jobs_per_user: Annotated[int | None, typer.Option(help="Unfinished jobs a user may "
                                                          "have [default: 10000].")] = None,
    max_gpus_per_user: Annotated[int | None, typer.Option(help="GPUs (max_gpus summed) a "
                                                          "user's unfinished jobs may use.")]
    = None,
    max_command_bytes: Annotated[int | None, typer.Option(help="Bytes of one job's command "
                                                          "(at most 262144).")] = None,
    fleet: Annotated[Path | None, typer.Option(help="A fleet TOML file: several clusters, each "
                                               "with its executor and storage (docs/fleet.md)."
                                               )] = None,
    global_policy: Annotated[str | None, typer.Option("--global", help="--fleet: the global "
                                                      "scheduler (gain, static, least-loaded; "
                                                      "default gain).")] = None,
    global_opt: Annotated[list[str] | None, typer.Option(
        help="A global scheduler parameter, KEY=VALUE; repeatable.")] = None,
) -> None:
    """Run the control plane: HTTP API, store, reconcile loop and executor. As root, every job
    runs as its owner's OS account (multi-user mode); otherwise as this account (single-user)."""
    import logging

    from sqlalchemy.exc import SQLAlchemyError

    from stint.config import ConfigError, ServeConfig, dump, load
    from stint.runtime.executor.base import ExecutorError
    from stint.runtime.serve import StartupError
    from stint.runtime.serve import serve as run

    flags = _ServeFlags(
        server=_given(host=host, port=port, log_level=log_level and log_level.lower()),
        store=_given(data_dir=data_dir, db=db, jobs_dir=jobs_dir),
        executor=_given(kind=executor, nodes=nodes, gpus_per_node=gpus_per_node,
                        ray_address=ray_address, cluster=cluster and cluster.resolve(),
                        ports=job_ports),
        controller=_given(tick_s=tick, grace_s=grace, max_retries=max_retries,
                          slow_step_s=slow_step, drain=drain),
        limits=_given(max_jobs=max_jobs_per_user, max_gpus=max_gpus_per_user,
                      max_command_bytes=max_command_bytes),
        fleet=_given(file=fleet and fleet.resolve(), global_policy=global_policy,
                     global_options=tuple(global_opt) if global_opt else None),
        policy=policy, policy_opts=tuple(policy_opt or ()))
    try:  # a bad config file, unknown policy or option: one line, exit status 2
        cfg = flags.apply(load(config) if config is not None else ServeConfig())
        _check_serve(cfg, flags)
    except (ConfigError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if print_config:
        typer.echo(dump(cfg), nl=False)
        return
    level = logging.getLevelNamesMapping()[cfg.server.log_level.upper()]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(max(level, logging.WARNING))  # migrations: at debug
    try:
        run(cfg)
    except (StartupError, ExecutorError, SQLAlchemyError, OSError) as exc:
        what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        typer.echo(f"error: stint serve cannot start: {what}", err=True)
        raise typer.Exit(2) from None


def _given(**values: Any) -> dict[str, Any]:
    """The flags actually given (a flag left out is None)."""
    return {k: v for k, v in values.items() if v is not None}


# The flag that sets each config key (an error in a value a flag gave names the flag).
_FLAG_OF = {"server.host": "--host", "server.port": "--port", "server.log_level": "--log-level",
            "executor.kind": "--executor", "executor.nodes": "--nodes",
            "executor.gpus_per_node": "--gpus-per-node", "executor.cluster": "--cluster",
            "executor.ports": "--job-ports",
            "controller.tick_s": "--tick",
            "controller.grace_s": "--grace", "controller.max_retries": "--max-retries",
            "controller.slow_step_s": "--slow-step", "limits.max_jobs": "--max-jobs-per-user",
            "limits.max_gpus": "--max-gpus-per-user",
            "limits.max_command_bytes": "--max-command-bytes"}


@dataclass(frozen=True, slots=True)
class _ServeFlags:
    """The ``serve`` flags given, by config table (field name -> value); ``apply`` puts them
    over a config."""

    server: dict[str, Any]
    store: dict[str, Any]
    executor: dict[str, Any]
    controller: dict[str, Any]
    limits: dict[str, Any]
    fleet: dict[str, Any]
    policy: str | None
    policy_opts: tuple[str, ...]

    def given(self) -> set[str]:
        return {f"{table}.{k}" for table, given in (
            ("server", self.server), ("store", self.store), ("executor", self.executor),
            ("controller", self.controller), ("limits", self.limits), ("fleet", self.fleet))
            for k in given}

    def apply(self, cfg: ServeConfig) -> ServeConfig:
        from dataclasses import replace

        from stint.config import Limits, PolicyConfig
        from stint.policies.registry import merged_options
        from stint.runtime.client import default_data_dir

        given: dict[str, Any] = {k: Path(v).resolve() if k.endswith("_dir") else v
                                 for k, v in self.store.items()}
        store = replace(cfg.store, **given)
        if store.data_dir is None:
            store = replace(store, data_dir=default_data_dir().resolve())
        return replace(
            cfg, server=replace(cfg.server, **self.server), store=store,
            executor=replace(cfg.executor, **self.executor),
            controller=replace(cfg.controller, **self.controller),
            limits=Limits(replace(cfg.limits.default, **self.limits), cfg.limits.users),
            fleet=replace(cfg.fleet, **self.fleet),
            policy=PolicyConfig(self.policy or cfg.policy.name,
                                merged_options(cfg.policy.options, self.policy_opts)))


def _check_serve(cfg: ServeConfig, flags: _ServeFlags) -> None:
    """A setting out of range, named by its flag if one gave it; then the policy and its
    options (an error the registry words, naming the key and the valid ones)."""
    from stint.config import validate
    from stint.policies.registry import make_with_options

    problem = validate(cfg)
    if problem is not None:
        key, msg = problem
        name = _FLAG_OF.get(key) if key in flags.given() else None
        raise ValueError(f"{name or key}: {msg}")
    make_with_options(cfg.policy_name(), cfg.policy_options())


def submit(
    command: Annotated[list[str], typer.Argument(help="The command to run, after --.")],
    name: Annotated[str, typer.Option(help="A name for the job.")] = "",
    gpus: Annotated[int | None, typer.Option(help="Workers (one GPU each).")] = None,
    min_gpus: Annotated[int | None, typer.Option(help="Fewest workers when resized.")] = None,
    max_gpus: Annotated[int | None, typer.Option(help="Most workers when resized.")] = None,
    tier: Annotated[str, typer.Option(help="premium, standard or basic.")] = "standard",
    priority: Annotated[float, typer.Option(help="Weight (utility) of the job.")] = 1.0,
    deadline: Annotated[float | None, typer.Option(help="Seconds after submission.")] = None,
    est_s: Annotated[float | None, typer.Option(help="Expected run time (s) at --gpus workers, "
                                                "for length-aware policies.")] = None,
    steps: Annotated[int | None, typer.Option(help="Training steps (the SDK reports its "
                                              "step against them).")] = None,
    logical_ranks: Annotated[int | None, typer.Option(help="The SDK's logical ranks (default "
                                                      "--max-gpus); runs on their divisors.")] = None,
    chdir: Annotated[Path | None, typer.Option(help="Working directory of the job "
                                               "(default: this one).")] = None,
    env: Annotated[list[str] | None, typer.Option(help="KEY=VALUE for the job's environment "
                                                  "(repeatable); nothing else of this shell's "
                                                  "environment reaches the job.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory of each worker: bytes, or 512M, "
                                               "16G (default: the server's).")] = None,
    pids: Annotated[int | None, typer.Option(help="Processes and threads of each worker "
                                             "(default: the server's).")] = None,
    time_limit: Annotated[float | None, typer.Option(help="Seconds the job may run, over all "
                                                     "its attempts; then it checkpoints, stops "
                                                     "and fails.")] = None,
    hang_s: Annotated[float | None, typer.Option(help="Restart the job when its step stalls "
                                                 "this many seconds (0: never; default: the "
                                                 "server's).")] = None,
    max_retries: Annotated[int | None, typer.Option(help="Worker failures the job survives "
                                                    "(default: the server's).")] = None,
    array: Annotated[str | None, typer.Option(help="A job array: one task per index A-B "
                                              "(both included), {i} in the command replaced "
                                              "by it, STINT_ARRAY_INDEX in its environment; "
                                              "prints the array's id.")] = None,
    array_parallel: Annotated[int | None, typer.Option(help="Most tasks of the array that run "
                                                       "at once (default: no limit).")] = None,
    test_only: Annotated[bool, typer.Option("--test-only", help="Do not submit: say whether "
                                            "the job would fit (infeasible, fits now, needs "
                                            "preemption, waits), when it would start and "
                                            "finish, and which jobs it would delay.")] = False,
    gpu_type: Annotated[str | None, typer.Option(help="Accelerator types the job may run on, "
                                                 "comma-separated, e.g. a100,v100 (default: "
                                                 "any); it runs on one at a time.")] = None,
    ps: Annotated[int | None, typer.Option("--ps", help="Parameter servers of a stint.torch.ps "
                                           "job at --gpus workers: placed by the policy on "
                                           "nodes of role ps (OASiS), else started beside its "
                                           "first worker (STINT_PS_COUNT).")] = None,
    min_ps: Annotated[int | None, typer.Option("--min-ps", help="Fewest parameter servers the "
                                               "policy may give it (default: --ps).")] = None,
    max_ps: Annotated[int | None, typer.Option("--max-ps", help="Most parameter servers the "
                                               "policy may give it (default: --ps).")] = None,
    ps_cpus: Annotated[float | None, typer.Option("--ps-cpus", help="CPU cores of one parameter "
                                                  "server (default 1).")] = None,
    ps_mem_gb: Annotated[float | None, typer.Option("--ps-mem-gb", help="Memory of one "
                                                    "parameter server, GiB (default 1).")] = None,
    json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None,
) -> None:
    """Submit a job and print its id: stint submit --gpus 2 -- python train.py
    (an array: stint submit --array 0-99 -- python sweep.py --seed {i})"""
    if array_parallel is not None and array is None:
        _fail(ValueError("--array-parallel needs --array"))
    pairs = _env_pairs(env or [])
    memory_max = _size_flag("--memory", memory)
    try:
        cwd: str | None = str((chdir or Path(os.getcwd())).absolute())
    except FileNotFoundError:  # this directory was deleted: the job starts in its home
        cwd = None
    spec: dict[str, Any] = {
        "command": command, "name": name, "gpus": gpus, "min_gpus": min_gpus,
        "max_gpus": max_gpus, "tier": tier, "priority": priority, "deadline_s": deadline,
        "est_s": est_s, "total_steps": steps, "logical_ranks": logical_ranks, "cwd": cwd,
        "env": pairs or None, "memory_max": memory_max, "pids_max": pids,
        "time_limit_s": time_limit, "hang_s": hang_s, "max_retries": max_retries,
        "gpu_types": [t.strip() for t in gpu_type.split(",") if t.strip()] if gpu_type else None,
        "ps": ps, "min_ps": min_ps, "max_ps": max_ps, "ps_cpus": ps_cpus, "ps_mem_gb": ps_mem_gb}
    if test_only:
        if array is not None:
            _fail(ValueError("--test-only takes a single job, not --array"))
        body = {k: v for k, v in spec.items() if v is not None}
        got = _call((server, data_dir, token),
                    lambda c: c.call("POST", "/v1/jobs/dry-run", json=body))
        typer.echo(json.dumps(got, indent=2) if json_out else _dry_run_text(got, time.time()))
        return
    if array is not None:
        got = _call((server, data_dir, token),
                    lambda c: c.submit_array(array, array_parallel, **spec))
        typer.echo(json.dumps(got, indent=2) if json_out else str(got["array_id"]))
        return
    job = _call((server, data_dir, token), lambda c: c.submit(**spec))
    typer.echo(json.dumps(job, indent=2) if json_out else str(job["id"]))


def _dry_run_text(got: dict[str, Any], now: float) -> str:
    """``stint submit --test-only``'s answer, for people."""
    lines = [f"{got['admissible']}: {got['reason']} (policy {got['policy']})"]
    for key, what in (("est_start_at", "start"), ("est_finish_at", "finish")):
        at = got[key]
        when = "not within the forecast" if at is None else (
            f"{time.strftime('%H:%M:%S UTC', time.gmtime(at))} (in {_span(max(0.0, at - now))})")
        lines.append(f"estimated {what}: {when}")
    delays = got["delays"]
    lines.append("delays no job" if not delays else "delays: " + "; ".join(
        f"job {d['job_id']}" + (f" starts {d['start_s']:.0f} s later" if d["start_s"] else "")
        + (f" finishes {d['finish_s']:.0f} s later" if d["finish_s"] else "") for d in delays))
    lines.append(f"basis: {got['basis']}")
    return "\n".join(lines)


def jobs(
    state: Annotated[list[str] | None, typer.Option(help="Only jobs in this state "
                                                    "(repeatable).")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's jobs (another user's: "
                                             "admin only).")] = None,
    limit: Annotated[int | None, typer.Option(help="Only the N most recent jobs.", min=1)]
    = None,
    wide: Annotated[bool, typer.Option("--wide", "-w", help="More columns: nodes, priority, "
                                       "SLA, est. finish, attempt, preemptions, "
                                       "checkpoint.")] = False,
    array: Annotated[int | None, typer.Option(help="Only the tasks of this job array, in "
                                              "index order (with an INDEX column).")] = None,
    json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None,
) -> None:
    """List jobs (yours; all of them for the admin), oldest first: state, tier, workers now /
    min..max, progress (step of total), age, wait, position in the queue (1: next to start),
    estimated start and why a job waits."""
    if array is not None:
        rows = _call((server, data_dir, token), lambda c: c.array_jobs(array))
        rows = [r for r in rows if not state or r["state"] in state]
    else:
        rows = _call((server, data_dir, token), lambda c: c.jobs(state, user))
    if limit is not None:
        rows = rows[-limit:]
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    now = time.time()
    header = ["ID", "NAME", "USER", "STATE", "TIER", "WORKERS", "PROGRESS", "AGE", "WAIT",
              "POS", "EST START", "REASON"]
    extra = ["NODES", "PRIORITY", "SLA", "EST FINISH", "ATTEMPT", "PREEMPTS", "CKPT"]
    table = []
    for r in rows:
        cells = [r["id"], r["name"] or "-", r["user"], r["state"], r["tier"], _workers(r),
                 _progress(r), _span(now - r["submitted_at"]), _wait(r, now),
                 "-" if r.get("queue_position") is None else r["queue_position"], _eta(r, now),
                 r["reason"] if wide else r["reason"][:50]]
        if wide:
            ckpt = (r.get("progress") or {}).get("checkpoint_step")
            cells[-1:-1] = [_where(r["allocation"]) if r["state"] in _HOLDING else "-",
                            f'{r["priority"]:g}', _sla(r.get("attainment")),
                            _eta(r, now, "est_finish_at"), r["attempt"], r["preemptions"],
                            "-" if ckpt is None else ckpt]
        if array is not None:
            cells.insert(1, r["array_index"])
        table.append(cells)
    if array is not None:
        header.insert(1, "INDEX")
    _table(header[:-1] + extra + header[-1:] if wide else header, table)


_HOLDING = ("starting", "running", "checkpointing")  # states that hold GPUs (``states.HOLDING``)
_WAITING = ("queued", "preempted", "admitted", "resumed", "migrating", "resizing")


def _workers(row: dict[str, Any]) -> str:
    """Workers it runs on now / the range it may run on ("2/1..4"; "2" for a rigid job)."""
    now = sum(row["allocation"].values()) if row["state"] in _HOLDING else 0
    lo, hi = row["min_gpus"], row["max_gpus"]
    bounds = str(lo) if lo == hi else f"{lo}..{hi}"
    return f"{now if row['state'] not in _ENDED else '-'}/{bounds}"


def _progress(row: dict[str, Any]) -> str:
    """The step the SDK last reported, of the declared total ("120/300"); "-" if unknown."""
    step = (row.get("progress") or {}).get("step")
    total = row.get("total_steps")
    if step is None:
        return "-" if total is None else f"0/{total}" if row["state"] in _WAITING else "-"
    return str(step) if total is None else f"{step}/{total}"


def _span(seconds: float) -> str:
    """A duration as kubectl shows an age: 42s, 5m10s, 3h05m, 2d04h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _wait(row: dict[str, Any], now: float) -> str:
    """Submission to first start (so far, if it has not started; "-" if it never will)."""
    start = row.get("first_start_at")
    if start is not None:
        return _span(start - row["submitted_at"])
    end = row.get("finished_at")
    return "-" if end is not None else _span(now - row["submitted_at"])


def _sla(value: float | None) -> str:
    """Attainment so far, as ``stint jobs`` shows it."""
    return "-" if value is None else f"{value:.2f}"


def _eta(row: dict[str, Any], now: float, key: str = "est_start_at") -> str:
    """A forecast time relative to now ("in 2m05s"): the start of a waiting job, or (``key``
    est_finish_at) the finish of an unfinished one; "-" when there is none."""
    at = row.get(key)
    waiting = row["state"] in ("queued", "preempted", "admitted")
    if at is None or (key == "est_start_at" and not waiting) or row["state"] in _ENDED:
        return "-"
    if key == "est_start_at":
        return _start_eta(row, now)
    return f"in {_span(at - now)}" if at >= now else "overdue, re-estimating"


def _start_eta(row: dict[str, Any], now: float) -> str:
    """A waiting job's estimated start and its band ("in 2m05s (1m50s-2m40s)"); never a time
    already past: the controller is estimating it again."""
    at, lo, hi = row["est_start_at"], row.get("est_start_lo_at"), row.get("est_start_hi_at")
    if at < now:
        return "overdue, re-estimating"
    band = f" ({_span(max(0.0, lo - now))}-{_span(hi - now)})" if lo is not None and \
        hi is not None and hi > lo else ""
    return f"in {_span(at - now)}{band}"


def show(job: int, json_out: JsonOpt = False, server: ServerOpt = None,
         data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """A job's details and its lifecycle transitions."""
    row = _call((server, data_dir, token), lambda c: c.show(job))
    if json_out:
        typer.echo(json.dumps(row, indent=2))
        return
    now = time.time()
    for key in ("id", "name", "user", "command", "state", "reason", "gpus", "min_gpus", "max_gpus",
                "tier", "priority", "deadline_s", "submitted_at", "first_start_at", "finished_at",
                "attempt", "allocation", "failures", "preemptions", "exit_code", "attained_gpu_s",
                "pin_workers", "pin_node", "worker_counts", "ps", "ps_allocation", "target",
                "decision", "attainment",
                "queue_position", "est_start_at", "est_finish_at", "cluster", "to_cluster",
                "copy_bytes", "copy_s", "retry_at", "run_s"):
        shown = _shown(key, row[key], now)
        if key == "est_start_at" and row[key] is not None:
            shown = _start_eta(row, now) + (f" ({shown.split(' (')[0]})" if row[key] >= now else "")
        typer.echo(f"{key:>15}: {shown}")
    for key in ("memory_max", "pids_max", "time_limit_s", "hang_s", "max_retries"):
        value = row[key]
        typer.echo(f"{key:>15}: {'default' if value is None else _shown(key, value, now)}")

    ckpt = (row.get("progress") or {}).get("checkpoint_step")
    typer.echo(f"{'progress':>15}: {_progress(row)} (last checkpoint: "
               f"{'none' if ckpt is None else f'step {ckpt}'})")
    t0 = row["submitted_at"]
    if any(p["ps"] for p in row.get("plan", [])):  # a PS job's plan: each slot's counts
        _table(["+SECONDS", "PLAN", "WORKERS", "PS"], [
            [f'{p["at"] - t0:.2f}', p["kind"], p["workers"], p["ps"]] for p in row["plan"]])
    _table(["+SECONDS", "FROM", "TO", "ATTEMPT", "REASON"], [
        [f'{t["at"] - t0:.2f}', t["src"] or "-", t["dst"], t["attempt"], t["reason"]]
        for t in row["transitions"]])


def _shown(key: str, value: Any, now: float) -> str:
    """One field of ``stint show``: wall times as UTC with their distance from now, GPU-seconds
    and attainment rounded, the command as a shell line, node maps as ``node x workers``."""
    if value is None or value in ({}, ""):
        return "-"
    if key.endswith("_at"):
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
        return f"{when} ({'in ' + _span(value - now) if value > now else _span(now - value) + ' ago'})"
    if key in ("attained_gpu_s", "copy_s", "run_s"):
        return f"{value:.1f}"
    if key == "memory_max":
        from stint.config import format_size

        return format_size(value)
    if key in ("time_limit_s", "hang_s"):
        return f"{value:g} s" + (" (off)" if key == "hang_s" and not value else "")
    if key == "attainment":
        return f"{value:.3f}"
    if key == "command":
        return shlex.join(value)
    if key in ("allocation", "target", "ps_allocation"):
        return ", ".join(f"{node} x{n}" for node, n in value.items())
    return str(value)


def logs(job: int, follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
         server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Print a job's output (stdout and stderr of all its workers); -f follows it to the end
    and then exits as the job ended: 0 if it succeeded, 1 otherwise (the state on stderr)."""
    from stint.runtime.client import ApiError

    c = _client((server, data_dir, token))
    offset = 0
    try:
        while True:
            chunk = c.logs(job, offset)
            typer.echo(chunk["text"], nl=False)
            offset = chunk["next_offset"]
            if not follow or (chunk["finished"] and not chunk["text"]):
                break
            if not chunk["text"]:
                time.sleep(0.5)
        if follow:
            _exit_as(c.show(job))
    except ApiError as exc:
        _fail(exc)


def wait(job: int, timeout: Annotated[float | None, typer.Option(
             help="Give up after this many seconds (exit 2).")] = None,
         server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Wait until a job ends; exit 0 if it succeeded, 1 otherwise (the state on stderr)."""
    from stint.runtime.client import ApiError

    c = _client((server, data_dir, token))
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while (row := c.show(job))["state"] not in _ENDED:
            if deadline is not None and time.monotonic() > deadline:
                typer.echo(f"job {job}: still {row['state']} after {timeout:g} s", err=True)
                raise typer.Exit(2)
            time.sleep(0.5)
        _exit_as(row)
    except ApiError as exc:
        _fail(exc)


_ENDED = ("succeeded", "failed", "cancelled", "rejected")


def _exit_as(row: dict[str, Any]) -> None:
    """Exit with the job's outcome: 0 if it succeeded, else 1, saying how it ended."""
    if row["state"] != "succeeded":
        typer.echo(f"job {row['id']} {row['state']}: {row['reason']}", err=True)
        raise typer.Exit(1)


def cancel(job: Annotated[int | None, typer.Argument()] = None,
           array: Annotated[int | None, typer.Option(help="Cancel every unfinished task of "
                                                     "this job array instead.")] = None,
           server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Cancel a job (its processes are killed), or every task of an array (--array ID)."""
    if (job is None) == (array is None):
        _fail(ValueError("give a job id or --array ID (one of them)"))
    if array is not None:
        got = _call((server, data_dir, token), lambda c: c.cancel_array(array))
        typer.echo(f"array {array}: cancel requested for {len(got['cancelling'])} tasks")
        return
    assert job is not None
    _act(job, "cancel", None, (server, data_dir, token))


def preempt(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Checkpoint and stop a running job; the policy decides when it resumes."""
    _act(job, "preempt", None, (server, data_dir, token))


def resize(job: int, workers: int, server: ServerOpt = None, data_dir: DataDirOpt = None,
           token: TokenOpt = None) -> None:
    """Pin a job's worker count (one it can run on): checkpoint, restart with WORKERS (admin;
    a queued job keeps the pin until the policy starts it)."""
    _act(job, "resize", {"workers": workers}, (server, data_dir, token))


def migrate(job: int, to: Annotated[str | None, typer.Option("--to", help="Node name.")] = None,
            to_cluster: Annotated[str | None, typer.Option(
                "--to-cluster", help="Another cluster of the fleet.")] = None,
            server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Pin a job to a node (--to: checkpoint, restart all its workers there), or move it to
    another cluster of the fleet (--to-cluster: checkpoint, copy the checkpoint, resume there)."""
    if (to is None) == (to_cluster is None):
        typer.echo("error: give one of --to NODE and --to-cluster CLUSTER", err=True)
        raise typer.Exit(2)
    body = {"node": to} if to is not None else {"to_cluster": to_cluster}
    _act(job, "migrate", body, (server, data_dir, token))


def unpin(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Drop an operator pin (resize/migrate): the policy decides the job's size and place again."""
    _act(job, "unpin", None, (server, data_dir, token))


def replay(
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="The data directory of the "
                                                 "live run's `stint serve` (its SQLite store).")] = None,
    db: Annotated[str | None, typer.Option(help="Or its database URL.")] = None,
    output: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    policy: Annotated[str | None, typer.Option(help="Replay under this policy [default: the "
                                               "one the live run used].")] = None,
    policy_opt: Annotated[list[str] | None, typer.Option(help="Its options, KEY=VALUE "
                                                         "(repeatable) [default: the live run's].")] = None,
    jitter_s: Annotated[float, typer.Option(help="Decisions closer than this may come in "
                                            "either order.")] = 2.0,
) -> None:
    """Simulate a live run again (same submissions, policy and options, measured costs and
    step times) and compare, per job and in total, start, JCT, preemptions, resizes and the
    sequence of decisions."""
    from stint.policies.registry import make_with_options
    from stint.runtime.measured import open_store
    from stint.runtime.twin import compare, load, text

    if (data_dir is None) == (db is None) or output not in ("table", "json"):
        typer.echo("error: give one of --data-dir or --db, and --format table or json", err=True)
        raise typer.Exit(2)
    try:
        store = open_store(db if db is not None else str(data_dir))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        run = load(store)
    finally:
        store.close()
    name, options = run.policy or ("fifo", ())
    if policy is not None:
        name, options = policy, ()
    options = tuple(policy_opt) if policy_opt is not None else options
    try:
        make_with_options(name, options)
    except (KeyError, ValueError) as exc:
        typer.echo(f"error: {str(exc).strip(chr(39))}", err=True)
        raise typer.Exit(2) from None
    if not run.specs:
        typer.echo("error: the store holds no jobs to replay", err=True)
        raise typer.Exit(2)
    report = compare(run, name, options, jitter_s)
    typer.echo(json.dumps(report.as_dict(), indent=2) if output == "json" else text(report))


def nodes(json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None,
          token: TokenOpt = None) -> None:
    """The cluster's nodes with their used and free GPUs."""
    rows = _call((server, data_dir, token), lambda c: c.nodes())
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    _table(["NODE", "CLUSTER", "REGION", "TYPE", "ROLE", "GPUS", "USED", "FREE", "CPUS", "MEM_GB",
            "PS", "STATE", "JOBS"],
           [[r["name"], r["cluster"] or "-", r["region"] or "-", r.get("gpu_type") or "-",
             r.get("role", "any"), r["gpus"], r["used"], r["free"], f"{r.get('cpus', 0):g}",
             f"{r.get('mem_gb', 0):g}", r.get("ps", 0), r["state"],
             ",".join(map(str, r["jobs"]))] for r in rows])


ListenOpt = Annotated[str, typer.Option(help="HOST:PORT to listen on.")]
SecretOpt = Annotated[Path, typer.Option(help="A copy of the control plane's "
                                         "<data-dir>/fleet.secret (mode 0600): only callers "
                                         "with it are answered.")]


def _secret(path: Path) -> str:
    from stint.runtime.fleet_secret import SecretError, load

    try:
        return load(path)
    except SecretError as exc:
        typer.echo(f"error: --secret-file: {exc}", err=True)
        raise typer.Exit(2) from None


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        typer.echo(f"error: --listen must be HOST:PORT, not {listen!r}", err=True)
        raise typer.Exit(2)
    return host, int(port)


def agent_executor(
    listen: ListenOpt,
    state_dir: Annotated[Path, typer.Option(help="The executor's durable state.")],
    secret_file: SecretOpt,
    nodes: Annotated[int, typer.Option("--nodes", help="local: virtual nodes.")] = 1,
    gpus_per_node: Annotated[int, typer.Option(help="local: slots per node.")] = 1,
    executor: Annotated[str, typer.Option(help="local (virtual nodes) or ray (a Ray cluster's "
                                          "nodes).")] = "local",
    ray_address: Annotated[str | None, typer.Option(help="--executor ray: the Ray cluster "
                                                    "(default $RAY_ADDRESS).")] = None,
) -> None:
    """Run a cluster's executor for a fleet's control plane (the cluster's ``executor =
    "http://HOST:PORT"``): local virtual nodes, or a Ray cluster (one agent per Ray cluster,
    so one control plane drives several). SIGTERM kills its workers and exits."""
    import logging

    from stint.runtime.executor.base import ExecutorError
    from stint.runtime.executor.make import make_executor
    from stint.runtime.executor.remote import run_agent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    host, port = _host_port(listen)
    secret = _secret(secret_file)
    try:
        ex = make_executor(executor, state_dir, nodes, gpus_per_node, ray_address)
        run_agent(ex, host, port, secret)
    except (OSError, ValueError, ExecutorError) as exc:
        typer.echo(f"error: stint agent executor cannot start: {exc}", err=True)
        raise typer.Exit(2) from None


def agent_storage(
    listen: ListenOpt,
    dir: Annotated[Path, typer.Option("--dir", help="The cluster's checkpoint storage.")],
    secret_file: SecretOpt,
) -> None:
    """Run a cluster's copy service over its storage directory (the cluster's ``copy =
    "HOST:PORT"``): serves its jobs' checkpoints, fetches others' from peers, verified."""
    from stint.runtime.copy import serve_storage

    host, port = _host_port(listen)
    secret = _secret(secret_file)
    try:
        server = serve_storage(dir, host, port, secret)
    except OSError as exc:
        typer.echo(f"error: stint agent storage cannot start: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"copy service for {dir} on {host}:{server.server_address[1]}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


AdminOpt = Annotated[bool | None, typer.Option("--admin/--no-admin", help="Make the user an "
                                               "admin, or no longer one (default: unchanged).")]


def token_create(
    user: str, admin: AdminOpt = None,
    server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None,
) -> None:
    """Create USER (if new) and print a new API token for it; its earlier token stops working."""
    row = _call((server, data_dir, token), lambda c: c.create_token(user, admin))
    typer.echo(row["token"])


def user_create(
    user: str,
    os_user: Annotated[str | None, typer.Option(help="The OS account the user's jobs run as "
                                                "(must exist on the control plane's host).")] = None,
    admin: AdminOpt = None,
    server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None,
) -> None:
    """Create USER (or update it) with the OS account its jobs run as; print its new token."""
    row = _call((server, data_dir, token), lambda c: c.create_token(user, admin, os_user))
    typer.echo(row["token"])


def token_revoke(user: str, server: ServerOpt = None, data_dir: DataDirOpt = None,
                 token: TokenOpt = None) -> None:
    """Revoke USER's token: it stops working at once (``token create`` gives a new one)."""
    _call((server, data_dir, token), lambda c: c.revoke_token(user))
    typer.echo(f"revoked the token of {user}")


def user_list(json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None,
              token: TokenOpt = None) -> None:
    """Users with their role, OS account and whether they hold a token."""
    rows = _call((server, data_dir, token), lambda c: c.users())
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    _table(["USER", "ADMIN", "OS USER", "TOKEN"], [
        [r["user"], "yes" if r["admin"] else "no", r["os_user"] or "-",
         "revoked" if r["token_created_at"] is None else "valid"] for r in rows])


def drain(server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Admin: checkpoint and stop every job, then stop stint serve (they resume at its next
    start)."""
    r = _call((server, data_dir, token), lambda c: c.call("POST", "/v1/drain"))
    jobs = ", ".join(r["draining"]) or "none"
    typer.echo(f"draining (jobs {jobs}); stint serve exits once they have checkpointed")


def whoami(server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Who the token belongs to, its role and the OS account its jobs run as."""
    r = _call((server, data_dir, token), lambda c: c.whoami())
    runs = (f"jobs run as {r['os_user']}" if r["os_user"] else
            "no OS account: submissions are refused until an admin maps one")
    typer.echo(f"{r['user']} ({'admin' if r['admin'] else 'user'}; {runs})")


# -- helpers -------------------------------------------------------------------------------
def _size_flag(flag: str, text: str | None) -> int | None:
    """Bytes from a size flag (``--memory 16G``); a bad one is a one-line error naming it."""
    from stint.config import parse_size

    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as exc:
        typer.echo(f"error: {flag}: {exc}", err=True)
        raise typer.Exit(2) from None


def _env_pairs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            typer.echo(f"error: --env {item!r}: expected KEY=VALUE", err=True)
            raise typer.Exit(2)
        out[key] = value
    return out


Where = tuple[str | None, Path | None, str | None]  # --server, --data-dir, --token


def _client(where: Where) -> Any:
    from stint.runtime.client import ApiError, Client, resolve

    server, data_dir, token = where
    try:
        return Client(*resolve(server, token, data_dir))
    except ApiError as exc:
        _fail(exc)


def _call(where: Where, fn: Any) -> Any:
    from stint.runtime.client import ApiError

    c = _client(where)
    try:
        return fn(c)
    except ApiError as exc:
        _fail(exc)
    finally:
        c.close()


def _act(job: int, verb: str, body: dict[str, Any] | None, where: Where) -> None:
    row = _call(where, lambda c: c.act(job, verb, body))
    typer.echo(f"job {row['id']}: {verb} requested (state {row['state']})")


def _fail(exc: Exception) -> None:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def _where(alloc: dict[str, int]) -> str:
    return " ".join(f"{n}x{c}" for n, c in alloc.items()) or "-"


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


