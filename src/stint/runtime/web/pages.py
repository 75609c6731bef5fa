"""The dashboard's pages: server-rendered HTML shells; ``static/dashboard.js`` fills them from
the JSON API (``/v1``), polling it, with the token the user logs in with (kept in the browser's
``localStorage`` and sent as ``Authorization: Bearer``, as the CLI does). The pages carry no data
of their own, so they need no token; everything they show comes from the API, with its rights (a
user sees their own jobs, an admin all). No CDN and no build step: the script and the style
sheet are package data.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).with_name("static")
MAX_ID = 2_147_483_647


def mount(app: FastAPI) -> None:
    """Serve the dashboard at ``/ui/`` (and ``/`` redirects there)."""
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/", include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(page("stint", "dashboard", DASHBOARD))

    @app.get("/ui/jobs/{job_id}", include_in_schema=False)
    def job_page(job_id: Annotated[int, PathParam(ge=1, le=MAX_ID)]) -> HTMLResponse:
        return HTMLResponse(page(f"stint: job {job_id}", "job", JOB, job=str(job_id)))


def page(title: str, kind: str, body: str, **data: str) -> str:
    attrs = "".join(f' data-{k}="{escape(v)}"' for k, v in data.items())
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<link rel="stylesheet" href="/ui/static/style.css">
</head>
<body data-page="{kind}"{attrs}>
<header>
  <a class="brand" href="/ui/">stint</a>
  <span id="who"></span>
  <span id="status" role="status"></span>
  <button id="logout" type="button" hidden>Log out</button>
</header>
<section id="login" hidden>
  <h1>Log in</h1>
  <p>Paste your API token (<code>stint token create USER</code> prints one; the admin's is in
  the data directory's <code>admin.token</code>). It is kept in this browser only.</p>
  <form id="login-form">
    <input id="token" name="token" type="password" autocomplete="off" placeholder="token" required>
    <button type="submit">Log in</button>
  </form>
  <p id="login-error" class="error"></p>
</section>
<main id="app" hidden>
{body}
</main>
<script src="/ui/static/dashboard.js"></script>
</body>
</html>
"""


DASHBOARD = """
<section>
  <h2>Nodes <small id="cluster-summary"></small></h2>
  <div id="nodes" class="nodes"></div>
</section>
<section>
  <h2>Queue</h2>
  <table id="queue"><thead><tr><th>#</th><th>job</th><th>user</th><th>GPUs</th><th>tier</th>
    <th>state</th><th>why it waits</th><th>estimated start</th></tr></thead><tbody></tbody></table>
  <p id="queue-more" class="basis"></p>
  <p class="basis">Estimated starts: <span id="basis"></span></p>
</section>
<section>
  <h2>Timeline <select id="window" aria-label="window">
    <option value="300">5 minutes</option><option value="900" selected>15 minutes</option>
    <option value="3600">1 hour</option><option value="21600">6 hours</option></select></h2>
  <p class="legend"><span class="mk preempt">&#x2715;</span> preempted
    <span class="mk resize">&#x25B2;</span> resized <span class="mk migrate">&#x25B6;</span> migrated
    <span class="mk fail">!</span> failed</p>
  <svg id="timeline" class="timeline" role="img" aria-label="timeline of allocations"></svg>
</section>
<section class="split">
  <div>
    <h2>Utilization and queue</h2>
    <svg id="utilization" class="chart" role="img" aria-label="utilization over time"></svg>
  </div>
  <div>
    <h2>SLA attainment</h2>
    <table id="tiers"><thead><tr><th>tier</th><th>target</th><th>jobs</th><th>meeting it</th>
      <th>mean attainment</th></tr></thead><tbody></tbody></table>
    <svg id="sla" class="chart" role="img"
         aria-label="share of finished jobs meeting their tier's target, over time"></svg>
  </div>
</section>
<section>
  <h2>Jobs <small id="jobs-count" role="status"></small></h2>
  <form id="jobs-filter" class="filters">
    <label>show <select id="f-view" aria-label="which jobs">
      <option value="live" selected>unfinished</option><option value="finished">finished</option>
      <option value="all">all</option></select></label>
    <label>user <input id="f-user" size="12" placeholder="any"></label>
    <label>tier <select id="f-tier"><option value="">any</option><option>premium</option>
      <option>standard</option><option>basic</option></select></label>
    <label>array <input id="f-array" size="8" inputmode="numeric" placeholder="any"></label>
    <button type="button" id="jobs-prev">&#x2190; newer</button>
    <button type="button" id="jobs-next">older &#x2192;</button>
    <span id="jobs-error" class="error"></span>
  </form>
  <table id="jobs"><thead><tr><th>job</th><th>name</th><th>user</th><th>state</th>
    <th>workers (min..max)</th><th>tier</th><th>attainment</th><th>submitted</th></tr></thead>
    <tbody></tbody></table>
</section>
"""

JOB = """
<section>
  <h1 id="title">Job</h1>
  <dl id="facts" class="facts"></dl>
  <div id="actions" class="actions">
    <button id="act-cancel" type="button">Cancel</button>
    <button id="act-preempt" type="button">Preempt</button>
    <span class="admin-only"><label>workers <select id="resize-to"></select></label>
      <button id="act-resize" type="button">Resize</button>
      <label>node <select id="migrate-to"></select></label>
      <button id="act-migrate" type="button">Migrate</button>
      <button id="act-unpin" type="button">Unpin</button></span>
    <span id="act-result" role="status"></span>
  </div>
</section>
<section>
  <h2>Timeline</h2>
  <svg id="timeline" class="timeline" role="img" aria-label="timeline of this job"></svg>
</section>
<section>
  <h2>State history</h2>
  <table id="history"><thead><tr><th>at</th><th>from</th><th>to</th><th>attempt</th>
    <th>reason</th></tr></thead><tbody></tbody></table>
</section>
<section>
  <h2>Log <label><input id="follow" type="checkbox" checked> follow</label></h2>
  <pre id="log" class="log"></pre>
</section>
"""
