"""``stint sweep``: policies x seeds x loads x cluster sizes x traces, on Ray (docs/simulator.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from stint.sim.progress_bar import rich_progress


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
    from stint.sim.trace_fields import TraceError
    from stint.sim.traces import Filters

    err = Console(stderr=True, soft_wrap=True)
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
        with rich_progress(err) as bar:
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
