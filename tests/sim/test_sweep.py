"""``stint sweep``: a tiny sweep (2 policies x 2 seeds on a small Philly subset) in process and on
a local Ray, resuming after an interruption, and the combined table."""

from __future__ import annotations

import csv
import json
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.sim.sweep import Cell, Runner, SweepConfig, in_process, on_ray, run_sweep
from stint.sim.traces import Filters

CFG = SweepConfig(traces=("philly-shaped:150",), policies=("fifo", "tiresias"), seeds=(0, 1),
                  loads=(1.0, 4.0), gpus=(32,), filters=Filters(limit=150))


def _figures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without their CPU time (the one figure that differs between runs)."""
    return [{k: v for k, v in r.items() if k != "cpu_s"} for r in rows]


class _Counting:
    """Runs cells in process and remembers which; ``stop_after`` cells, then fails (a crash)."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.ran: list[Cell] = []
        self.stop_after = stop_after

    def __call__(self, cells: Sequence[Cell]) -> Generator[tuple[Cell, dict[str, Any]], None, None]:
        for cell, row in in_process(CFG)(cells):
            if self.stop_after is not None and len(self.ran) == self.stop_after:
                raise KeyboardInterrupt
            self.ran.append(cell)
            yield cell, row


@pytest.mark.slow
def test_a_sweep_resumes_without_rerunning_finished_cells(tmp_path: Path) -> None:
    first = _Counting(stop_after=3)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(CFG, tmp_path, first)
    assert len(list((tmp_path / "cells").glob("*.json"))) == 3
    assert not (tmp_path / "summary.csv").exists()
    (tmp_path / "cells" / ".partial-x").write_text("{")  # a write cut short counts for nothing
    second = _Counting()
    rows = run_sweep(CFG, tmp_path, second)
    assert len(second.ran) == len(CFG.cells()) - 3 and not set(second.ran) & set(first.ran)
    assert len(rows) == 8 and {(r["policy"], r["seed"], r["load"]) for r in rows} == {
        (p, s, ld) for p in ("fifo", "tiresias") for s in (0, 1) for ld in (1.0, 4.0)}
    third = _Counting()
    assert run_sweep(CFG, tmp_path, third) == rows and third.ran == []
    # the same figures as one uninterrupted sweep
    assert _figures(rows) == _figures(run_sweep(CFG, tmp_path / "again", in_process(CFG)))


def test_the_summary_has_mean_and_spread_over_seeds(tmp_path: Path) -> None:
    rows = run_sweep(CFG, tmp_path, in_process(CFG))
    with open(tmp_path / "summary.csv") as fh:
        summary = list(csv.DictReader(fh))
    assert len(summary) == 4  # policies x loads
    for s in summary:
        mine = [r["avg_jct_s"] for r in rows if (r["policy"], r["load"]) == (s["policy"], float(s["load"]))]
        assert float(s["avg_jct_s_mean"]) == pytest.approx(sum(mine) / 2)
        assert float(s["avg_jct_s_min"]) == min(mine) and float(s["avg_jct_s_max"]) == max(mine)
        assert s["seeds"] == "2" and s["gpus"] == "32"
    # seeds draw different generated traces; a higher load queues longer
    fifo = {(r["seed"], r["load"]): r for r in rows if r["policy"] == "fifo"}
    assert fifo[0, 1.0]["avg_jct_s"] != fifo[1, 1.0]["avg_jct_s"]
    assert all(fifo[s, 4.0]["avg_queue_s"] >= fifo[s, 1.0]["avg_queue_s"] for s in (0, 1))


@pytest.mark.slow
def test_the_command_writes_table_files_and_plot_and_refuses_bad_axes(tmp_path: Path) -> None:
    args = ["sweep", "--trace", "philly", "--limit", "120", "--policy", "fifo,tiresias",
            "--seeds", "0,1", "--gpus", "32", "--workers", "1", "--out", str(tmp_path)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "mean ± std" in res.output and "tiresias" in res.output
    for name in ("sweep.csv", "summary.csv", "sweep.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert len(list((tmp_path / "cells").glob("*.json"))) == 4
    for bad, msg in ((["--loads", "0"], "--loads must be positive"), (["--gpus", "30"], "multiples of 8"),
                     (["--seeds", "a"], "--seeds"), (["--policy", "nope"], "nope")):
        res = CliRunner().invoke(app, [*args[:-2], "--out", str(tmp_path / "bad"), *bad])
        assert res.exit_code == 2 and msg in res.output, res.output


@pytest.mark.slow
@pytest.mark.ray
def test_cells_on_a_local_ray_give_the_same_figures(tmp_path: Path) -> None:
    small = SweepConfig(traces=("philly",), policies=("fifo", "tiresias"), seeds=(0, 1),
                        gpus=(32,), filters=Filters(limit=120))
    here = run_sweep(small, tmp_path / "here", in_process(small))
    ray_runner: Runner = on_ray(small, None, 2)
    there = run_sweep(small, tmp_path / "ray", ray_runner)
    assert _figures(here) == _figures(there)
    assert json.loads(next((tmp_path / "ray" / "cells").glob("*.json")).read_text())["policy"] in ("fifo", "tiresias")
