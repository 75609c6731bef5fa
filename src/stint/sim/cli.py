"""``stint sim``: compare scheduling policies on a trace (see docs/simulator.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stint.sim.traces import Filters

if TYPE_CHECKING:
    from stint.sim.fleet_run import FleetConfig
    from stint.sim.metrics import RunResult


def register(app: typer.Typer) -> None:
    """Add this layer's commands to the ``stint`` app."""
    app.command("sim")(sim)
    app.command("sweep")(sweep)


def sim(
    trace: Annotated[str, typer.Option(help="'philly', 'pollux:N' (N=1..8) or a CSV path.")] = "philly",
    policy: Annotated[str | None, typer.Option(
        help="Comma-separated policy names [default: fifo,srtf,drf,tiresias].")] = None,
    config: Annotated[Path | None, typer.Option(help="A TOML config file: [policy] name and "
                                                "[policy.options] (flags win).")] = None,
    policy_opt: Annotated[list[str] | None, typer.Option(
        help="A policy parameter, KEY=VALUE (POLICY.KEY=VALUE for one of several); repeatable. "
        "`stint policies` lists each policy's keys.")] = None,
    gpus: Annotated[int | None, typer.Option(help="Cluster size in GPUs, as nodes of 8 GPUs.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Number of nodes.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the fields a trace lacks (utility, tier).")] = 0,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("results"),
    format: Annotated[str, typer.Option(help="'table' (Rich) or 'json' (summary on stdout).")] = "table",
    limit: Annotated[int | None, typer.Option(help="Keep only the first N jobs (by arrival).")] = None,
    vc: Annotated[str | None, typer.Option(help="Keep only this virtual cluster (Philly).")] = None,
    start_s: Annotated[float | None, typer.Option(help="Keep jobs submitted from this offset (s).")] = None,
    end_s: Annotated[float | None, typer.Option(help="Keep jobs submitted before this offset (s).")] = None,
    restart_s: Annotated[
        float | None,
        typer.Option(help="Cost (s) of every resume/resize/migrate, and of the first start where the "
                     "trace's format charges one (Pollux). Default: 30."),
    ] = None,
    elastic: Annotated[bool, typer.Option(help="Make rigid jobs elastic: req/2 to 2*req workers.")] = False,
    decide_every: Annotated[
        float | None,
        typer.Option(help="Call policies only every S seconds (Pollux's simulator: 60), not at every event."),
    ] = None,
    job_model: Annotated[
        str,
        typer.Option(help="Pollux traces: 'auto' (Pollux's efficiency-weighted progress where the tables "
                     "exist) or 'samples' (epochs x samples per epoch)."),
    ] = "auto",
    batch: Annotated[
        str,
        typer.Option(help="Pollux traces: 'fixed' (jobs keep the trace's batch size), 'adaptive' (jobs pick "
                     "the batch with the most goodput on each allocation) or 'auto' (adaptive under pollux)."),
    ] = "auto",
    tiers: Annotated[str | None, typer.Option(
        help="Tier shares by job count for traces without tiers, e.g. premium=0.1,standard=0.3,basic=0.6 "
        "[default: 0.1, 0.6, 0.3].")] = None,
    reservation: Annotated[str | None, typer.Option(
        help="A daily inference reservation: peak=F,start=H,end=H[,ramp=H] reserves round(F x nodes) "
        "nodes from hour start to end of the trace's clock every day (docs/simulator.md).")] = None,
    plots: Annotated[bool, typer.Option(help="Write PNG plots (after summary.json).")] = True,
    fleet: Annotated[Path | None, typer.Option(help="A fleet TOML (docs/fleet.md): simulate regions of "
                                               "clusters under global schedulers.")] = None,
    global_: Annotated[str, typer.Option("--global", help="With --fleet: comma-separated global "
                                         "schedulers (gain, static, least-loaded).")] = "gain,static,least-loaded",
    global_opt: Annotated[list[str] | None, typer.Option(help="With --fleet: a global scheduler "
                                                         "parameter, KEY=VALUE; repeatable.")] = None,
    fleet_jobs: Annotated[int | None, typer.Option(help="With --fleet: generate N jobs from Philly's "
                                                   "distributions instead of reading --trace.")] = None,
    load: Annotated[float, typer.Option(help="With --fleet-jobs: offered load.")] = 0.8,
) -> None:
    """Simulate policies on a trace; write summary.json, <policy>/jobs.csv and plots to OUT."""
    import json
    import sys

    from rich.console import Console

    if fleet is not None:
        from stint.sim.fleet_run import FleetConfig

        _fleet(FleetConfig(fleet, tuple(g.strip() for g in global_.split(",") if g.strip()),
                           tuple(global_opt or ()), policy or "tiresias", tuple(policy_opt or ()), trace,
                           fleet_jobs, load, seed, Filters(limit=limit, vc=vc, start_s=start_s, end_s=end_s),
                           restart_s), out, format)
        return

    from stint.policies.registry import UnknownPolicyError
    from stint.sim.reservation import Reservation
    from stint.sim.runner import SimConfig, run_all, write_plots, write_results
    from stint.sim.traces import TierMix, TraceError

    err = Console(stderr=True)
    if format not in ("table", "json"):
        err.print(f"[red]--format must be 'table' or 'json' (got {format!r})")
        raise typer.Exit(2)
    if gpus is not None and (nodes is not None or gpus_per_node is not None):
        err.print("[red]give either --gpus or --nodes/--gpus-per-node, not both")
        raise typer.Exit(2)
    if gpus is not None:
        if gpus <= 0 or gpus % 8:
            err.print(f"[red]--gpus must be a positive multiple of 8 (nodes of 8 GPUs); got {gpus}")
            raise typer.Exit(2)
        nodes, gpus_per_node = gpus // 8, 8
    from stint.config import ConfigError, PolicyConfig, load_policy, merged_options

    try:
        conf = load_policy(config) if config is not None else PolicyConfig(None, ())
    except ConfigError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    policy = policy or conf.name or "fifo,srtf,drf,tiresias"
    if job_model not in ("auto", "samples"):
        err.print(f"[red]--job-model must be 'auto' or 'samples' (got {job_model!r})")
        raise typer.Exit(2)
    if batch not in ("auto", "fixed", "adaptive"):
        err.print(f"[red]--batch must be 'auto', 'fixed' or 'adaptive' (got {batch!r})")
        raise typer.Exit(2)
    if restart_s is not None and restart_s < 0:
        err.print(f"[red]--restart-s must be >= 0 (got {restart_s:g})")
        raise typer.Exit(2)
    try:
        mix = TierMix.parse(tiers) if tiers is not None else TierMix()
        reserve = Reservation.parse(reservation, seed) if reservation is not None else None
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    cfg = SimConfig(
        trace=trace,
        policies=tuple(p.strip() for p in policy.split(",") if p.strip()),
        policy_options=merged_options(conf.options, tuple(policy_opt or ())),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        seed=seed,
        filters=Filters(limit=limit, vc=vc, start_s=start_s, end_s=end_s),
        restart_s=restart_s,
        samples=job_model == "samples",
        batch=batch,
        elastic=elastic,
        decision_period_s=decide_every,
        tiers=mix,
        reservation=reserve,
    )
    try:
        with _progress(err) as bar:
            tasks: dict[str, int] = {}

            def progress(name: str, done: int, total: int) -> None:
                if name not in tasks:
                    tasks[name] = bar.add_task(name, total=total)
                bar.update(tasks[name], completed=done)

            trace_obj, cluster, results = run_all(cfg, progress)
        summaries = write_results(out, results)
    except (TraceError, UnknownPolicyError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if format == "json":
        sys.stdout.write(json.dumps(summaries, indent=2) + "\n")
        sys.stdout.flush()
    else:
        from stint.report.tables import summary_table

        gpn = cluster.nodes[0].capacity.gpu
        title = f"{trace_obj.name}: {len(trace_obj.jobs):,} jobs on {cluster.num_nodes} x {gpn:g} GPUs"
        console = Console(width=None if sys.stdout.isatty() else 160)  # logs and pipes get every column
        console.print(summary_table(summaries, title=title))
        console.print(_models_line(results))
        pngs = ", jct_cdf.png, over_time.png, tiers.png" if plots else ""
        console.print(f"results in {out}/ (summary.json, <policy>/jobs.csv{pngs})")
    if plots:  # after the figures are out: the slowest and least needed part
        write_plots(out, cluster, results)


def sweep(
    trace: Annotated[str, typer.Option(help="Comma-separated traces: 'philly', 'pollux:N', "
                                       "'philly-shaped:N[:GPUS]' or CSV paths.")] = "philly",
    policy: Annotated[str, typer.Option(help="Comma-separated policy names.")] = "fifo,tiresias",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds (fields a trace lacks; generated traces).")] = "0",
    loads: Annotated[str, typer.Option(help="Comma-separated loads: arrival rate x L (arrival times / L).")] = "1",
    gpus: Annotated[str | None, typer.Option(help="Comma-separated cluster sizes in GPUs (nodes of 8) "
                                             "[default: each trace's own cluster].")] = None,
    limit: Annotated[int | None, typer.Option(help="Keep only the first N jobs of each trace.")] = None,
    policy_opt: Annotated[list[str] | None, typer.Option(help="As for `stint sim`; repeatable.")] = None,
    out: Annotated[Path, typer.Option(help="Output directory (finished cells there are not re-run).")] = Path("sweep"),
    workers: Annotated[int, typer.Option(help="Parallel cells on a local Ray; 1 runs them here, without Ray.")] = 2,
    ray_address: Annotated[str | None, typer.Option(help="Run on this Ray cluster instead of a local one.")] = None,
    plots: Annotated[bool, typer.Option(help="Write sweep.png.")] = True,
) -> None:
    """Run policies x seeds x loads x cluster sizes x traces; write cells/, sweep.csv, summary.csv, sweep.png."""
    import sys

    from rich.console import Console

    from stint.policies.registry import UnknownPolicyError
    from stint.sim import sweep as sw
    from stint.sim.traces import Filters, TraceError

    err = Console(stderr=True)
    try:
        cfg = sw.SweepConfig(
            traces=_items(trace, str, "--trace"), policies=_items(policy, str, "--policy"),
            seeds=_items(seeds, int, "--seeds"), loads=_items(loads, float, "--loads"),
            gpus=_items(gpus, int, "--gpus") if gpus else (None,),
            filters=Filters(limit=limit), policy_options=tuple(policy_opt or ()),
        )
        if workers < 1:
            raise ValueError(f"--workers must be >= 1 (got {workers})")
        runner = sw.in_process(cfg) if workers == 1 and not ray_address else sw.on_ray(cfg, ray_address, workers)
        with _progress(err) as bar:
            task = bar.add_task("cells", total=len(cfg.cells()))
            rows = sw.run_sweep(cfg, out, runner, lambda done, total: bar.update(task, completed=done))
    except (TraceError, UnknownPolicyError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        done = len(cfg.cells()) - len(sw.pending(cfg, out))
        err.print(f"interrupted: {done} of {len(cfg.cells())} cells recorded in {out}/cells; "
                  "run the same command again to resume")
        raise typer.Exit(130) from None
    summary = sw.aggregate(rows)
    Console(width=None if sys.stdout.isatty() else 160).print(sweep_table(summary))
    if plots:
        sw.plot(out, summary)
    pngs = ", sweep.png" if plots else ""
    err.print(f"results in {out}/ (cells/, sweep.csv, summary.csv{pngs})")


def _items(text: str, kind: type, flag: str) -> tuple[Any, ...]:
    try:
        return tuple(kind(x.strip()) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated {kind.__name__} values, got {text!r}") from None


def sweep_table(summary: list[dict[str, Any]]) -> Any:
    """Mean +- standard deviation over seeds per cell."""
    from rich.table import Table

    table = Table(title="sweep: mean ± std over seeds")
    for col in ("trace", "policy", "load", "GPUs", "seeds", "avg JCT s", "p99 JCT s", "makespan s", "util"):
        table.add_column(col, justify="left" if col in ("trace", "policy") else "right")
    for r in sorted(summary, key=lambda r: (r["trace"], r["gpus"], r["load"], r["policy"])):
        def ms(k: str, fmt: str = ",.0f", r: dict[str, Any] = r) -> str:
            return f"{r[k + '_mean']:{fmt}} ± {r[k + '_std']:{fmt}}"
        table.add_row(r["trace"], r["policy"], f"{r['load']:g}", str(r["gpus"]), str(r["seeds"]),
                      ms("avg_jct_s"), ms("p99_jct_s"), ms("makespan_s"), ms("gpu_utilization", ".2f"))
    return table
def _fleet(cfg: FleetConfig, out: Path, format: str) -> None:
    """``stint sim --fleet``: run, write, print (errors in the user's input exit 2 with a message)."""
    import json
    import sys

    from rich.console import Console
    from rich.table import Table

    from stint.sim.fleet_run import TABLE_HEADER, run_fleets, table_rows, write_fleet_results

    err = Console(stderr=True)
    if "," in cfg.policy:
        err.print("[red]error:[/red] with --fleet, --policy names one cluster policy (each cluster runs its own)")
        raise typer.Exit(2)
    try:
        summaries = write_fleet_results(out, run_fleets(cfg))
    except ValueError as exc:  # FleetError, TraceError, unknown names and options
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    if format == "json":
        sys.stdout.write(json.dumps(summaries, indent=2) + "\n")
        return
    first = next(iter(summaries.values()))
    table = Table(title=f"{first['jobs']:,} jobs on {first['gpus']:,} GPUs in {first['clusters']} clusters, "
                  f"{cfg.policy} in each")
    for h in TABLE_HEADER:
        table.add_column(h)
    for row in table_rows(summaries):
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    Console().print(f"results in {out}/ (summary.json, <global>/jobs.csv)")


def _models_line(results: dict[str, RunResult]) -> str:
    """What the figures assume: job model, cost model, batch mode per policy (as summary.json)."""
    first = next(iter(results.values()))
    costs = "?"
    if first.cost_model is not None:
        c = first.cost_model.costs
        costs = f"{first.cost_model.name} (start {c.start_s:g} s, resume/resize/migrate {c.resume_s:g} s)"
    batches = ", ".join(f"{p} {r.batch}" for p, r in results.items())
    return f"job model: {first.job_model}; costs: {costs}; batch: {batches}"


def _progress(console: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
