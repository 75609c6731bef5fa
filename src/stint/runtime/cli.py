"""``stint serve`` and the client commands (submit, jobs, show, logs, cancel, preempt, resize,
migrate, nodes, token create). Heavy imports stay inside the command bodies."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

ServerOpt = Annotated[str | None, typer.Option("--server", help="API URL (env STINT_SERVER; "
                                               "default http://127.0.0.1:8765)")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", help="Where serve keeps its state "
                                                 "(env STINT_DATA_DIR; default ~/.stint)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


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
    app.command()(nodes)
    token_app = typer.Typer(help="API tokens (admin only).", no_args_is_help=True)
    token_app.command("create")(token_create)
    app.add_typer(token_app, name="token")


def serve(
    data_dir: DataDirOpt = None,
    db: Annotated[str | None, typer.Option(help="Database URL, e.g. postgresql://host/db "
                                           "(default: SQLite in --data-dir)")] = None,
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
) -> None:
    """Run the control plane: HTTP API, store, reconcile loop and executor."""
    import logging

    from stint.config import PolicyConfig, load_policy, merged_options
    from stint.policies.registry import make_with_options
    from stint.runtime.client import default_data_dir
    from stint.runtime.serve import ServeOptions
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
    run(ServeOptions(data_dir=(data_dir or default_data_dir()).resolve(), db=db, host=host,
                     port=port, policy=name, policy_options=options,
                     executor=executor, nodes=nodes,
                     gpus_per_node=gpus_per_node, tick_s=tick, grace_s=grace,
                     max_retries=max_retries, ray_address=ray_address))


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
    json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None,
) -> None:
    """Submit a job and print its id: stint submit --gpus 2 -- python train.py"""
    job = _call(server, data_dir, lambda c: c.submit(
        command=command, name=name, gpus=gpus, min_gpus=min_gpus, max_gpus=max_gpus, tier=tier,
        priority=priority, deadline_s=deadline, est_s=est_s, total_steps=steps,
        logical_ranks=logical_ranks))
    typer.echo(json.dumps(job, indent=2) if json_out else str(job["id"]))


def jobs(
    state: Annotated[list[str] | None, typer.Option(help="Only jobs in this state.")] = None,
    json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None,
) -> None:
    """List jobs (yours; all of them for the admin)."""
    rows = _call(server, data_dir, lambda c: c.jobs(state))
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    _table(["ID", "NAME", "USER", "STATE", "TIER", "SLA", "GPUS", "WHERE", "ATTEMPT", "REASON"], [
        [r["id"], r["name"], r["user"], r["state"], r["tier"], _sla(r.get("attainment")),
         f'{r["min_gpus"]}-{r["gpus"]}-{r["max_gpus"]}', _where(r["allocation"]), r["attempt"],
         r["reason"][:50]] for r in rows])


def _sla(value: float | None) -> str:
    """Attainment so far, as ``stint jobs`` shows it."""
    return "-" if value is None else f"{value:.2f}"


def show(job: int, json_out: JsonOpt = False, server: ServerOpt = None,
         data_dir: DataDirOpt = None) -> None:
    """A job's details and its lifecycle transitions."""
    row = _call(server, data_dir, lambda c: c.show(job))
    if json_out:
        typer.echo(json.dumps(row, indent=2))
        return
    for key in ("id", "name", "user", "command", "state", "reason", "gpus", "min_gpus", "max_gpus",
                "tier", "priority", "deadline_s", "attempt", "allocation", "failures",
                "preemptions", "exit_code", "attained_gpu_s", "pin_workers", "pin_node",
                "worker_counts", "target", "decision", "attainment"):
        typer.echo(f"{key:>15}: {row[key]}")
    t0 = row["submitted_at"]
    _table(["+SECONDS", "FROM", "TO", "ATTEMPT", "REASON"], [
        [f'{t["at"] - t0:.2f}', t["src"] or "-", t["dst"], t["attempt"], t["reason"]]
        for t in row["transitions"]])


def logs(job: int, follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
         server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """Print a job's output (stdout and stderr of all its workers); -f follows it to the end."""
    from stint.runtime.client import ApiError

    c = _client(server, data_dir)
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
    except ApiError as exc:
        _fail(exc)


def cancel(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """Cancel a job (its processes are killed)."""
    _act(job, "cancel", None, server, data_dir)


def preempt(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """Checkpoint and stop a running job; the policy decides when it resumes."""
    _act(job, "preempt", None, server, data_dir)


def resize(job: int, workers: int, server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """Pin a job's worker count (one it can run on): checkpoint, restart with WORKERS (admin;
    a queued job keeps the pin until the policy starts it)."""
    _act(job, "resize", {"workers": workers}, server, data_dir)


def migrate(job: int, to: Annotated[str, typer.Option("--to", help="Node name.")],
            server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """Pin a job to a node: checkpoint, restart all its workers there."""
    _act(job, "migrate", {"node": to}, server, data_dir)


def unpin(job: int, server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """Drop an operator pin (resize/migrate): the policy decides the job's size and place again."""
    _act(job, "unpin", None, server, data_dir)


def nodes(json_out: JsonOpt = False, server: ServerOpt = None, data_dir: DataDirOpt = None) -> None:
    """The cluster's nodes with their used and free GPUs."""
    rows = _call(server, data_dir, lambda c: c.nodes())
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    _table(["NODE", "GPUS", "USED", "FREE", "STATE", "JOBS"],
           [[r["name"], r["gpus"], r["used"], r["free"], r["state"],
             ",".join(map(str, r["jobs"]))] for r in rows])


def token_create(
    user: str, admin: Annotated[bool, typer.Option(help="Make the user an admin.")] = False,
    server: ServerOpt = None, data_dir: DataDirOpt = None,
) -> None:
    """Create USER (if new) and print a new API token for it; its earlier token stops working."""
    row = _call(server, data_dir, lambda c: c.create_token(user, admin))
    typer.echo(row["token"])


# -- helpers -------------------------------------------------------------------------------
def _client(server: str | None, data_dir: Path | None) -> Any:
    from stint.runtime.client import ApiError, Client, resolve

    try:
        return Client(*resolve(server, None, data_dir))
    except ApiError as exc:
        _fail(exc)


def _call(server: str | None, data_dir: Path | None, fn: Any) -> Any:
    from stint.runtime.client import ApiError

    c = _client(server, data_dir)
    try:
        return fn(c)
    except ApiError as exc:
        _fail(exc)
    finally:
        c.close()


def _act(job: int, verb: str, body: dict[str, Any] | None, server: str | None,
         data_dir: Path | None) -> None:
    row = _call(server, data_dir, lambda c: c.act(job, verb, body))
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


