"""``stint sim --report``: the page, its timeline recorder, its errors."""

import re

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.model.allocation import EMPTY, Allocation
from stint.reconcile import Action, ActionKind
from stint.report.html import Timeline


@pytest.mark.slow  # five figures drawn: 3-7 s here
def test_report_is_one_self_contained_page(tmp_path):
    res = CliRunner().invoke(app, [
        "sim", "--trace", "pollux:6", "--policy", "fifo,tiresias", "--nodes", "4",
        "--gpus-per-node", "4", "--limit", "10", "--out", str(tmp_path / "r"), "--no-plots",
        "--report", str(tmp_path / "page"), "--report-window", "0:2"])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "page" / "report.html").read_text()
    for table in ("comparison", "tiers", "latency"):
        assert f'<table id="{table}">' in html
    # JCT, utilization/queue, latency, and one timeline per policy; nothing fetched from outside
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)) == 5
    assert not re.search(r'(src|href)="(?!data:)', html)
    assert "Timeline: tiresias, 0.00 h to 2.00 h" in html


def test_report_window_is_checked(tmp_path):
    for bad in ("2:1", "x", "1:2:3", "-1:2"):
        res = CliRunner().invoke(app, ["sim", "--report", str(tmp_path), "--report-window", bad])
        assert res.exit_code == 2 and "--report-window" in res.output, bad


def test_timeline_keeps_the_window_and_its_marks():
    a2, b1 = Allocation.of({0: 2}), Allocation.of({1: 1})
    tl = Timeline(100.0, 200.0, max_jobs=2)
    tl(50.0, Action(ActionKind.START, "j1", EMPTY, a2))  # began before the window
    tl(120.0, Action(ActionKind.RESIZE, "j1", a2, b1))
    tl(130.0, Action(ActionKind.START, "j2", EMPTY, a2))
    tl(140.0, Action(ActionKind.START, "j3", EMPTY, b1))  # a third job: not shown
    tl(150.0, Action(ActionKind.PREEMPT, "j2", a2, EMPTY))
    tl(250.0, Action(ActionKind.MIGRATE, "j1", b1, a2))  # after the window
    tl.finish({"j1": 300.0, "j3": 160.0})
    assert tl.holds == {"j1": [(50.0, 120.0, 2), (120.0, 250.0, 1)], "j2": [(130.0, 150.0, 2)]}
    assert tl.marks == [("j1", 120.0, ActionKind.RESIZE), ("j2", 150.0, ActionKind.PREEMPT)]
