"""``stint sim`` and ``stint sweep``: compare scheduling policies on a trace (see docs/simulator.md).

``stint sim`` is parsed with the standard library's argparse and imports only what the run uses
(no Typer, Rich, NumPy or SciPy unless a policy, a progress bar on a terminal or the plots need
them), so a whole small simulation costs little more than the interpreter's start-up;
``stint.cli.main`` sends ``sim`` here before building the Typer app.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stint.sim.traces import Filters

if TYPE_CHECKING:
    import typer

    from stint.model.cluster import Cluster
    from stint.report.html import Timeline
    from stint.sim.costs import CostModel
    from stint.sim.fleet_run import FleetConfig
    from stint.sim.metrics import RunResult

SIM_HELP = ("Simulate policies on a trace; write summary.json and <policy>/jobs.csv to OUT, and with "
            "--plots the PNG plots (after the summary and the table are out).")


def register(app: typer.Typer) -> None:
    """Add this layer's commands to the ``stint`` app (``sim`` passes its arguments to ``main``)."""
    import typer

    def sim(ctx: typer.Context) -> None:
        code = main(list(ctx.args))
        if code:
            raise typer.Exit(code)

    sim.__annotations__ = {"ctx": typer.Context, "return": None}  # Typer reads them; typer is local here
    app.command("sim", help=SIM_HELP, add_help_option=False,
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(sim)

    from stint.sim.sweep_cli import sweep

    app.command("sweep")(sweep)


def parser() -> argparse.ArgumentParser:
    """``stint sim``'s options (the one definition; ``stint sim --help`` prints them)."""
    p = argparse.ArgumentParser(prog="stint sim", description=SIM_HELP)
    a = p.add_argument
    a("--trace", default="philly", help="'philly', 'pollux:N' (N=1..8) or a CSV path [default: philly].")
    a("--policy", help="Comma-separated policy names [default: fifo,srtf,drf,tiresias].")
    a("--config", type=Path, help="A TOML config file: [policy] name, [policy.options] and [tiers] "
      "targets (flags win; a serve config's other tables are checked, not used).")
    a("--policy-opt", action="append", metavar="KEY=VALUE",
      help="A policy parameter (POLICY.KEY=VALUE for one of several); repeatable. "
      "`stint policies --options` lists each policy's keys.")
    a("--cluster", type=Path, metavar="FILE", help="A cluster file (TOML): node groups by accelerator "
      "type, speeds per type and application, Gavel's throughput file (docs/simulator.md).")
    a("--gpus", type=int, help="Cluster size in GPUs, as nodes of 8 GPUs.")
    a("--nodes", type=int, help="Number of nodes.")
    a("--gpus-per-node", type=int, help="GPUs per node.")
    a("--seed", type=int, default=0, help="Seed for the fields a trace lacks (utility, tier) [default: 0].")
    a("--out", type=Path, default=Path("results"), help="Output directory [default: results].")
    a("--format", default="table", help="'table' or 'json' (summary on stdout) [default: table].")
    a("--limit", type=int, help="Keep only the first N jobs (by arrival).")
    a("--vc", help="Keep only this virtual cluster (Philly).")
    a("--start-s", type=float, help="Keep jobs submitted from this offset (s).")
    a("--end-s", type=float, help="Keep jobs submitted before this offset (s).")
    a("--restart-s", type=float, help="Cost (s) of every resume/resize/migrate, and of the first start "
      "where the trace's format charges one (Pollux). Default: 30.")
    a("--costs-from", metavar="DATA_DIR|DB_URL", help="Charge the costs a live cluster measured: "
      "start, resume and checkpoint-and-stop fitted from the attempts in the store of `stint serve` "
      "(its data directory or database URL); replaces --restart-s.")
    a("--elastic", action=argparse.BooleanOptionalAction, default=False,
      help="Make rigid jobs elastic: req/2 to 2*req workers [default: no].")
    a("--decide-every", type=float, metavar="S",
      help="Call policies only every S seconds (Pollux's simulator: 60), not at every event.")
    a("--job-model", default="auto", help="Pollux traces: 'auto' (Pollux's efficiency-weighted progress "
      "where the tables exist) or 'samples' (epochs x samples per epoch) [default: auto].")
    a("--batch", default="auto", help="Pollux traces: 'fixed' (jobs keep the trace's batch size), "
      "'adaptive' (jobs pick the batch with the most goodput on each allocation) or 'auto' "
      "(adaptive under pollux) [default: auto].")
    a("--tiers", help="Tier shares by job count for traces without tiers, e.g. "
      "premium=0.1,standard=0.3,basic=0.6 [default: 0.1, 0.6, 0.3].")
    a("--knowledge", choices=("declared", "oracle"), default="declared",
      help="What policies know of a job's length: 'declared' (the trace's est_s column, else the "
      "user-history estimate; docs/simulator.md) or 'oracle' (the true length, for studies) "
      "[default: declared].")
    a("--reservation", metavar="SPEC", help="A daily inference reservation: peak=F,start=H,end=H"
      "[,ramp=H] reserves round(F x nodes) nodes from hour start to end of the trace's clock every "
      "day (docs/simulator.md).")
    a("--plots", action=argparse.BooleanOptionalAction, default=False,
      help="Also write jct_cdf.png and over_time.png, after summary.json and the table (matplotlib's "
      "import and drawing take 0.5-1 s) [default: no].")
    a("--report", type=Path, metavar="DIR", help="Also write DIR/report.html: the run on one "
      "self-contained page (opens from disk, no network).")
    a("--report-window", default="0:6", metavar="START:END", help="With --report: the timeline's "
      "window, in hours since the first arrival [default: 0:6].")
    a("--fleet", type=Path, help="A fleet TOML (docs/fleet.md): simulate regions of clusters under "
      "global schedulers.")
    a("--global", dest="global_", default="gain,static,least-loaded",
      help="With --fleet: comma-separated global schedulers (gain, static, least-loaded).")
    a("--global-opt", action="append", metavar="KEY=VALUE",
      help="With --fleet: a global scheduler parameter; repeatable.")
    a("--fleet-jobs", type=int, metavar="N",
      help="With --fleet: generate N jobs from Philly's distributions instead of reading --trace.")
    a("--load", type=float, default=0.8, help="With --fleet-jobs: offered load [default: 0.8].")
    a("--fleet-warm", action="store_true", help="With --fleet-jobs: start in the steady state, the jobs "
      "that would be running at time 0 already there (docs/fleet.md) [default: an empty fleet].")
    return p


def _fail(message: str) -> int:
    sys.stderr.write(message + "\n")
    return 2


def main(argv: list[str]) -> int:
    """``stint sim ARGV``; returns the exit code (2 for bad input, with a message on stderr)."""
    args = parser().parse_args(argv)
    if why := _size_flags(args):
        return _fail(f"error: {why}")
    if args.fleet is not None:
        from stint.sim.fleet_run import FleetConfig

        if args.report is not None:
            return _fail("error: --report is for one cluster (not --fleet)")
        f = Filters(limit=args.limit, vc=args.vc, start_s=args.start_s, end_s=args.end_s)
        return _fleet(FleetConfig(args.fleet, tuple(g.strip() for g in args.global_.split(",") if g.strip()),
                                  tuple(args.global_opt or ()), args.policy or "tiresias",
                                  tuple(args.policy_opt or ()), args.trace, args.fleet_jobs, args.load,
                                  args.seed, f, args.restart_s, args.fleet_warm), args.out, args.format)
    return _sim(args)


def _size_flags(args: argparse.Namespace) -> str | None:
    """Why a size flag is refused: below 1 or above its maximum (``stint.model.limits``)."""
    from stint.model import limits as lim

    for flag, value, maximum in (("--gpus", args.gpus, lim.MAX_CLUSTER_GPUS), ("--nodes", args.nodes, lim.MAX_NODES),
                                 ("--gpus-per-node", args.gpus_per_node, lim.MAX_GPUS_PER_NODE),
                                 ("--limit", args.limit, lim.MAX_TRACE_JOBS),
                                 ("--fleet-jobs", args.fleet_jobs, lim.MAX_TRACE_JOBS)):
        if value is not None and value < 1:
            return f"{flag} must be at least 1 (got {value})"
        if value is not None and (why := lim.above(flag, value, maximum)):
            return why
    if args.nodes is not None and args.gpus_per_node is not None:
        return lim.cluster_reason(args.nodes, args.gpus_per_node, "--nodes", "--gpus-per-node")
    return None


def _sim(args: argparse.Namespace) -> int:
    from stint.policies.registry import UnknownPolicyError
    from stint.sim.runner import SimConfig, run_all, write_plots, write_results
    from stint.sim.trace_fields import TraceError
    from stint.sim.traces import TierMix

    nodes, gpus_per_node = args.nodes, args.gpus_per_node
    if args.format not in ("table", "json"):
        return _fail(f"--format must be 'table' or 'json' (got {args.format!r})")
    if args.gpus is not None and (nodes is not None or gpus_per_node is not None):
        return _fail("give either --gpus or --nodes/--gpus-per-node, not both")
    if args.cluster is not None and (args.gpus is not None or nodes is not None or gpus_per_node is not None):
        return _fail("give either --cluster or --gpus/--nodes/--gpus-per-node, not both")
    if args.gpus is not None:
        if args.gpus <= 0 or args.gpus % 8:
            return _fail(f"--gpus must be a positive multiple of 8 (nodes of 8 GPUs); got {args.gpus}")
        nodes, gpus_per_node = args.gpus // 8, 8
    from stint.model.sla import SlaTargets
    from stint.policies.registry import merged_options, tier_options

    file_policy: str | None = None
    file_options: tuple[str, ...] = ()
    sla = SlaTargets()
    if args.config is not None:  # (stint.config, TOML, only when a file is given)
        from stint.config import ConfigError
        from stint.config import load as load_config

        try:
            filed = load_config(args.config)
        except ConfigError as exc:
            return _fail(f"error: {exc}")
        file_policy, file_options, sla = filed.policy.name, filed.policy.options, filed.tiers
    policy = args.policy or file_policy or "fifo,srtf,drf,tiresias"
    if args.job_model not in ("auto", "samples"):
        return _fail(f"--job-model must be 'auto' or 'samples' (got {args.job_model!r})")
    if args.batch not in ("auto", "fixed", "adaptive"):
        return _fail(f"--batch must be 'auto', 'fixed' or 'adaptive' (got {args.batch!r})")
    if args.restart_s is not None and args.restart_s < 0:
        return _fail(f"--restart-s must be >= 0 (got {args.restart_s:g})")
    measured = None
    if args.costs_from is not None:
        if args.restart_s is not None:
            return _fail("give --costs-from or --restart-s, not both")
        try:
            measured = _measured_costs(args.costs_from)
        except ValueError as exc:
            return _fail(f"error: --costs-from {exc}")
    try:
        mix = TierMix.parse(args.tiers) if args.tiers is not None else TierMix()
        reserve = None
        if args.reservation is not None:
            from stint.sim.reservation import Reservation

            reserve = Reservation.parse(args.reservation, args.seed)
    except ValueError as exc:
        return _fail(f"error: {exc}")
    try:
        window = _window(args.report_window)
    except ValueError as exc:
        return _fail(f"error: {exc}")
    timelines: dict[str, Timeline] = {}

    def watch(name: str, first_s: float) -> Timeline:
        from stint.report.html import Timeline

        tl = timelines[name] = Timeline(first_s + window[0] * 3600, first_s + window[1] * 3600)
        return tl

    names = tuple(p.strip() for p in policy.split(",") if p.strip())
    cfg = SimConfig(
        trace=args.trace,
        policies=names,
        policy_options=tier_options(names, sla) + merged_options(file_options, tuple(args.policy_opt or ())),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        seed=args.seed,
        filters=Filters(limit=args.limit, vc=args.vc, start_s=args.start_s, end_s=args.end_s),
        restart_s=args.restart_s,
        costs=measured,
        costs_name="measured",
        samples=args.job_model == "samples",
        batch=args.batch,
        elastic=args.elastic,
        decision_period_s=args.decide_every,
        tiers=mix,
        sla=sla,
        reservation=reserve,
        knowledge=args.knowledge,
        cluster_file=args.cluster,
    )
    out: Path = args.out
    try:
        with _ProgressBar() as progress:
            trace_obj, cluster, results = run_all(cfg, progress, watch if args.report else None)
        summaries = write_results(out, results)
    except (TraceError, UnknownPolicyError, ValueError) as exc:  # (ClusterFileError is a ValueError)
        return _fail(f"error: {exc}")
    if args.format == "json":
        import json

        sys.stdout.write(json.dumps(summaries, indent=2) + "\n")
    else:
        from stint.report.tables import plain_table

        title = f"{trace_obj.name}: {len(trace_obj.jobs):,} jobs on {_shape(cluster)}"
        pngs = ", jct_cdf.png, over_time.png, tiers.png" if args.plots else ""
        sys.stdout.write(f"{plain_table(summaries, title)}\n{_models_line(results)}\n"
                         f"results in {out}/ (summary.json, <policy>/jobs.csv{pngs})\n")
    sys.stdout.flush()
    if args.report is not None:
        from stint.report.html import write_report

        for name, tl in timelines.items():
            tl.finish({r.job_id: r.finish_s for r in results[name].records})
        page = write_report(args.report, f"{trace_obj.name}: {len(trace_obj.jobs):,} jobs on "
                            f"{_shape(cluster)}", cluster.total_gpus, results,
                            summaries, timelines)
        sys.stderr.write(f"report in {page}\n")
    if args.plots:  # after the figures are out: the slowest and least needed part
        write_plots(out, cluster, results)
    return 0


def _shape(cluster: Cluster) -> str:
    """``16 x 4 GPUs``, or per type ``v100 4 x 8 GPUs, k80 8 x 4 GPUs`` on a typed cluster."""
    if not cluster.typed:
        return f"{cluster.num_nodes} x {cluster.nodes[0].capacity.gpu:g} GPUs"
    parts = []
    for t in cluster.types:
        nodes = cluster.nodes_of(t)
        sizes = sorted({int(cluster.nodes[i].capacity.gpu) for i in nodes})
        per = "/".join(str(g) for g in sizes)
        parts.append(f"{t} {len(nodes)} x {per} GPUs")
    return ", ".join(parts)


def _window(text: str) -> tuple[float, float]:
    """``--report-window START:END`` (hours)."""
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--report-window must be START:END in hours (got {text!r})") from None
    if not 0 <= a < b:
        raise ValueError(f"--report-window: need 0 <= START < END (got {text!r})")
    return a, b


class _ProgressBar:
    """A Rich progress bar on a terminal's stderr; nothing (and no Rich import) otherwise."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._tasks: dict[str, int] = {}

    def __enter__(self) -> Any:
        if not sys.stderr.isatty():
            return None
        from rich.console import Console

        from stint.sim.progress_bar import rich_progress

        self._bar = rich_progress(Console(stderr=True))
        self._bar.__enter__()
        return self.update

    def update(self, name: str, done: int, total: int) -> None:
        if name not in self._tasks:
            self._tasks[name] = self._bar.add_task(name, total=total)
        self._bar.update(self._tasks[name], completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def _fleet(cfg: FleetConfig, out: Path, format: str) -> int:
    """``stint sim --fleet``: run, write, print (errors in the user's input exit 2 with a message)."""
    from stint.sim.fleet_run import TABLE_HEADER, run_fleets, table_rows, write_fleet_results

    if "," in cfg.policy:
        return _fail("error: with --fleet, --policy names one cluster policy (each cluster runs its own)")
    try:
        summaries = write_fleet_results(out, run_fleets(cfg))
    except ValueError as exc:  # FleetError, TraceError, unknown names and options
        return _fail(f"error: {exc}")
    if format == "json":
        import json

        sys.stdout.write(json.dumps(summaries, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    first = next(iter(summaries.values()))
    table = Table(title=f"{first['jobs']:,} jobs on {first['gpus']:,} GPUs in {first['clusters']} clusters, "
                  f"{cfg.policy} in each")
    for h in TABLE_HEADER:
        table.add_column(h)
    for row in table_rows(summaries):
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    Console().print(f"results in {out}/ (summary.json, <global>/jobs.csv)")
    return 0


def _measured_costs(where: str) -> CostModel:
    """The cost model fitted from a live store's attempts (``runtime/measured.py``)."""
    from stint.runtime.measured import fitted_costs, open_store

    store = open_store(where)
    try:
        fitted = fitted_costs(store)
    finally:
        store.close()
    if not any(fitted.samples.values()):
        raise ValueError(f"{where}: the store has no measured attempts yet")
    return fitted.costs


def _models_line(results: dict[str, RunResult]) -> str:
    """What the figures assume: job model, cost model, batch mode per policy (as summary.json)."""
    first = next(iter(results.values()))
    costs = "?"
    if first.cost_model is not None:
        c = first.cost_model.costs
        costs = (f"{first.cost_model.name} (start {c.start_s:.3g} s, resume {c.resume_s:.3g} s, "
                 f"resize/migrate {c.resize_s:.3g} s, stop {c.stop_s:.3g} s)")
    batches = ", ".join(f"{p} {r.batch}" for p, r in results.items())
    return f"job model: {first.job_model}; costs: {costs}; batch: {batches}"
