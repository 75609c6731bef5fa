"""The figure pipeline: offline optimum, runners, report files, the CLI."""

import csv

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.experiments import oasis_figs as figs
from stint.experiments.opt import isolated_bound, solve_opt
from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import make_workload

TINY = {"jobs": 6, "horizon": 6, "workers": 2, "ps": 2, "scale": 0.1, "window": 4}


def test_opt_is_an_upper_bound_on_oasis():
    for seed in (1, 2):
        wl = make_workload(seed, **TINY)
        oasis = evaluate(figs.build_policy("oasis", wl, max_quanta=512), wl.cluster, wl.jobs,
                         wl.horizon, wl.slot_s)
        opt = solve_opt(wl, time_limit_s=20.0)
        assert opt.optimal
        assert opt.utility >= oasis.total_utility - 1e-6
        # The isolated bound (each job alone on the empty cluster) is above OPT itself.
        assert isolated_bound(wl) >= opt.utility - 1e-6
        assert opt.bound >= opt.utility - 1e-6


def test_isolated_bound_is_above_every_policy_and_below_the_priorities():
    for seed in (1, 2, 3):
        wl = make_workload(seed, jobs=12, horizon=20, workers=3, ps=3, scale=0.2, window=10)
        bound = isolated_bound(wl)
        assert 0 < bound <= sum(s.utility.gamma1 for s in wl.jobs)
        for name in ("oasis", "drf-ps", "dorm", "fifo-fixed"):
            res = evaluate(figs.build_policy(name, wl), wl.cluster, wl.jobs, wl.horizon,
                           wl.slot_s)
            assert res.total_utility <= bound + 1e-6, name


def test_fig3_report_shows_the_bound_and_per_seed_ratios(tmp_path):
    from stint.experiments import oasis_report as report

    rows = [{"jobs": 100, "policy": p, "seed": s, "utility": u, "rejected": 0, "finished": 0}
            for p, us in (("oasis", (110, 120)), ("drf-ps", (100, 100)), ("dorm", (80, 100)),
                          (figs.BOUND, (200, 200))) for s, u in zip((1, 2), us)]
    text = report.fig3(rows, tmp_path, [1, 2])
    row = next(line for line in text.splitlines() if line.startswith("| 100 "))
    assert "1.15× / 1.10×" in row  # 115 / max(100, 100) beside the paper's ratio
    assert "1.10–1.20" in row  # per seed: 110 / max(100, 80), 120 / max(100, 100)
    assert "| 1.28× / 1.10× | 200 |" in row  # OASiS ÷ Dorm: 115 / 90, the paper's 2966 / 2687
    assert "200 | 0.57, 0.50" in row  # the bound, and OASiS and the best baseline against it
    with (tmp_path / "oasis-fig3.csv").open() as f:
        assert [figs.BOUND] == [r[1] for r in csv.reader(f) if r[1] == figs.BOUND]


def test_bootstrap_of_the_ratio_steps_is_exact_when_every_workload_agrees():
    import numpy as np

    from stint.experiments.oasis_report import bootstrap_steps, ratio_to_best

    oasis = np.array([[110.0, 110, 110], [150, 150, 150]])  # loads x seeds
    base = np.full((2, 3), 100.0)
    assert ratio_to_best(oasis, [base, base / 2]) == pytest.approx([1.1, 1.5])
    assert bootstrap_steps(oasis, [base]).ravel() == pytest.approx([0.4, 0.4, 0.4])


def test_bootstrap_interval_spans_workloads_that_disagree():
    import numpy as np

    from stint.experiments.oasis_report import bootstrap_steps

    # Seed 1: the ratio goes 1.0 -> 2.0; seed 2: 1.0 -> 0.5. On both together: 1.0 -> 1.25.
    oasis = np.array([[100.0, 100], [200, 50]])
    lo, mid, hi = bootstrap_steps(oasis, [np.full((2, 2), 100.0)])[:, 0]
    assert mid == pytest.approx(0.25)
    assert lo == pytest.approx(-0.5) and hi == pytest.approx(1.0)


def test_fig3_report_shows_the_bootstrap_of_each_step_from_three_seeds(tmp_path):
    from stint.experiments import oasis_report as report

    def rows(seeds):
        return [{"jobs": n, "policy": p, "seed": s, "utility": u, "rejected": 0, "finished": 0}
                for n, o in ((100, 110), (200, 150)) for p, u in (("oasis", o), ("dorm", 100))
                for s in seeds]

    text = report.fig3(rows([1, 2, 3]), tmp_path, [1, 2, 3])
    assert "100 → 200 jobs +0.40 [+0.40, +0.40]" in text
    assert "bootstrap" not in report.fig3(rows([1, 2]), tmp_path, [1, 2])


def test_fig3_seeds_csv_reads_back_per_policy_load_and_seed(tmp_path):
    from stint.experiments import oasis_report as report

    rows = [{"jobs": n, "policy": p, "seed": s, "utility": 10 * n + s + (p == "dorm"),
             "rejected": 0, "finished": 0}
            for s in (2, 1) for n in (200, 100) for p in ("oasis", "dorm")]
    report.fig3(rows, tmp_path, [1, 2])
    loads, seeds, fig = report.read_fig3_seeds(tmp_path / "oasis-fig3-seeds.csv")
    assert (loads, seeds) == ([100, 200], [1, 2])
    assert fig["oasis"].tolist() == [[1001, 1002], [2001, 2002]]
    assert fig["dorm"].tolist() == [[1002, 1003], [2002, 2003]]


def test_fig3_report_shows_no_ratio_where_no_policy_earned_anything(tmp_path):
    from stint.experiments import oasis_report as report

    rows = [{"jobs": 10, "policy": p, "seed": 1, "utility": 0.0, "rejected": 0, "finished": 0}
            for p in ("oasis", "drf-ps", "dorm")]
    row = next(line for line in report.fig3(rows, tmp_path, [1]).splitlines() if line.startswith("| 10 "))
    assert "nan" not in row and row.endswith("| –× / – | – | –× / – |")


def test_fig5_report_shows_median_and_pooled_ratios(tmp_path):
    from stint.experiments import oasis_report as report

    rows = []
    for seed, (o, opt) in enumerate(((10, 10), (10, 10), (10, 25)), start=1):
        tags = {"gamma1": "[1,100]", "servers": 6, "seed": seed}
        rows += [{**tags, "policy": "oasis", "utility": o},
                 {**tags, "policy": "opt", "utility": opt, "bound": opt, "optimal": True}]
    report.fig5(rows, tmp_path, [1, 2, 3])
    with (tmp_path / "oasis-fig5.csv").open() as f:
        got = next(iter(csv.DictReader(f)))
    assert float(got["mean_ratio"]) == 1.5 and float(got["median_ratio"]) == 1.0
    assert float(got["pooled_ratio"]) == 1.5  # 45 / 30


def test_fig3_writes_csv_png_and_report(tmp_path):
    from stint.experiments import oasis_report as report

    # tiny workloads, labelled as the paper's loads so that its numbers are looked up
    tasks = [figs.Task("total", s, {**TINY, "jobs": n}, p, tags={"jobs": label})
             for p in ("oasis", "fifo-fixed") for n, label in ((4, 100), (6, 200)) for s in (1, 2)]
    rows = figs.run_all(tasks, processes=1)
    text = report.fig3(rows, tmp_path, [1, 2])
    with (tmp_path / "oasis-fig3.csv").open() as f:
        got = list(csv.reader(f))
    assert got[0] == ["jobs", "policy", "total_utility"]
    assert len(got) == 1 + 2 * 2  # one row per (jobs, policy), mean over seeds
    assert (tmp_path / "oasis-fig3.png").stat().st_size > 1000
    assert "OASiS ÷ best baseline" in text and "2966" in text  # the paper's number beside ours
    assert " ± " in text  # open point 9: the spread over seeds is shown
    assert "Fig. 3" in (tmp_path / "report.md").read_text()


def test_cli_runs_a_figure(tmp_path, monkeypatch):
    monkeypatch.setattr(figs, "fig6_tasks", lambda seeds: [
        figs.Task("total", s, {**TINY, "jobs": 5}, "oasis", {"bound_scale": sc},
                  {"jobs": 5, "percent": round(sc * 100)}) for sc in (0.5, 1.0) for s in seeds])
    res = CliRunner().invoke(app, ["experiment", "oasis-fig6", "--out", str(tmp_path),
                                   "--seeds", "2", "--processes", "1"])
    assert res.exit_code == 0, res.output
    for name in ("oasis-fig6.csv", "oasis-fig6.png", "report.md"):
        assert (tmp_path / name).exists()
    bad = CliRunner().invoke(app, ["experiment", "oasis-fig6", "--out", str(tmp_path),
                                   "--seeds", "0"])
    assert bad.exit_code != 0


@pytest.mark.parametrize("make_tasks", [figs.fig3_tasks, figs.fig4_tasks, figs.fig5_tasks,
                                        figs.fig6_tasks])
def test_task_lists_cover_the_paper_grid(make_tasks):
    tasks = make_tasks([1])
    assert tasks and all(t.seed == 1 for t in tasks)
