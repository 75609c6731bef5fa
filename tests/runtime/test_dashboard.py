"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a real
``stint serve``; and a ``stint sim --report`` page opened from disk with the network off.

The browser comes from the system (``scripts/setup.sh`` installs Debian's ``chromium`` as root);
Playwright never downloads one. Without it the tests skip, except under ``CI=true``, where they
fail (CI runs the set-up as root)."""

from __future__ import annotations

import colorsys
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import ServeProc, wait_for

pytestmark = pytest.mark.slow


def _chromium() -> str:
    found = os.environ.get("STINT_CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")
    if found:
        return found
    why = "no chromium on PATH (Debian: apt-get install chromium; scripts/setup.sh does as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}: CI must run the browser tests")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = _chromium()
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


def _job_rgb(job_id: int) -> tuple[int, int, int]:
    """The colour the dashboard gives a job (``color`` in dashboard.js): HSL(id x 137.508)."""
    r, g, b = colorsys.hls_to_rgb((job_id * 137.508) % 360 / 360, 0.46, 0.58)
    return round(r * 255), round(g * 255), round(b * 255)


def _has_colour(png: Path, rgb: tuple[int, int, int], tol: int = 12) -> bool:
    import matplotlib.image as mpimg
    import numpy as np

    px = (mpimg.imread(png)[:, :, :3] * 255).astype(int)
    return bool((np.abs(px - np.array(rgb)).max(axis=2) <= tol).any())


def logged_in_page(browser: Any, serve: ServeProc, token: str) -> tuple[Any, list[str]]:
    """A dashboard page of `serve` signed in with `token`, and the list its script errors go to."""
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{serve.url}/ui/")
    page.fill("#token", token)
    page.click("#login-form button")
    page.wait_for_selector("#who:has-text('admin')")
    return page, errors


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # both stores: test_history_api
def test_dashboard_shows_a_queued_job_start_and_its_preemption(
        serve: ServeProc, browser: Any, tmp_path: Path) -> None:
    token = (serve.data_dir / "admin.token").read_text().strip()
    filler = int(serve.cli("submit", "--name", "filler", "--gpus", "4", "--est-s", "20", "--",
                           "sleep", "600"))
    wait_for(lambda: serve.client().show(filler)["state"] == "running", 30, "the filler to run")
    job = int(serve.cli("submit", "--name", "waiter", "--gpus", "1", "--est-s", "600", "--",
                        "sh", "-c", "echo the waiter says hello; exec sleep 600"))
    page, errors = logged_in_page(browser, serve, token)

    # queued behind the filler, with its reason, position and an estimated start
    row = page.locator(f"#queue tr[data-job='{job}']")
    row.locator(".reason:has-text('capacity')").wait_for(timeout=15_000)
    row.locator(".position:text-is('1')").wait_for(timeout=20_000)  # forecasts: every 10 s
    # the filler declared 20 s: the waiter starts when it ends (FIFO), within those 20 s
    assert re.fullmatch(r"in \d+s \(\d\d:\d\d:\d\d, between \d\d:\d\d:\d\d and \d\d:\d\d:\d\d\)",
                        row.locator(".est").inner_text())
    assert "needs 1 GPUs, 0 free" in row.locator(".reason").inner_text()
    assert "nothing else arrives" in page.inner_text("#basis")

    # running once the filler is cancelled: in the jobs table and on the node grid
    serve.cli("cancel", str(filler))
    jobs_row = page.locator(f"#jobs tr[data-job='{job}']")
    jobs_row.locator(".state:text-is('running')").wait_for(timeout=20_000)
    page.locator(f"#nodes .gpu[data-job='{job}']").wait_for()
    assert page.locator(f"#queue tr[data-job='{job}']").count() == 0
    page.locator(f"#timeline rect.segment[data-job='{job}']").first.wait_for()
    shot, row_shot = tmp_path / "dashboard.png", tmp_path / "job-row.png"
    page.screenshot(path=str(shot), full_page=True)
    jobs_row.screenshot(path=str(row_shot))
    # The row's own screenshot shows its job: its colour swatch is in the pixels, and the DOM
    # text of that row names the job and its state; the page's shows it on the grid too.
    assert row_shot.stat().st_size > 0 and _has_colour(row_shot, _job_rgb(job))
    assert _has_colour(shot, _job_rgb(job))
    assert jobs_row.inner_text().split()[:3] == [str(job), "waiter", "admin"]

    # its page: preempt it there, then see the state history and the timeline change
    jobs_row.locator("a").click()
    page.wait_for_selector(f"#title:has-text('Job {job}')")
    page.locator("dd[data-fact='state']:text-is('running')").wait_for(timeout=10_000)
    assert page.locator("#timeline rect.segment").count() == 1
    page.locator("#log:has-text('the waiter says hello')").wait_for(timeout=10_000)
    page.click("#act-preempt")
    page.wait_for_selector("#act-result:has-text('preempt requested')")
    page.locator("#history td.state:text-is('preempted')").wait_for(timeout=20_000)
    page.locator(f"#timeline .mark[data-kind='preempt'][data-job='{job}']").wait_for()
    # FIFO gives it the free GPUs again: a second attempt, a second bar on the timeline
    page.locator("#timeline rect.segment[data-attempt='2']").wait_for(timeout=20_000)
    page.locator("dd[data-fact='state']:text-is('running')").wait_for(timeout=20_000)
    page.screenshot(path=str(tmp_path / "job.png"), full_page=True)
    shown = serve.client().show(job)
    assert shown["preemptions"] == 1 and shown["attempt"] == 2
    assert "preempted" in [t["dst"] for t in shown["transitions"]]
    # once it ends it holds nothing: no workers, no allocation (the store keeps the last one)
    page.locator("dd[data-fact='allocation']:not(:text-is('-'))").wait_for()
    serve.cli("cancel", str(job))
    page.locator("dd[data-fact='state']:text-is('cancelled')").wait_for(timeout=20_000)
    assert page.inner_text("dd[data-fact='allocation']") == "-"
    assert page.inner_text("dd[data-fact='workers']").startswith("0 now")
    # a job that is not there (or not the user's) is "not found", not an unreachable server
    page.goto(page.url.rsplit("/", 1)[0] + "/999999")
    page.wait_for_selector("#status:has-text('not found')", timeout=15_000)
    assert not errors, errors


def test_sim_report_opens_from_disk_with_no_network(browser: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from stint.cli import app

    out = tmp_path / "report"
    r = CliRunner().invoke(app, ["sim", "--trace", "pollux:1", "--limit", "20", "--policy",
                                 "fifo,tiresias", "--out", str(tmp_path / "results"),
                                 "--no-plots", "--report", str(out)])
    assert r.exit_code == 0, r.output
    html = out / "report.html"
    assert [p.name for p in out.iterdir()] == ["report.html"]  # nothing else to load
    context = browser.new_context()
    context.set_offline(True)
    asked: list[str] = []

    def only_the_file(route: Any) -> None:
        asked.append(route.request.url)
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            route.abort()

    context.route("**/*", only_the_file)
    page = context.new_page()
    page.goto(html.as_uri())
    table = page.locator("table#comparison")
    assert [c.strip() for c in table.locator("tbody tr td:first-child").all_inner_texts()] == \
        ["fifo", "tiresias"]
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    jct = table.locator("tbody tr:first-child td[data-key='avg_jct_s']").inner_text()
    assert jct == f"{summary['fifo']['avg_jct_s'] / 3600:,.2f}"  # hours, as `stint sim` prints
    for img in page.locator("img").all():  # every figure is inline and drawn
        assert img.get_attribute("src", timeout=1000).startswith("data:image/png;base64,")
        assert img.evaluate("i => i.complete && i.naturalWidth > 0")
    assert page.locator("img").count() >= 4
    assert asked == [html.as_uri()]
    context.close()
