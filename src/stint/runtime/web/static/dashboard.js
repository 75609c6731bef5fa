// stint dashboard: fills the server-rendered pages from the JSON API (/v1), polling it.
// The token is kept in localStorage and sent as "Authorization: Bearer", as the CLI does.
"use strict";

const TOKEN_KEY = "stint.token";
const POLL_MS = 1000;
const TIMELINE_ROWS = 60; // the newest jobs of the window get a row
const SVG = "http://www.w3.org/2000/svg";
const HOLDING = new Set(["starting", "running", "checkpointing"]);
const WAITING = new Set(["queued", "admitted", "preempted", "resumed", "migrating", "resizing"]);
const FINISHED = ["succeeded", "failed", "cancelled", "rejected"];
const states = (set) => [...set].map((st) => `state=${st}`).join("&");
const HOLDING_QUERY = states(HOLDING), WAITING_QUERY = states(WAITING);
const LIVE_QUERY = `${HOLDING_QUERY}&${WAITING_QUERY}`;
const VIEWS = { live: LIVE_QUERY, finished: states(FINISHED), all: "" };
const PAGE_ROWS = 50; // the job list's page: the server counts and pages, the browser draws one
const QUEUE_ROWS = 100; // the queue's first rows by position; the rest are counted
let jobsOffset = 0;
const MARK_GLYPH = { preempt: "\u2715", resize: "\u25B2", migrate: "\u25B6", fail: "!" };
let me = null;
let generation = 0; // of the polling loop: a new log-in stops the old one
let actionsReady = false;
let listReady = false;

// -- plumbing -------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

class ApiError extends Error {
  constructor(message, status = 0) { super(message); this.status = status; }
}

async function api(path, method = "GET", body = undefined) {
  return (await apiResponse(path, method, body)).data;
}

// A page of a list and the total the server counted (X-Total-Count).
async function apiPage(path) {
  const { data, total } = await apiResponse(path);
  return { rows: data, total };
}

async function apiResponse(path, method = "GET", body = undefined) {
  const headers = { Authorization: "Bearer " + localStorage.getItem(TOKEN_KEY) };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) {
    showLogin("That token is not valid (or was revoked).");
    throw new ApiError("not logged in");
  }
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new ApiError(detail(data) || `${r.status} ${r.statusText}`, r.status);
  return { data, total: Number(r.headers.get("X-Total-Count") ?? -1) };
}

function detail(data) {
  if (typeof data.detail === "string") return data.detail;
  if (Array.isArray(data.detail)) return data.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  return "";
}

function color(jobId) {
  return `hsl(${(jobId * 137.508) % 360}, 58%, 46%)`;
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
}

function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

function relative(t, now) {
  return t >= now ? `in ${span(t - now)}` : `${span(now - t)} ago`;
}

// A waiting job's estimated start: never a time past (the controller estimates it again at
// once), with its band when there is one.
function startText(j, now) {
  if (j.est_start_at === null) return "not within the forecast";
  if (j.est_start_at < now) return "overdue, re-estimating";
  const band = j.est_start_lo_at !== null && j.est_start_hi_at !== null
    ? `, between ${clock(j.est_start_lo_at)} and ${clock(j.est_start_hi_at)}` : "";
  return `${relative(j.est_start_at, now)} (${clock(j.est_start_at)}${band})`;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function jobLink(job) {
  return el("a", { href: `/ui/jobs/${job.id}` }, el("span", { class: "swatch", style: `background:${color(job.id)}` }), `${job.id}`);
}

// What a job holds now: nothing unless it is in a holding state (a preempted, failed or
// finished job keeps its last allocation in the store, for the record).
function heldNow(job) {
  return HOLDING.has(job.state) ? job.allocation : {};
}

function workersNow(job) {
  return Object.values(heldNow(job)).reduce((a, b) => a + b, 0);
}

// -- log in ----------------------------------------------------------------------------------
function showLogin(message) {
  localStorage.removeItem(TOKEN_KEY);
  me = null;
  document.getElementById("app").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
}

async function start() {
  document.getElementById("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    localStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
    await enter();
  });
  document.getElementById("logout").addEventListener("click", () => showLogin(""));
  if (localStorage.getItem(TOKEN_KEY)) await enter();
  else showLogin("");
}

async function enter() {
  try {
    me = await api("/v1/whoami");
  } catch (e) {
    if (localStorage.getItem(TOKEN_KEY)) showLogin(`Cannot log in: ${e.message}`);
    return;
  }
  document.getElementById("login").hidden = true;
  document.getElementById("app").hidden = false;
  document.getElementById("logout").hidden = false;
  document.getElementById("who").textContent = `${me.user}${me.admin ? " (admin)" : ""}`;
  const page = document.body.dataset.page;
  const tick = page === "job" ? jobTick(Number(document.body.dataset.job)) : dashboardTick;
  if (page === "job" && !actionsReady) setUpActions(Number(document.body.dataset.job));
  if (page === "dashboard" && !listReady) { setUpJobList(); listReady = true; }
  poll(tick, ++generation);
}

async function poll(tick, gen) {
  while (me !== null && gen === generation) {
    const status = document.getElementById("status");
    const began = Date.now();
    try {
      await tick();
      status.textContent = `updated ${clock(Date.now() / 1000)}`;
      status.classList.remove("error");
    } catch (e) {
      if (me === null) return;
      status.textContent = e.status === 404 ? `not found: ${e.message}`
        : e.status ? `the control plane refused: ${e.message}` : `cannot reach the control plane: ${e.message}`;
      status.classList.add("error");
    }
    // a big cluster's reads take longer: poll no more than a third of the time
    await new Promise((r) => setTimeout(r, Math.max(POLL_MS, 2 * (Date.now() - began))));
  }
}

// -- the dashboard ---------------------------------------------------------------------------
async function dashboardTick() {
  const since = Date.now() / 1000 - Number(document.getElementById("window").value);
  // the jobs holding GPUs (no more than the GPUs) and the queue's first rows with its length
  const [holders, queue, nodes, history, cluster, listed] = await Promise.all([
    api(`/v1/jobs?${HOLDING_QUERY}&limit=10000`),
    apiPage(`/v1/jobs?${WAITING_QUERY}&order=queue&limit=${QUEUE_ROWS}`),
    api("/v1/nodes"), api(`/v1/history?since=${since}`), api(`/v1/cluster?since=${since}`), listPage()]);
  const now = history.now;
  const byId = new Map([...holders, ...queue.rows].map((j) => [j.id, j]));
  document.getElementById("cluster-summary").textContent =
    `${cluster.used_gpus} of ${cluster.total_gpus} GPUs in use; policy ${cluster.policy || "?"}`;
  drawNodes(nodes, holders);
  drawQueue(queue, now);
  document.getElementById("basis").textContent = cluster.forecast_basis;
  drawTimeline(document.getElementById("timeline"), history, byId);
  drawUtilization(document.getElementById("utilization"), history);
  drawTiers(cluster.tiers);
  drawSla(document.getElementById("sla"), history);
  drawJobs(listed, now);
}

// The job list's query from its filters (a bad one is the server's 422, shown beside them).
function listQuery() {
  const parts = [VIEWS[document.getElementById("f-view").value], `limit=${PAGE_ROWS}`,
    `offset=${jobsOffset}`, "order=desc"];
  for (const [id, name] of [["f-user", "user"], ["f-tier", "tier"], ["f-array", "array"]]) {
    const v = document.getElementById(id).value.trim();
    if (v) parts.push(`${name}=${encodeURIComponent(v)}`);
  }
  return parts.filter((p) => p).join("&");
}

async function listPage() {
  const error = document.getElementById("jobs-error");
  try {
    const page = await apiPage(`/v1/jobs?${listQuery()}`);
    error.textContent = "";
    return page;
  } catch (e) {
    if (!e.status) throw e;
    error.textContent = e.message;
    return { rows: [], total: 0 };
  }
}

function setUpJobList() {
  const again = () => { jobsOffset = 0; dashboardTick().catch(() => {}); };
  for (const id of ["f-view", "f-tier"]) document.getElementById(id).addEventListener("change", again);
  for (const id of ["f-user", "f-array"]) document.getElementById(id).addEventListener("change", again);
  document.getElementById("jobs-filter").addEventListener("submit", (e) => { e.preventDefault(); again(); });
  document.getElementById("jobs-prev").addEventListener("click", () => {
    jobsOffset = Math.max(0, jobsOffset - PAGE_ROWS); dashboardTick().catch(() => {});
  });
  document.getElementById("jobs-next").addEventListener("click", () => {
    jobsOffset += PAGE_ROWS; dashboardTick().catch(() => {});
  });
}

function drawNodes(nodes, holders) {
  const boxes = nodes.map((n) => {
    const cells = [];
    for (const j of holders) {
      for (let i = 0; i < (j.allocation[n.name] || 0); i++) {
        cells.push(el("a", { class: "gpu", href: `/ui/jobs/${j.id}`, "data-job": j.id, style: `background:${color(j.id)}`,
          title: `job ${j.id} ${j.name} (${j.user})` }, `${j.id}`));
      }
    }
    while (cells.length < n.used) cells.push(el("span", { class: "gpu other", title: "another user's job" }));
    while (cells.length < n.gpus) cells.push(el("span", { class: "gpu free", title: "free" }));
    return el("div", { class: `node${n.state === "ready" ? "" : " down"}`, "data-node": n.name },
      el("div", { class: "name" }, `${n.name} `, n.gpu_type ? el("small", { class: "type" }, `${n.gpu_type} `) : "",
        el("small", {}, `${n.used}/${n.gpus} ${n.state === "ready" ? "" : n.state}`),
        n.cluster ? el("small", { class: "where" }, ` ${n.cluster}${n.region ? " · " + n.region : ""}`) : ""),
      el("div", { class: "gpus" }, ...cells));
  });
  document.getElementById("nodes").replaceChildren(...boxes);
}

// The queue's first rows, in the server's queue order, and how many more wait.
function drawQueue(queue, now) {
  const more = queue.total - queue.rows.length;
  document.getElementById("queue-more").textContent = more > 0 ? `and ${more} more waiting` : "";
  fill(document.querySelector("#queue tbody"), queue.rows.map((j) => el("tr", { "data-job": j.id },
    el("td", { class: "position" }, j.queue_position ?? "-"), el("td", {}, jobLink(j), ` ${j.name}`),
    el("td", {}, j.user), el("td", {}, j.gpus), el("td", {}, j.tier), el("td", { class: "state" }, j.state),
    el("td", { class: "reason" }, j.reason),
    el("td", { class: "est" }, startText(j, now)))));
}

function drawJobs(listed, now) {
  const { rows, total } = listed;
  if (total > 0 && jobsOffset >= total) jobsOffset = Math.floor((total - 1) / PAGE_ROWS) * PAGE_ROWS;
  document.getElementById("jobs-count").textContent = total === 0 ? "none"
    : `${jobsOffset + 1}-${jobsOffset + rows.length} of ${total}`;
  document.getElementById("jobs-prev").disabled = jobsOffset === 0;
  document.getElementById("jobs-next").disabled = jobsOffset + rows.length >= total;
  fill(document.querySelector("#jobs tbody"), rows.map((j) => el("tr", { "data-job": j.id },
    el("td", {}, jobLink(j)), el("td", {}, j.name), el("td", {}, j.user), el("td", { class: "state" }, j.state),
    el("td", {}, `${workersNow(j)} (${j.min_gpus}..${j.max_gpus})`), el("td", {}, j.tier),
    el("td", {}, j.attainment === null ? "-" : j.attainment.toFixed(2)),
    el("td", {}, relative(j.submitted_at, now)))));
}

function drawTiers(tiers) {
  fill(document.querySelector("#tiers tbody"), tiers.map((t) => el("tr", { "data-tier": t.tier },
    el("td", {}, t.tier), el("td", {}, t.target === null ? "best effort" : t.target.toFixed(2)),
    el("td", {}, t.jobs), el("td", {}, `${t.met} (${t.jobs ? Math.round((100 * t.met) / t.jobs) : 0}%)`),
    el("td", {}, t.mean_attainment === null ? "-" : t.mean_attainment.toFixed(2)))));
}

// Per tier: the share of its finished jobs that met the tier's target, over time (0..100 %).
const TIER_COLOR = { premium: "#7a2e8e", standard: "#175cd3", basic: "#667085" };
function drawSla(svg, history) {
  const width = svg.clientWidth || 500, height = 160, pad = 30;
  const t1 = Math.max(history.now, history.since + 1);
  const points = Object.values(history.sla_met).flat();
  const t0 = Math.min(t1 - 1, ...points.map((p) => p[0]));
  const x = (t) => pad + ((t - t0) / (t1 - t0)) * (width - 2 * pad);
  const y = (v) => height - pad - v * (height - 2 * pad);
  const parts = [el("svg:text", { x: 2, y: 14 }, "finished jobs meeting their target"),
    el("svg:line", { x1: pad, x2: width - pad, y1: y(0), y2: y(0), stroke: "#d9dee5" }),
    el("svg:text", { x: pad, y: height - 10 }, clock(t0)),
    el("svg:text", { x: width - pad, y: height - 10, "text-anchor": "end" }, clock(t1))];
  let row = 0;
  for (const [tier, series] of Object.entries(history.sla_met)) {
    const d = series.map(([t, v], i) => `${i ? "H" + x(t) + "V" : "M" + x(t) + ","}${y(v)}`).join("") + `H${x(t1)}`;
    const last = series[series.length - 1][1];
    parts.push(el("svg:path", { d, fill: "none", stroke: TIER_COLOR[tier] || "#000", "stroke-width": 2, class: `sla ${tier}` }),
      el("svg:text", { x: width - 2, y: 14 + 14 * row++, "text-anchor": "end", style: `fill:${TIER_COLOR[tier] || "#000"}` },
        `${tier} ${Math.round(100 * last)}%`));
  }
  svg.replaceChildren(...parts);
}

// One row per job: its holds as bars (labelled with the allocation), its marks as glyphs.
function drawTimeline(svg, history, byId) {
  const ids = [...new Set([...history.segments.map((s) => s.job), ...history.marks.map((m) => m.job)])]
    .sort((a, b) => a - b).slice(-TIMELINE_ROWS);
  const shown = new Set(ids);
  history = { ...history, segments: history.segments.filter((s) => shown.has(s.job)),
    marks: history.marks.filter((m) => shown.has(m.job)) };
  const width = svg.clientWidth || 1000;
  const left = 90, right = 10, rowH = 22, top = 18;
  // from the first thing shown (or the window's start), with a margin, to now
  const first = Math.min(history.now, ...history.segments.map((s) => s.start), ...history.marks.map((m) => m.at));
  const t1 = Math.max(history.now, history.since + 1);
  const t0 = Math.max(history.since, first - Math.max(5, (t1 - first) * 0.05));
  const x = (t) => left + ((Math.max(t0, Math.min(t, t1)) - t0) / (t1 - t0)) * (width - left - right);
  const row = new Map(ids.map((id, i) => [id, top + i * rowH]));
  const parts = [el("svg:text", { x: left, y: 12 }, clock(t0)),
    el("svg:text", { x: width - right, y: 12, "text-anchor": "end" }, clock(t1))];
  for (const id of ids) {
    const job = byId.get(id);
    parts.push(el("svg:a", { href: `/ui/jobs/${id}` },
      el("svg:text", { x: 4, y: row.get(id) + 15 }, `job ${id}${job ? " " + job.name : ""}`.slice(0, 14))));
  }
  for (const s of history.segments) {
    const x0 = x(s.start), x1 = x(s.end === null ? t1 : s.end);
    const where = Object.entries(s.allocation).map(([n, c]) => `${n}\u00d7${c}`).join(" ");
    const bar = el("svg:rect", { x: x0, y: row.get(s.job) + 3, width: Math.max(2, x1 - x0), height: rowH - 6, rx: 2,
      fill: color(s.job), class: "segment", "data-job": s.job, "data-attempt": s.attempt },
    el("svg:title", {}, `job ${s.job} attempt ${s.attempt} on ${where}: ${clock(s.start)}\u2013${s.end === null ? "now" : clock(s.end) + " (" + s.ended + ")"}`));
    parts.push(bar);
    if (x1 - x0 > 60) parts.push(el("svg:text", { x: x0 + 4, y: row.get(s.job) + 15, style: "fill:#fff" }, where));
  }
  for (const m of history.marks) {
    parts.push(el("svg:g", { class: `mark ${m.kind}`, "data-job": m.job, "data-kind": m.kind },
      el("svg:line", { x1: x(m.at), x2: x(m.at), y1: row.get(m.job), y2: row.get(m.job) + rowH }),
      el("svg:text", { x: x(m.at) - 12, y: row.get(m.job) + 16 }, MARK_GLYPH[m.kind] || "?"),
      el("svg:title", {}, `${m.kind} at ${clock(m.at)}: ${m.reason}`)));
  }
  svg.setAttribute("height", String(top + Math.max(1, ids.length) * rowH + 4));
  svg.replaceChildren(...parts);
}

// GPU utilization (filled, left axis 0..100 %) and waiting jobs (line, right axis).
function drawUtilization(svg, history) {
  const width = svg.clientWidth || 700, height = 220, pad = 30;
  const first = Math.min(history.now, ...[history.utilization, history.waiting].filter((s) => s.length).map((s) => s[0][0]));
  const t1 = Math.max(history.now, history.since + 1);
  const t0 = Math.max(history.since, first - Math.max(5, (t1 - first) * 0.05)); // from the first change
  const x = (t) => pad + ((Math.max(t0, t) - t0) / (t1 - t0)) * (width - 2 * pad);
  const maxWait = Math.max(1, ...history.waiting.map((p) => p[1]));
  const yu = (v) => height - pad - (v / Math.max(1, history.total_gpus)) * (height - 2 * pad);
  const yw = (v) => height - pad - (v / maxWait) * (height - 2 * pad);
  const path = (series, y) => {
    let d = "", last = null;
    for (const [t, v] of series) {
      d += last === null ? `M${x(t)},${y(v)}` : `H${x(t)}V${y(v)}`;
      last = v;
    }
    return last === null ? "" : d + `H${x(t1)}`;
  };
  const util = path(history.utilization, yu);
  svg.replaceChildren(
    el("svg:text", { x: 2, y: pad - 8 }, `GPUs busy (of ${history.total_gpus})`),
    el("svg:text", { x: width - 2, y: pad - 8, "text-anchor": "end", style: "fill:#b54708" }, `jobs waiting (max ${maxWait})`),
    el("svg:line", { x1: pad, x2: width - pad, y1: height - pad, y2: height - pad, stroke: "#d9dee5" }),
    el("svg:text", { x: pad, y: height - 10 }, clock(t0)),
    el("svg:text", { x: width - pad, y: height - 10, "text-anchor": "end" }, clock(t1)),
    el("svg:path", { d: util ? util + `V${yu(0)}H${x(history.utilization[0][0])}Z` : "", fill: "#9ec5fe", stroke: "#175cd3", class: "util" }),
    el("svg:path", { d: path(history.waiting, yw), fill: "none", stroke: "#b54708", "stroke-width": 2, class: "waiting" }));
}

// -- a job's page ----------------------------------------------------------------------------
function jobTick(jobId) {
  let offset = null, lines = [];
  const MAX_LINES = 2000;
  return async () => {
    const job = await api(`/v1/jobs/${jobId}`);
    const [progress, history] = await Promise.all([api(`/v1/jobs/${jobId}/progress`),
      api(`/v1/history?job=${jobId}&since=${job.submitted_at - 1}`)]);
    const now = history.now;
    document.getElementById("title").textContent = `Job ${job.id} ${job.name}`;
    const facts = [["state", job.state], ["reason", job.reason], ["user", job.user],
      ["command", job.command.join(" ")], ["workers", `${workersNow(job)} now (${job.min_gpus}..${job.max_gpus}; feasible ${job.worker_counts.join(", ")})`],
      ["allocation", Object.entries(heldNow(job)).map(([n, c]) => `${n}\u00d7${c}`).join(" ") || "-"],
      ["tier", `${job.tier} (attainment ${job.attainment === null ? "-" : job.attainment.toFixed(2)})`],
      ["attempt", `${job.attempt} (${job.preemptions} preemptions, ${job.failures} failures)`],
      ["progress", progress.step === null ? "not reported" : `step ${progress.step}${progress.total_steps ? " of " + progress.total_steps : ""}`
        + `; last checkpoint ${progress.checkpoint_step === null ? "none" : "at step " + progress.checkpoint_step}`],
      ["queue position", job.queue_position ?? "-"],
      ["estimated start", HOLDING.has(job.state) ? `started ${relative(job.transitions.at(-1).at, now)}`
        : !WAITING.has(job.state) ? "-" : startText(job, now)],
      ["estimated finish", job.est_finish_at === null ? "-" : `${relative(job.est_finish_at, now)} (${clock(job.est_finish_at)})`],
      ["decision", job.decision || "-"], ["pins", [job.pin_workers && `workers=${job.pin_workers}`, job.pin_node && `node=${job.pin_node}`].filter(Boolean).join(", ") || "-"]];
    document.getElementById("facts").replaceChildren(...facts.flatMap(([k, v]) =>
      [el("dt", {}, k), el("dd", { "data-fact": k }, v)]));
    updateActions(job);
    drawTimeline(document.getElementById("timeline"), history, new Map([[job.id, job]]));
    fill(document.querySelector("#history tbody"), job.transitions.map((t) => el("tr", {},
      el("td", {}, clock(t.at)), el("td", {}, t.src || "-"), el("td", { class: "state" }, t.dst),
      el("td", {}, t.attempt), el("td", {}, t.reason))));
    if (offset === null) { // the tail first: the last 64 KiB, from its first whole line
      const chunk = await api(`/v1/jobs/${jobId}/logs?tail=65536`);
      const text = chunk.next_offset > 65536 ? chunk.text.slice(chunk.text.indexOf("\n") + 1) : chunk.text;
      lines = text.split("\n");
      offset = chunk.next_offset;
    }
    const follow = document.getElementById("follow").checked;
    for (let more = follow; more;) { // follow: whatever was written since
      const chunk = await api(`/v1/jobs/${jobId}/logs?offset=${offset}`);
      offset = chunk.next_offset;
      more = chunk.text !== "";
      const added = chunk.text.split("\n");
      lines[lines.length - 1] += added.shift(); // the line the last chunk ended in
      lines = lines.concat(added).slice(-MAX_LINES);
    }
    const log = document.getElementById("log");
    if (log.textContent !== lines.join("\n")) {
      log.textContent = lines.join("\n");
      if (follow) log.scrollTop = log.scrollHeight;
    }
  };
}

function setUpActions(jobId) {
  actionsReady = true;
  const act = (kind, body) => async () => {
    const out = document.getElementById("act-result");
    try {
      const job = await api(`/v1/jobs/${jobId}/${kind}`, "POST", body === undefined ? undefined : body());
      out.textContent = `${kind} requested (the job is ${job.state})`;
      out.classList.remove("error");
    } catch (e) {
      out.textContent = `${kind}: ${e.message}`;
      out.classList.add("error");
    }
  };
  document.getElementById("act-preempt").addEventListener("click", act("preempt"));
  document.getElementById("act-cancel").addEventListener("click", () => {
    if (confirm(`Cancel job ${jobId}? It is stopped for good.`)) act("cancel")();
  });
  document.getElementById("act-resize").addEventListener("click", act("resize",
    () => ({ workers: Number(document.getElementById("resize-to").value) })));
  document.getElementById("act-migrate").addEventListener("click", act("migrate",
    () => ({ node: document.getElementById("migrate-to").value })));
  document.getElementById("act-unpin").addEventListener("click", act("unpin"));
  document.querySelector(".admin-only").hidden = !me.admin;
  if (me.admin) {
    api("/v1/nodes").then((nodes) => document.getElementById("migrate-to").replaceChildren(
      ...nodes.map((n) => el("option", { value: n.name }, `${n.name} (${n.free} free)`))));
  }
}

// What the user may do now: cancel a live job, preempt a running one; an admin may also pin.
function updateActions(job) {
  const live = !["succeeded", "failed", "cancelled", "rejected"].includes(job.state);
  document.getElementById("act-cancel").disabled = !live || job.cancel_requested;
  document.getElementById("act-preempt").disabled = !(job.state === "running" || job.state === "starting");
  for (const id of ["act-resize", "act-migrate", "act-unpin"]) document.getElementById(id).disabled = !live;
  const sel = document.getElementById("resize-to");
  if (sel.options.length !== job.worker_counts.length) {
    sel.replaceChildren(...job.worker_counts.map((c) => el("option", { value: c }, c)));
  }
}

start();
