"""``stint experiment oasis-fig3|oasis-fig4|oasis-fig5|oasis-fig6 --out DIR``: the paper's figures.

Each command writes ``DIR/<figure>.csv``, ``DIR/<figure>.png`` and ``DIR/report.md`` (our numbers
beside the paper's, mean ± std over seeds). Heavy imports stay inside the command bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

FIGURES = {
    "oasis-fig3": "total utility vs number of jobs, all policies (T = 300)",
    "oasis-fig4": "actual minus target completion, per job class (T = 100)",
    "oasis-fig5": "OPT/OASiS ratio on 10-job instances (exact offline MILP)",
    "oasis-fig6": "total utility with misestimated U and L",
}
DEFAULT_SEEDS = {"oasis-fig3": 5, "oasis-fig4": 3, "oasis-fig5": 10, "oasis-fig6": 3}


def _run(figure: str, out: Path, seeds: int, processes: int) -> None:
    from stint.experiments import oasis_figs as figs
    from stint.experiments import oasis_report as report

    if seeds < 1 or processes < 1:
        raise typer.BadParameter("--seeds and --processes must be at least 1")
    out.mkdir(parents=True, exist_ok=True)
    seed_list = list(range(1, seeds + 1))
    make_tasks: dict[str, Callable[[list[int]], list[figs.Task]]] = {
        "oasis-fig3": figs.fig3_tasks, "oasis-fig4": figs.fig4_tasks,
        "oasis-fig5": figs.fig5_tasks, "oasis-fig6": figs.fig6_tasks}
    tasks = make_tasks[figure](seed_list)

    def progress(done: int, total: int) -> None:
        typer.echo(f"\r{figure}: {done}/{total} runs", nl=done == total, err=True)

    rows = figs.run_all(tasks, processes, progress)
    writer = getattr(report, figure.removeprefix("oasis-"))
    typer.echo(writer(rows, out, seed_list))
    typer.echo(f"wrote {out}/{figure}.csv, {out}/{figure}.png, {out}/report.md")


def register(app: typer.Typer) -> None:
    """Add ``stint experiment ...`` to the ``stint`` app."""
    experiment = typer.Typer(help="Reproduce the papers' evaluations.", no_args_is_help=True)
    for figure, doc in FIGURES.items():
        def command(
            out: Path = typer.Option(..., "--out", help="output directory"),  # noqa: B008
            seeds: int = typer.Option(DEFAULT_SEEDS[figure], help="seeds 1..N (spread shown)"),
            processes: int = typer.Option(2, help="worker processes"),
            _figure: str = typer.Option(figure, hidden=True),
        ) -> None:
            _run(_figure, out, seeds, processes)

        command.__doc__ = f"OASiS {doc}."
        experiment.command(figure)(command)
    app.add_typer(experiment, name="experiment")
