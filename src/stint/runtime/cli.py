"""``stint serve`` and the client commands (submit, jobs, show, logs, cancel, preempt, resize,
migrate, nodes, user create, token create). Heavy imports stay inside the command bodies."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

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
    data_dir: DataDirOpt = None,
    db: Annotated[str | None, typer.Option(envvar="STINT_DB", help="Database URL, e.g. "
                                           "postgresql://host/db (default: SQLite in "
                                           "--data-dir). A password here shows in `ps`: put "
                                           "it in STINT_DB or PGPASSWORD instead.")] = None,
    jobs_dir: Annotated[Path | None, typer.Option(help="Each job's log and checkpoints "
                                                  "(default: <data-dir>-jobs).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    policy: Annotated[str | None, typer.Option(
        help="A registered policy (`stint policies`) [default: fifo].")] = None,
    config: Annotated[Path | None, typer.Option(help="A TOML config file: [policy] name and "
                                                "[policy.options] (flags win).")] = None,
    policy_opt: Annotated[list[str] | None, typer.Option(
        help="A policy parameter, KEY=VALUE; repeatable (the same keys as `stint sim`).")] = None,
    executor: Annotated[str, typer.Option(help="local or ray.")] = "local",
    nodes: Annotated[int, typer.Option("--nodes", help="Local executor: virtual nodes.")] = 2,
    gpus_per_node: Annotated[int, typer.Option(help="Local executor: slots per node.")] = 2,
    tick: Annotated[float, typer.Option(help="Seconds between reconcile steps.")] = 0.5,
    grace: Annotated[float, typer.Option(help="Seconds a job has to checkpoint before "
                                         "SIGTERM.")] = 30.0,
    max_retries: Annotated[int, typer.Option(help="Worker failures a job survives.")] = 3,
    ray_address: Annotated[str | None, typer.Option(help="--executor ray: the Ray cluster "
                                                    "(default: $RAY_ADDRESS).")] = None,
    drain: Annotated[bool, typer.Option("--drain", help="On SIGTERM/SIGINT, checkpoint and stop "
                                        "every job before exiting (default: leave them "
                                        "running for the next start).")] = False,
    max_jobs_per_user: Annotated[int, typer.Option(help="Unfinished jobs a user may have.")]
    = 10_000,
    max_gpus_per_user: Annotated[int | None, typer.Option(help="GPUs (max_gpus summed) a "
                                                          "user's unfinished jobs may use.")]
    = None,
    max_command_bytes: Annotated[int, typer.Option(help="Bytes of one job's command (at most "
                                                   "262144).")] = 256 * 1024,
    fleet: Annotated[Path | None, typer.Option(help="A fleet TOML file: several clusters, each "
                                               "with its executor and storage (docs/fleet.md)."
                                               )] = None,
    global_policy: Annotated[str, typer.Option("--global", help="--fleet: the global scheduler "
                                               "(gain, static, least-loaded).")] = "gain",
    global_opt: Annotated[list[str] | None, typer.Option(
        help="A global scheduler parameter, KEY=VALUE; repeatable.")] = None,
) -> None:
    """Run the control plane: HTTP API, store, reconcile loop and executor. As root, every job
    runs as its owner's OS account (multi-user mode); otherwise as this account (single-user)."""
    import logging

    from sqlalchemy.exc import SQLAlchemyError

    from stint.config import PolicyConfig, load_policy, merged_options
    from stint.policies.registry import make_with_options
    from stint.runtime.api import UserLimits
    from stint.runtime.client import default_data_dir
    from stint.runtime.executor.base import ExecutorError
    from stint.runtime.serve import ServeOptions, StartupError
    from stint.runtime.serve import serve as run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:  # a bad config file, unknown policy or option: one line, exit status 2
        conf = load_policy(config) if config is not None else PolicyConfig(None, ())
        name = policy or conf.name or "fifo"
        options = merged_options(conf.options, tuple(policy_opt or ()))
        make_with_options(name, options)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        run(ServeOptions(data_dir=(data_dir or default_data_dir()).resolve(), db=db, host=host,
                         port=port, policy=name, policy_options=options, executor=executor,
                         nodes=nodes, gpus_per_node=gpus_per_node, tick_s=tick, grace_s=grace,
                         max_retries=max_retries, ray_address=ray_address,
                         jobs_dir=jobs_dir.resolve() if jobs_dir else None, drain=drain,
                         limits=UserLimits(max_jobs_per_user, max_gpus_per_user,
                                           max_command_bytes),
                         fleet=fleet.resolve() if fleet else None, global_policy=global_policy,
                         global_options=tuple(global_opt or ())))
    except (StartupError, ExecutorError, SQLAlchemyError, OSError) as exc:
        what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        typer.echo(f"error: stint serve cannot start: {what}", err=True)
        raise typer.Exit(2) from None


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
    json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None,
) -> None:
    """Submit a job and print its id: stint submit --gpus 2 -- python train.py"""
    pairs = _env_pairs(env or [])
    try:
        cwd: str | None = str((chdir or Path(os.getcwd())).absolute())
    except FileNotFoundError:  # this directory was deleted: the job starts in its home
        cwd = None
    job = _call((server, data_dir, token), lambda c: c.submit(
        command=command, name=name, gpus=gpus, min_gpus=min_gpus, max_gpus=max_gpus, tier=tier,
        priority=priority, deadline_s=deadline, est_s=est_s, total_steps=steps,
        logical_ranks=logical_ranks, cwd=cwd, env=pairs or None))
    typer.echo(json.dumps(job, indent=2) if json_out else str(job["id"]))


def jobs(
    state: Annotated[list[str] | None, typer.Option(help="Only jobs in this state.")] = None,
    json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None,
) -> None:
    """List jobs (yours; all of them for the admin)."""
    rows = _call((server, data_dir, token), lambda c: c.jobs(state))
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    now = time.time()
    _table(["ID", "NAME", "USER", "STATE", "TIER", "SLA", "GPUS", "WHERE", "ATTEMPT", "EST START",
            "REASON"], [
        [r["id"], r["name"], r["user"], r["state"], r["tier"], _sla(r.get("attainment")),
         f'{r["min_gpus"]}-{r["gpus"]}-{r["max_gpus"]}', _where(r["allocation"]), r["attempt"],
         _eta(r, now), r["reason"][:50]] for r in rows])


def _sla(value: float | None) -> str:
    """Attainment so far, as ``stint jobs`` shows it."""
    return "-" if value is None else f"{value:.2f}"


def _eta(row: dict[str, Any], now: float) -> str:
    """A waiting job's forecast start, relative to now ("in 2m05s"); "-" when there is none."""
    at = row.get("est_start_at")
    if at is None or row["state"] not in ("queued", "preempted", "admitted"):
        return "-"
    left = max(0, int(at - now))
    return f"in {left // 60}m{left % 60:02d}s" if left >= 60 else f"in {left}s"


def show(job: int, json_out: JsonOpt = False, server: ServerOpt = None,
         data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """A job's details and its lifecycle transitions."""
    row = _call((server, data_dir, token), lambda c: c.show(job))
    if json_out:
        typer.echo(json.dumps(row, indent=2))
        return
    for key in ("id", "name", "user", "command", "state", "reason", "gpus", "min_gpus", "max_gpus",
                "tier", "priority", "deadline_s", "attempt", "allocation", "failures",
                "preemptions", "exit_code", "attained_gpu_s", "pin_workers", "pin_node",
                "worker_counts", "target", "decision", "attainment", "est_start_at",
                "est_finish_at", "cluster", "to_cluster", "copy_bytes", "copy_s"):
        typer.echo(f"{key:>15}: {row[key]}")
    t0 = row["submitted_at"]
    _table(["+SECONDS", "FROM", "TO", "ATTEMPT", "REASON"], [
        [f'{t["at"] - t0:.2f}', t["src"] or "-", t["dst"], t["attempt"], t["reason"]]
        for t in row["transitions"]])


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


def cancel(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Cancel a job (its processes are killed)."""
    _act(job, "cancel", None, (server, data_dir, token))


def preempt(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """Checkpoint and stop a running job; the policy decides when it resumes."""
    _act(job, "preempt", None, (server, data_dir, token))


def resize(job: int, workers: int, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
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


def nodes(json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None, token: TokenOpt = None) -> None:
    """The cluster's nodes with their used and free GPUs."""
    rows = _call((server, data_dir, token), lambda c: c.nodes())
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    _table(["NODE", "CLUSTER", "REGION", "GPUS", "USED", "FREE", "STATE", "JOBS"],
           [[r["name"], r["cluster"] or "-", r["region"] or "-", r["gpus"], r["used"], r["free"],
             r["state"], ",".join(map(str, r["jobs"]))] for r in rows])


ListenOpt = Annotated[str, typer.Option(help="HOST:PORT to listen on.")]


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        typer.echo(f"error: --listen must be HOST:PORT, not {listen!r}", err=True)
        raise typer.Exit(2)
    return host, int(port)


def agent_executor(
    listen: ListenOpt,
    state_dir: Annotated[Path, typer.Option(help="The executor's durable state.")],
    nodes: Annotated[int, typer.Option("--nodes", help="Virtual nodes.")] = 1,
    gpus_per_node: Annotated[int, typer.Option(help="Slots per node.")] = 1,
) -> None:
    """Run a cluster's executor (local virtual nodes) for a fleet's control plane (the
    cluster's ``executor = "http://HOST:PORT"``). SIGTERM kills its workers and exits."""
    import logging

    from stint.runtime.executor.local import LocalExecutor
    from stint.runtime.executor.remote import run_agent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    host, port = _host_port(listen)
    try:
        run_agent(LocalExecutor(state_dir, nodes=nodes, gpus_per_node=gpus_per_node), host, port)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: stint agent executor cannot start: {exc}", err=True)
        raise typer.Exit(2) from None


def agent_storage(
    listen: ListenOpt,
    dir: Annotated[Path, typer.Option("--dir", help="The cluster's checkpoint storage.")],
) -> None:
    """Run a cluster's copy service over its storage directory (the cluster's ``copy =
    "HOST:PORT"``): serves its jobs' checkpoints, fetches others' from peers, verified."""
    from stint.runtime.copy import serve_storage

    host, port = _host_port(listen)
    try:
        server = serve_storage(dir, host, port)
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
    typer.echo(f"{r['user']} ({'admin' if r['admin'] else 'user'}; jobs run as "
               f"{r['os_user'] or 'the control plane account'})")


# -- helpers -------------------------------------------------------------------------------
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


