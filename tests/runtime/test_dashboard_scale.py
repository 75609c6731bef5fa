"""The dashboard over 10,000 jobs, in Debian's chromium: the job list is one server-counted
page of rows, filtered and paged by the API; a finished job's page opens from it; a preempted
job shows no allocation. The jobs are written through the store (two job arrays) before
``stint serve`` starts, then given their outcomes as the controller would have."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import ServeProc
from sqlalchemy import update
from test_dashboard import browser, logged_in_page  # noqa: F401 (browser: the fixture)

from stint.runtime.store import NewJob, Store
from stint.runtime.tables import Job

pytestmark = pytest.mark.slow
N_ALICE, N_BOB = 8000, 2000
PAGE_ROWS = 50  # dashboard.js's PAGE_ROWS


def _spec(tier: str) -> NewJob:
    return NewJob(name=f"{tier}-task", command=["true"], gpus=1, min_gpus=1, max_gpus=1,
                  tier=tier, priority=0.0, deadline_s=None)


def _seed(db_url: str, data_dir: Path) -> tuple[list[int], list[int]]:
    """Alice's 8,000 basic tasks and Bob's 2,000 premium ones, all finished but Bob's last
    (preempted, backing off for an hour before it retries; its last allocation stays recorded)."""
    store = Store(db_url)
    store.migrate()
    now = time.time()
    data_dir.mkdir(parents=True)
    assert store.ensure_admin_token(data_dir / "admin.token", now) is not None
    alice = store.caller_for_token(store.create_token("alice", now))
    bob = store.caller_for_token(store.create_token("bob", now))
    assert alice is not None and bob is not None
    a = store.add_array(_spec("basic"), alice, now, range(N_ALICE))
    b = store.add_array(_spec("premium"), bob, now, range(N_BOB))
    with store.session() as s:
        s.execute(update(Job).where(Job.id.in_(a + b[:-1])).values(
            state="succeeded", finished_at=now, allocation="[[0, 1]]"))
        s.execute(update(Job).where(Job.id.in_(a[::4])).values(state="failed"))
        s.execute(update(Job).where(Job.id == b[-1]).values(
            state="preempted", retry_at=now + 3600, allocation="[[0, 1], [1, 1]]"))
    store.close()
    return a, b


def _rows(page: Any) -> list[int]:
    return [int(x) for x in page.locator("#jobs tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.job)")]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_dashboard_pages_and_filters_ten_thousand_jobs(
        db_url: str, tmp_path: Path, browser: Any) -> None:  # noqa: F811
    a, b = _seed(db_url, tmp_path / "data")
    serve = ServeProc(tmp_path / "data", db_url)
    serve.start()
    try:
        _browse(serve, browser, a, b)
    finally:
        serve.stop()


def _browse(serve: ServeProc, chromium: Any, a: list[int], b: list[int]) -> None:
    token = (serve.data_dir / "admin.token").read_text().strip()
    page, errors = logged_in_page(chromium, serve, token)
    # unfinished (the default): only the preempted one; it holds nothing, so no node cell
    page.locator("#jobs-count:text-is('1-1 of 1')").wait_for(timeout=30_000)
    assert _rows(page) == [b[-1]]
    assert page.locator(f"#nodes .gpu[data-job='{b[-1]}']").count() == 0

    # all 10,000: one page of 50 rows, newest first, and the server's count; then the next
    page.select_option("#f-view", "all")
    page.locator(f"#jobs-count:text-is('1-{PAGE_ROWS} of {N_ALICE + N_BOB}')").wait_for(
        timeout=30_000)  # a generous bound: the page is drawn, not all 10,000 rows
    assert _rows(page) == sorted(a + b, reverse=True)[:PAGE_ROWS]
    page.click("#jobs-next")
    page.locator(f"#jobs-count:text-is('51-100 of {N_ALICE + N_BOB}')").wait_for(timeout=30_000)
    assert _rows(page) == sorted(a + b, reverse=True)[PAGE_ROWS:2 * PAGE_ROWS]
    assert page.locator("#jobs tbody tr").count() == PAGE_ROWS

    # finished, filtered to alice's basic tier: failed ones among them; then one array
    page.select_option("#f-view", "finished")
    page.fill("#f-user", "alice")
    page.select_option("#f-tier", "basic")  # a change: back to the first page
    page.locator(f"#jobs-count:text-is('1-{PAGE_ROWS} of {N_ALICE}')").wait_for(timeout=30_000)
    assert _rows(page) == sorted(a, reverse=True)[:PAGE_ROWS]
    page.select_option("#f-tier", "premium")
    page.locator("#jobs-count:text-is('none')").wait_for(timeout=30_000)
    page.fill("#f-user", "")
    page.fill("#f-array", str(b[0]))
    page.press("#f-array", "Enter")
    page.locator(f"#jobs-count:text-is('1-{PAGE_ROWS} of {N_BOB - 1}')").wait_for(
        timeout=30_000)
    assert set(_rows(page)) <= set(b)
    page.fill("#f-array", "x")
    page.press("#f-array", "Enter")
    page.locator("#jobs-error:has-text('array')").wait_for(timeout=30_000)

    # a finished (failed) job's page, opened from the list
    page.fill("#f-array", "")
    page.select_option("#f-tier", "basic")
    page.locator(f"#jobs-count:text-is('1-{PAGE_ROWS} of {N_ALICE}')").wait_for(timeout=30_000)
    failed = a[-4] if (len(a) - 4) % 4 == 0 else a[(len(a) - 1) // 4 * 4]
    page.locator(f"#jobs tr[data-job='{failed}'] a").click()
    page.wait_for_selector(f"#title:has-text('Job {failed}')")
    page.locator("dd[data-fact='state']:text-is('failed')").wait_for(timeout=30_000)
    assert page.inner_text("dd[data-fact='allocation']") == "-"

    # the preempted job's page: its recorded allocation is not drawn as held
    page.goto(f"{serve.url}/ui/jobs/{b[-1]}")
    page.locator("dd[data-fact='state']:text-is('preempted')").wait_for(timeout=30_000)
    assert page.inner_text("dd[data-fact='allocation']") == "-"
    assert page.inner_text("dd[data-fact='workers']").startswith("0 now")
    assert not errors, errors
