// The dispatch dashboard: a paged job list (/) and each job's page (/jobs/ID), polled from
// the JSON API with ETags (an unchanged answer is a 304 and nothing is redrawn). Every word
// that came from a user or a scheduler is set as text (textContent, title), never as HTML.
"use strict";

const POLL_MS = 2000;
const LOG_LINES = 2000; // the logs pane keeps this many lines at most
const CAUSE_COLOURS = {
  "none": "#16a34a", "preempted": "#f59e0b", "node-lost": "#7c3aed",
  "out-of-memory": "#dc2626", "time-limit": "#a16207", "non-zero-exit": "#e11d48",
  "launch-failed": "#9f1239", "no-capacity": "#64748b", "held": "#c026d3",
  "released": "#0d9488", "requeued": "#ca8a04", "cancelled": "#4b5563",
  "duplicate": "#334155", "unknown": "#111827",
};
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const NATURAL_DESC = new Set(["created", "ended", "duration"]); // first sorted high to low
// the closed State enum (core/model.py), in the order the counts above the list name them;
// "live": the unfinished jobs while the server has not yet folded them into states
const STATES = ["pending", "held", "running", "recovering", "succeeded", "failed", "cancelled", "unknown", "live"];

let view = { job: null };       // the route: a job id, or null for the list
let listState = { order: "created", desc: true, cursors: [null], page: 0, next: null };
const tags = new Map();          // path -> [etag, body] of the last full answer
let logStream = null;            // {controller, key} of the logs being read

function $(id) { return document.getElementById(id); }

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") Object.assign(node.style, v);
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// "rank 1 on node1: FloatingPointError: loss is NaN", as `dispatch status` says it.
function appErrorText(e) {
  let words = e.message || "";
  if (e.signal !== null && e.signal !== undefined && !words.toLowerCase().includes("signal")) {
    const killed = "killed by signal " + e.signal + (e.signal_name ? " (" + e.signal_name + ")" : "");
    words = words ? words + " (" + killed + ")" : killed;
  } else if (!words && e.exit_code !== null && e.exit_code !== undefined) {
    words = "exited " + e.exit_code;
  }
  const parts = [];
  if (e.rank !== null && e.rank !== undefined) parts.push("rank " + e.rank);
  if (e.node) parts.push(parts.length ? "on " + e.node : e.node);
  const head = parts.join(" ");
  return (head && words ? head + ": " + words : head || words).split("\n").join(" ");
}

function pad(n) { return String(n).padStart(2, "0"); }

// A time as local wall-clock time with its zone: 2026-12-02 05:14:03 UTC+01:00.
function fmtTime(iso) {
  if (!iso) return "-";
  const d = new Date(iso);
  const off = -d.getTimezoneOffset();
  const zone = "UTC" + (off === 0 ? "" : (off > 0 ? "+" : "-") + pad(Math.floor(Math.abs(off) / 60)) +
    ":" + pad(Math.abs(off) % 60));
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
    pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " " + zone;
}

function fmtClock(iso) { return fmtTime(iso).slice(11); }

function fmtDuration(seconds) {
  if (seconds < 10) return Math.round(seconds * 10) / 10 + "s"; // a short job's tenths
  const s = Math.round(seconds);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + pad(s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + pad(Math.floor((s % 3600) / 60)) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
}

async function send(path, options) {
  const opts = Object.assign({ headers: {}, credentials: "same-origin", cache: "no-store" }, options || {});
  const resp = await fetch(path, opts);
  if (resp.status === 401) {
    location.assign("/login"); // the session is gone (the server restarted): log in again
    throw new Error("not logged in");
  }
  return resp;
}

async function errorOf(resp) {
  let message = resp.status + " " + resp.statusText;
  try {
    const body = await resp.json();
    if (body && body.error) message = body.error.message;
  } catch (e) { /* not JSON */ }
  const err = new Error(message);
  err.status = resp.status;
  return err;
}

// GET with the last ETag of this path: {changed, body}; a 304 is unchanged.
async function poll(path, allowStatus) {
  const known = tags.get(path);
  const headers = known ? { "If-None-Match": known[0] } : {};
  const resp = await send(path, { headers });
  if (resp.status === 304 && known) return { changed: false, body: known[1] };
  if (!resp.ok && !(allowStatus && allowStatus(resp.status))) throw await errorOf(resp);
  const body = await resp.json();
  const etag = resp.headers.get("ETag");
  if (etag) tags.set(path, [etag, body]);
  return { changed: true, body };
}

async function post(path) {
  const resp = await send(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  if (!resp.ok) throw await errorOf(resp);
  return resp.json();
}

function causeText(c) {
  if (!c) return "-";
  let t = c.kind;
  if (c.exit_code !== undefined && c.exit_code !== null) t += " (exit " + c.exit_code + ")";
  if (c.actor) t += " by " + c.actor;
  return t;
}

function causeTitle(c) {
  if (!c) return "";
  const parts = [causeText(c), "said by: " + (c.provenance || "scheduler")];
  if (c.detail) parts.push("“" + c.detail + "”");
  if (c.note) parts.push(c.note);
  if (c.at) parts.push(fmtTime(c.at));
  return parts.join("\n");
}

// A badge: the word always, the colour only beside it.
function stateBadge(state, settled) {
  const b = el("span", { class: "state " + state }, state);
  if (settled === false && TERMINAL.has(state)) b.title = "not yet committed";
  return b;
}

// "after 2 recoveries: preempted, node-lost": a recovered job reads as one (issue 48).
function recoveryText(n, kinds) {
  if (!n) return "";
  return "after " + n + (n === 1 ? " recovery: " : " recoveries: ") + kinds.join(", ");
}

function causeBadge(c, recovered) {
  const span = el("span", { class: "cause-badge", title: causeTitle(c) });
  if (!c) { span.textContent = "-"; return span; }
  span.append(el("i", { class: "swatch", style: { background: CAUSE_COLOURS[c.kind] || "#111" } }));
  span.append(document.createTextNode((recovered ? "recovered from " : "") + causeText(c)));
  return span;
}

// ---- the list ---------------------------------------------------------------------------

function listQuery() {
  const p = new URLSearchParams();
  const q = $("q").value.trim();
  if (q) p.set("q", q);
  for (const [id, name] of [["state-filter", "state"], ["backend-filter", "backend"], ["cause-filter", "cause"]]) {
    if ($(id).value) p.set(name, $(id).value);
  }
  return p;
}

function listPath() {
  const p = listQuery();
  p.set("limit", $("page-size").value);
  p.set("order", (listState.desc ? "-" : "") + listState.order);
  const cursor = listState.cursors[listState.page];
  if (cursor) p.set("after", cursor);
  return "/api/jobs?" + p.toString();
}

function jobRow(j) {
  const tr = el("tr", { "data-job": j.job });
  const idCell = el("td", { class: "id" });
  idCell.append(el("a", { href: "/jobs/" + encodeURIComponent(j.job) }, j.job));
  tr.append(idCell);
  if (j.error) {
    tr.append(el("td", { colspan: 9 }, "record unusable: " + j.error.message));
    return tr;
  }
  tr.append(el("td", { class: "name" }, j.name));
  const st = el("td", { class: "state-cell" });
  st.append(stateBadge(j.state, j.settled));
  if (j.state === "held") st.append(el("span", { class: "waits" }, " waits for you"));
  tr.append(st);
  const cause = el("td", { class: "cause" });
  cause.append(causeBadge(j.cause, j.recovered));
  if (j.recoveries) cause.append(el("span", { class: "recovery" }, " " + recoveryText(j.recoveries, j.recovered_from)));
  tr.append(cause);
  // the application's own error, shortened (the job's page has it whole)
  tr.append(el("td", { class: "app-error-cell", title: j.app_error || "" }, j.app_error || ""));
  tr.append(el("td", { class: "num" }, j.submissions));
  // times without their zone (the header says it): the row keeps its room for the error
  tr.append(el("td", { class: "time", title: fmtTime(j.created_at) }, shortTime(j.created_at)));
  tr.append(el("td", { class: "time ended", title: j.ended_at ? fmtTime(j.ended_at) : "not ended" },
    endedText(j.created_at, j.ended_at)));
  // time to result: creation to the outcome, or to now while unfinished (kept current)
  tr.append(el("td", { class: "num duration", "data-since": j.created_at, "data-until": j.ended_at || "" },
    durationText(j.created_at, j.ended_at)));
  tr.append(el("td", {}, j.backend));
  tr.addEventListener("click", (e) => {
    if (e.target.tagName === "A" && (e.ctrlKey || e.metaKey || e.shiftKey)) return;
    e.preventDefault();
    go("/jobs/" + encodeURIComponent(j.job));
  });
  return tr;
}

function drawList(page) {
  const rows = $("job-rows");
  rows.replaceChildren();
  const problems = new Set();
  for (const j of page.jobs) {
    rows.append(jobRow(j));
    if (j.scheduler_problem) problems.add(j.backend + " " + j.scheduler + ": " + j.scheduler_problem);
  }
  $("empty").hidden = page.jobs.length > 0;
  listState.next = page.next;
  $("older").disabled = !page.next;
  $("newer").disabled = listState.page === 0;
  // "page 1 of 7 · 312 jobs": the server counts the matches of every page (issue 48)
  const total = page.total === null || page.total === undefined ? null : page.total;
  const pages = total === null ? null
    : Math.max(1, listState.page + 1, Math.ceil(total / Number($("page-size").value)));
  $("page-info").textContent = "page " + (listState.page + 1) + (pages === null ? "" : " of " + pages);
  $("list-total").textContent = total === null ? "" : "· " + (total === 1 ? "1 job" : total + " jobs");
  // a search's match count beside the search box
  const searched = total !== null && $("q").value.trim() !== "";
  $("match-count").hidden = !searched;
  if (searched) $("match-count").textContent = total === 1 ? "1 match" : total + " matches";
  drawStateCounts(page.counts || {});
  drawHeldCount(page.held_count);
  showProblem([...problems].join("\n"));
}

// a list's time without its zone (the header says it), and without the year of this one
function shortTime(iso) {
  if (!iso) return "-";
  const full = fmtTime(iso).slice(0, 19);
  return full.slice(0, 4) === String(new Date().getFullYear()) ? full.slice(5) : full;
}

// the end's clock time, with its date only when that is not the creation's
function endedText(created, ended) {
  if (!ended) return "-";
  const full = fmtTime(ended).slice(0, 19);
  return created && fmtTime(created).slice(0, 10) === full.slice(0, 10) ? full.slice(11) : shortTime(ended);
}

function durationText(created, ended) {
  if (!created) return "-";
  const end = ended ? new Date(ended) : new Date();
  return fmtDuration(Math.max(0, (end - new Date(created)) / 1000));
}

// an unfinished job's duration grows between answers (a 304 redraws nothing)
function tickDurations() {
  for (const td of document.querySelectorAll("#job-rows td.duration")) {
    if (!td.dataset.until) td.textContent = durationText(td.dataset.since, "");
  }
}

// The jobs of each state under the other filters, each a link that shows only them (its
// ?state=, so it works as a plain link too); the one shown now is marked.
function stateHref(state) {
  const p = listQuery();
  if (state) p.set("state", state); else p.delete("state");
  if (listState.order !== "created" || !listState.desc) p.set("order", (listState.desc ? "-" : "") + listState.order);
  if ($("page-size").value !== "50") p.set("limit", $("page-size").value);
  return "/" + (p.toString() ? "?" + p.toString() : "");
}

function drawStateCounts(counts) {
  const nav = $("state-counts");
  const active = $("state-filter").value;
  const all = Object.values(counts).reduce((a, b) => a + b, 0);
  const links = [["", "all", all]];
  for (const s of STATES) {
    // an unfinished state's count is not known while the server still folds those jobs
    const n = counts[s] || (counts.live && !TERMINAL.has(s) ? null : 0);
    if (counts[s] || s === active) links.push([s, s === "live" ? "unfinished" : s, n]);
  }
  if (active === "live" && !counts.live) links.push(["live", "unfinished", null]);
  nav.replaceChildren();
  for (const [state, label, n] of links) {
    const a = el("a", { href: stateHref(state), class: "state-count", "data-state": state || "all" });
    a.append(el("span", { class: "state " + (state || "all") }, label));
    if (n !== null) a.append(el("span", { class: "n" }, " " + n));
    if (state === active) { a.classList.add("active"); a.setAttribute("aria-current", "true"); }
    a.addEventListener("click", (e) => {
      if (e.ctrlKey || e.metaKey || e.shiftKey) return; // a new tab follows the link itself
      e.preventDefault();
      $("state-filter").value = state;
      resetPages();
      tick();
    });
    nav.append(a);
  }
}

// Held jobs wait for a person: a count in the header and, on the list, a banner whose
// button shows only them (never rows pinned above every result).
function drawHeldCount(n) {
  if (n === null || n === undefined) return; // the server is still counting them
  const held = $("held-count");
  held.hidden = n === 0;
  held.textContent = n + " held: waiting for you";
  const banner = $("held-banner");
  if (!banner) return;
  banner.hidden = n === 0 || $("state-filter").value === "held";
  $("held-banner-text").textContent = (n === 1 ? "1 job is held" : n + " jobs are held") +
    ", waiting for you to resubmit or give up.";
}

function drawSortMarks() {
  for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
    const on = th.dataset.sort === listState.order;
    th.classList.toggle("sorted", on);
    th.setAttribute("aria-sort", on ? (listState.desc ? "descending" : "ascending") : "none");
    th.dataset.mark = on ? (listState.desc ? " ▼" : " ▲") : "";
  }
}

let drawnPath = null; // the list drawn now: another page or query is drawn even from a 304
async function refreshList() {
  const path = listPath();
  const { changed, body } = await poll(path);
  if (changed || path !== drawnPath) {
    drawList(body);
    drawnPath = path;
  } else {
    tickDurations();
  }
}

function resetPages() {
  listState.cursors = [null];
  listState.page = 0;
  writeListUrl();
}

// the filters and the page belong in the address, so a list can be linked to (and reloads
// as it was): page N is its number and the cursor that starts it
function writeListUrl() {
  const p = listQuery();
  if (listState.order !== "created" || !listState.desc) p.set("order", (listState.desc ? "-" : "") + listState.order);
  if ($("page-size").value !== "50") p.set("limit", $("page-size").value); // "page 2 of 3" stays true
  const cursor = listState.cursors[listState.page];
  if (listState.page > 0 && cursor) { p.set("page", listState.page + 1); p.set("after", cursor); }
  const url = "/" + (p.toString() ? "?" + p.toString() : "");
  if (location.pathname + location.search !== url) history.replaceState(null, "", url);
}

function filtersFromUrl() {
  const p = new URLSearchParams(location.search);
  $("q").value = p.get("q") || "";
  $("state-filter").value = p.get("state") || "";
  $("backend-filter").value = p.get("backend") || "";
  $("cause-filter").value = p.get("cause") || "";
  const size = p.get("limit") || "50";
  if (/^[1-9][0-9]{0,2}$/.test(size) && Number(size) <= 500) {
    const sizes = $("page-size");
    if (![...sizes.options].some((o) => o.value === size)) sizes.append(el("option", {}, size));
    sizes.value = size;
  }
  const order = p.get("order");
  if (order) {
    listState.order = order.replace(/^-/, "");
    listState.desc = order.startsWith("-");
  }
  // page N of a link: its cursor is known, the pages before it are not (newer goes to page 1)
  const n = parseInt(p.get("page") || "1", 10);
  const after = p.get("after");
  listState.cursors = [null];
  listState.page = 0;
  if (after && Number.isInteger(n) && n > 1) { listState.page = n - 1; listState.cursors[n - 1] = after; }
  drawSortMarks();
}

// ---- one job's page -------------------------------------------------------------------------

// A rule's one name, as the API's budget_used and the CLI say it (core/policy.py Rule.name).
function ruleName(r) {
  return r.on.join(", ") + " (" + r.action + ")";
}

function budgetLines(status, created) {
  const rules = (((created || {}).spec || {}).policy || {}).rules || [];
  const used = status.budget_used || {};
  const out = [];
  rules.forEach((r) => {
    const n = used[ruleName(r)] || 0; // budget_used is keyed by the rule's name
    if (r.budget === undefined || r.budget === null) {
      if (n) out.push([ruleName(r), n + " used, no budget"]);
      return;
    }
    out.push([ruleName(r), n + " of " + r.budget + " used"]);
  });
  return out;
}

function fillTable(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const [k, v] of rows) {
    const tr = el("tr", { "data-key": k });
    tr.append(el("th", {}, k));
    tr.append(el("td", {}, v));
    body.append(tr);
  }
  if (!rows.length) {
    const tr = el("tr", {});
    tr.append(el("td", { class: "muted" }, "none"));
    body.append(tr);
  }
}

function drawStatus(status, created) {
  const jobId = status.job || view.job; // the page may have been opened by the job's name
  $("detail").dataset.job = jobId;
  $("detail-title").textContent = (status.name && status.name !== jobId ? status.name + " · " : "") + jobId;
  document.title = jobId + (status.name && status.name !== jobId ? " (" + status.name + ")" : "") + " · dispatch";
  $("detail-state").className = "state " + status.state;
  $("detail-state").textContent = status.state;
  const kinds = status.recovered_from || [];
  $("detail-recovery").textContent = recoveryText(kinds.length, [...new Set(kinds)]);
  $("detail-cause").replaceChildren(document.createTextNode("cause: "));
  $("detail-cause").append(causeBadge(status.cause, false));
  if (status.cause && status.cause.detail) $("detail-cause").append(document.createTextNode(" — “" + status.cause.detail + "”"));
  if (status.settled === false && TERMINAL.has(status.state)) $("detail-cause").append(document.createTextNode(" (not yet committed)"));
  if (status.scheduler_problem) $("detail-cause").append(el("span", { class: "problem-inline" }, " scheduler: " + status.scheduler_problem));
  // What the job's supervisor is refused by its scheduler (issue 47): said, never silent.
  for (const n of status.notes || []) $("detail-cause").append(el("div", { class: "problem-inline" }, "note: " + n));
  // The third voice: the application's own error (first failing rank), never the
  // scheduler's words (those are the cause's detail, above).
  const ae = status.application_error;
  $("detail-error").hidden = !ae;
  if (ae) {
    const lines = [el("strong", {}, "the application's error: "),
      document.createTextNode(appErrorText(ae) + " (" + ae.source + ")")];
    if (ae.note) lines.push(el("div", { class: "app-error-note" }, "note: " + ae.note));
    if (ae.traceback_tail) {
      const more = el("details", {});
      more.append(el("summary", {}, "traceback (its end)"), el("pre", {}, ae.traceback_tail));
      lines.push(more);
    }
    $("detail-error").replaceChildren(...lines);
  }
  const held = status.state === "held";
  $("hold-box").hidden = !held;
  if (held) {
    $("hold-why").textContent = "The job is held (" + causeText(status.cause) + ") and does nothing until a person decides.";
    $("hold-commands").textContent = "dispatch resubmit " + jobId + "\ndispatch give-up " + jobId;
  }
  $("do-cancel").disabled = TERMINAL.has(status.state);
  $("do-resubmit").disabled = !held;
  $("do-give-up").disabled = !held;
  fillTable("budgets", budgetLines(status, created));
  const segs = $("segments");
  segs.replaceChildren();
  for (const s of status.segments || []) segs.append(el("li", {}, s));
  if (!(status.segments || []).length) segs.append(el("li", { class: "muted" }, "none"));
}

function drawTimelineFacts(tl) {
  // the goodput split's phases: the same computation as the goodput table (issue 36)
  const d = tl.durations || {};
  fillTable("durations", [["queued", fmtDuration(d.queued || 0)], ["running", fmtDuration(d.running || 0)],
    ["recovering", fmtDuration(d.recovering || 0)], ["held", fmtDuration(d.held || 0)],
    ["stopping", fmtDuration(d.stopping || 0)], ["settling", fmtDuration(d.settling || 0)],
    ["total", fmtDuration(d.total || 0) + (tl.outcome ? "" : " (as of " + fmtClock(tl.now) + ")")]]);
  fillTable("times", [["created", fmtTime(tl.start)], ["ended", tl.outcome ? fmtTime(tl.outcome.at) : "not yet"]]);
  const esc = $("escalations");
  esc.replaceChildren();
  for (const x of tl.escalations) esc.append(el("li", { title: causeTitle(x.cause) }, fmtTime(x.at) + "  " + x.message));
  if (!tl.escalations.length) esc.append(el("li", { class: "muted" }, "none"));
  const sel = $("log-submission");
  const have = [...sel.options].map((o) => o.value).join(",");
  const subs = tl.submissions.filter((s) => s.ref);
  const want = subs.map((s) => String(s.number)).join(",");
  if (have !== want) {
    const chosen = sel.value;
    sel.replaceChildren();
    for (const s of subs) sel.append(el("option", { value: s.number }, s.number + " (" + s.ref + ")"));
    sel.value = subs.some((s) => String(s.number) === chosen) ? chosen : (subs.length ? String(subs[subs.length - 1].number) : "");
  }
  startLogs();
}

function drawHistory(hist) {
  const box = $("history");
  box.replaceChildren();
  for (const h of hist) {
    const li = el("li", { value: h.seq, "data-type": h.type }, fmtTime(h.at) + "  " + h.text);
    if (h.event && h.event.actor) li.append(el("span", { class: "actor" }, " · actor: " + h.event.actor));
    box.append(li);
  }
}

async function refreshDetail() {
  const jobId = view.job;
  const base = "/api/jobs/" + encodeURIComponent(jobId);
  const [status, tl, hist] = await Promise.all([
    poll(base, (code) => code === 503), poll(base + "/timeline"), poll(base + "/history")]);
  if (jobId !== view.job) return;
  $("detail").hidden = false;
  const created = hist.body.length ? hist.body[0].event : null;
  if (status.changed || hist.changed || !$("detail-title").textContent) drawStatus(status.body, created);
  const live = tl.body.outcome ? tl.body : Object.assign({}, tl.body, { end: new Date().toISOString() });
  drawTimeline(live); // a live job's open bars grow up to now, between answers too
  if (tl.changed || !$("durations").querySelector("tbody").childElementCount) drawTimelineFacts(tl.body);
  if (tl.changed || !$("goodput").querySelector("tbody").childElementCount) drawGoodput(tl.body.goodput);
  if (hist.changed || !$("history").childElementCount) drawHistory(hist.body);
}

// ---- logs -----------------------------------------------------------------------------------

function stopLogs() {
  if (logStream) logStream.controller.abort();
  logStream = null;
}

function startLogs() {
  const sub = $("log-submission").value;
  const follow = $("log-follow").checked;
  const key = view.job + "/" + sub + "/" + follow;
  if (!view.job || !sub) { $("log-status").textContent = "no output yet"; return; }
  if (logStream && logStream.key === key) return;
  stopLogs();
  const controller = new AbortController();
  logStream = { controller, key };
  const pre = $("logs");
  pre.textContent = "";
  $("log-node").replaceChildren(el("option", { value: "" }, "all"));
  const lines = [];
  const path = "/api/jobs/" + encodeURIComponent(view.job) + "/logs?tail=500&submission=" + sub + (follow ? "&follow=1" : "");
  $("log-status").textContent = follow ? "following…" : "";
  readLogs(path, controller, lines, pre).then((ended) => {
    if (logStream && logStream.controller === controller) {
      $("log-status").textContent = ended ? "ended" : "";
      if (follow) logStream.done = true;
    }
  }).catch((e) => {
    if (e.name !== "AbortError") $("log-status").textContent = "logs: " + e.message;
  });
}

async function readLogs(path, controller, lines, pre) {
  const resp = await send(path, { signal: controller.signal });
  if (!resp.ok) throw await errorOf(resp);
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let partial = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const chunk = partial + decoder.decode(value, { stream: true });
    const parts = chunk.split("\n");
    partial = parts.pop();
    lines.push(...parts);
    if (lines.length > LOG_LINES) lines.splice(0, lines.length - LOG_LINES); // bounded
    showLogLines(lines, pre);
  }
  if (partial) { lines.push(partial); showLogLines(lines, pre); }
  return true;
}

// A job of several nodes has each line prefixed "[node] ": the node filter shows one.
const NODE_PREFIX = /^\[([^\]]+)\] /;
function showLogLines(lines, pre) {
  const sel = $("log-node");
  const known = new Set([...sel.options].map((o) => o.value));
  for (const line of lines.slice(-200)) {
    const m = line.match(NODE_PREFIX);
    if (m && !known.has(m[1])) { sel.append(el("option", { value: m[1] }, m[1])); known.add(m[1]); }
  }
  sel.parentElement.hidden = sel.options.length <= 1;
  const node = sel.value;
  const shown = node ? lines.filter((l) => l.startsWith("[" + node + "] ")) : lines;
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = shown.join("\n");
  if (atEnd) pre.scrollTop = pre.scrollHeight;
  pre.lines = lines;
}

// ---- the timeline ---------------------------------------------------------------------------

function drawTimeline(tl) {
  const box = $("timeline");
  box.replaceChildren();
  const t0 = Date.parse(tl.start);
  const t1 = Math.max(Date.parse(tl.end), t0 + 1000);
  const end = tl.end;
  const pct = (iso) => (100 * (Date.parse(iso) - t0)) / (t1 - t0);
  const span = (a, b) => ({ left: pct(a) + "%", width: Math.max(0, pct(b) - pct(a)) + "%" });

  for (const s of tl.submissions) {
    const row = el("div", { class: "tl-row", "data-submission": s.number });
    row.append(el("div", { class: "tl-label", title: s.ref ? "object " + s.ref : "not on a scheduler yet" },
      "submission " + s.number));
    const track = el("div", { class: "tl-track" });
    for (const h of tl.holds) {
      track.append(el("div", { class: "tl-hold", style: span(h.start, h.end || end),
        title: "hold: " + causeTitle(h.cause) + (h.released_by ? "\nreleased by " + h.released_by : "") }));
    }
    if (!s.executions.length) {
      const bar = el("div", { class: "tl-bar" + (s.end ? "" : " open"),
        style: span(s.intended_at, s.end || end), title: s.rejected ? "rejected: " + causeTitle(s.end_cause)
          : "intended " + fmtTime(s.intended_at) + (s.ref ? "" : "\nnot on a scheduler yet") });
      if (s.end_cause) bar.style.borderRightColor = CAUSE_COLOURS[s.end_cause.kind] || "#111";
      track.append(bar);
    }
    for (const x of s.executions) {
      const words = x.cause ? causeTitle(x.cause) : "running (no end recorded yet)";
      const bar = el("div", { class: "tl-bar" + (x.end ? "" : " open"), style: span(x.start, x.end || end),
        "data-cause": x.cause ? x.cause.kind : "",
        title: "submission " + s.number + ", execution " + x.index + (s.ref ? " (" + s.ref + ")" : "") +
          "\n" + fmtTime(x.start) + " → " + (x.end ? fmtTime(x.end) : "now") + "\n" + words });
      if (x.cause) bar.style.borderRightColor = CAUSE_COLOURS[x.cause.kind] || "#111";
      track.append(bar);
    }
    if (s.stop) {
      track.append(el("span", { class: "tl-fence", style: { left: pct(s.stop.at) + "%" },
        title: "stop ordered (fence): " + causeTitle(s.stop.cause) }, "▼"));
    }
    for (const m of tl.marks) {
      track.append(el("div", { class: "tl-mark " + m.kind, style: { left: pct(m.at) + "%" },
        title: m.kind + ": " + m.text + (m.cause ? "\n" + causeTitle(m.cause) : "") }));
    }
    row.append(track);
    box.append(row);
  }
  if (!tl.submissions.length) box.append(el("p", { class: "muted" }, "No submission yet."));
  if (tl.goodput) box.append(goodputRow(tl.goodput, span, end));
  const axis = el("div", { class: "tl-axis" });
  let last = null; // a short job's ticks fall in one second: each label is shown once
  for (let i = 0; i <= 4; i++) {
    const t = new Date(t0 + ((t1 - t0) * i) / 4);
    const label = fmtClock(t.toISOString());
    if (label === last) continue;
    last = label;
    axis.append(el("span", { style: { left: i * 25 + "%" } }, label));
  }
  box.append(axis);
  drawLegend(tl);
}

// The timeline's legend: only the causes, fences and holds this timeline shows (issue 48:
// every legend listed all 14 causes).
function drawLegend(tl) {
  const shown = new Set();
  for (const s of tl.submissions) {
    if (!s.executions.length && s.end_cause) shown.add(s.end_cause.kind);
    for (const x of s.executions) if (x.cause) shown.add(x.cause.kind);
  }
  for (const p of (tl.goodput ? tl.goodput.phases : [])) if (p.phase === "recovering") shown.add(p.cause);
  const legend = $("legend");
  legend.replaceChildren();
  for (const [kind, colour] of Object.entries(CAUSE_COLOURS)) {
    if (!shown.has(kind)) continue;
    const item = el("span", { "data-cause": kind }, kind);
    item.prepend(el("i", { style: { background: colour } }));
    legend.append(item);
  }
  if (tl.submissions.some((s) => s.stop)) legend.append(el("span", {}, "▼ fence (stop ordered)"));
  if (tl.holds.length) {
    const hold = el("span", {}, "hold");
    hold.prepend(el("i", { style: { background: "rgba(217,70,239,.35)" } }));
    legend.append(hold);
  }
}

// ---- goodput (G1-G4) ------------------------------------------------------------------------

// Node-time in the unit that fits it (as service/goodput.py's node_time_text): node-s under
// two minutes, node-min under two hours, node-h above; never a column of 0.00 node-h.
function figure(v) {
  return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : Math.round(v).toLocaleString("en-US");
}
function nodeTime(seconds) {
  if (seconds < 120) return figure(seconds) + " node-s";
  if (seconds < 7200) return figure(seconds / 60) + " node-min";
  return figure(seconds / 3600) + " node-h";
}
function share(g) { return g === null || g === undefined ? "–" : Math.round(100 * g) + "%"; }

// The timeline's last row: the job's wall time in its phases, lost work hatched over them.
function goodputRow(g, span, end) {
  const row = el("div", { class: "tl-row", "data-goodput": "1" });
  row.append(el("div", { class: "tl-label", title: "where the time went (G1); hatched: lost work since the last checkpoint (G3)" }, "goodput"));
  const track = el("div", { class: "tl-track" });
  for (const p of g.phases) {
    const bar = el("div", { class: "tl-phase", "data-phase": p.phase, "data-cause": p.cause,
      style: span(p.start, p.end || end),
      title: p.phase + (p.cause !== "none" ? " (" + p.cause + ")" : "") + ", " + p.nodes + " node(s)\n" + fmtTime(p.start) + " → " + fmtTime(p.end) });
    if (p.phase === "recovering") bar.style.background = CAUSE_COLOURS[p.cause] || "#111";
    track.append(bar);
  }
  for (const x of g.lost) {
    track.append(el("div", { class: "tl-lost", "data-cause": x.cause, style: span(x.start, x.end),
      title: "lost work, charged to " + x.cause + ": " + fmtDuration((Date.parse(x.end) - Date.parse(x.start)) / 1000) +
        " on " + x.nodes + " node(s) since the last checkpoint" }));
  }
  row.append(track);
  return row;
}

function drawGoodput(g) {
  if (!g) return;
  const s = g.split;
  // held: waiting for a person, time to result but never node-time (issue 48)
  const rows = s.parts.map((p) => [p.phase + (p.cause !== "none" ? " · " + p.cause : ""),
    p.phase === "held" ? fmtDuration(p.seconds) + " (no node-time)" : nodeTime(p.node_seconds)]);
  for (const l of s.lost_work) rows.push(["lost work · " + l.cause, nodeTime(l.node_seconds)]);
  // two denominators, never confused: every phase (what a person waited) and only the
  // phases that hold nodes (running, stopping; never settling)
  rows.push(["time to result", nodeTime(s.node_seconds)]);
  rows.push(["allocated node-time", nodeTime(s.allocated_node_seconds)]);
  rows.push(["goodput of time to result", share(s.goodput)]);
  rows.push(["goodput of allocated", share(s.goodput_allocated)]);
  fillTable("goodput", rows);
}

// The fleet's badput by cause per day: a stacked bar per day, plain SVG (no library).
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

let fleetDrawnAt = 0;
async function refreshFleetGoodput() {
  if (Date.now() - fleetDrawnAt < 30000) return; // a chart of days: every 30 s is plenty
  fleetDrawnAt = Date.now();
  const { body } = await poll("/api/goodput?days=14");
  drawBadputChart(body);
}

function drawBadputChart(doc) {
  const box = $("badput-chart");
  // scaled to the data (issue 48: 13 of 14 days were empty): from the first day with time
  // in it, each bar at most 48 units wide, the chart no wider than its days
  const H = 100, pad = 18;
  const first = doc.days.findIndex((d) => Object.keys(d.badput).length || d.goodput !== null);
  const days = first < 0 ? doc.days.slice(-1) : doc.days.slice(first);
  const bw = Math.min((420 - pad) / days.length, 40);
  const W = Math.max(pad + bw * days.length, 110); // room for the scale's words ("58.7 node-min")
  const chart = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "badput by cause per day, node-time" });
  chart.style.maxWidth = Math.round((460 * W) / 420) + "px"; // CSSOM: the CSP refuses style=""
  const totals = days.map((d) => Object.values(d.badput).reduce((a, b) => a + b, 0));
  const top = Math.max(...totals, 1e-9);
  days.forEach((d, i) => {
    let y = H - pad;
    for (const [cause, v] of Object.entries(d.badput)) {
      const h = ((H - 2 * pad) * v) / top;
      y -= h;
      const rect = svg("rect", { x: pad + i * bw + 2, y: y, width: Math.max(1, bw - 4), height: h,
        fill: CAUSE_COLOURS[cause] || "#111", "data-cause": cause, "data-day": d.day });
      rect.append(svg("title", {}, d.day + ": " + cause + " " + nodeTime(v * 3600)));
      chart.append(rect);
    }
    if (days.length <= 7 || i % 2 === 0) {
      chart.append(svg("text", { x: pad + i * bw + bw / 2, y: H - 5, "text-anchor": "middle", "font-size": 10,
        "data-day": d.day }, d.day.slice(5)));
    }
  });
  if (Math.max(...totals) > 0) chart.append(svg("text", { x: 2, y: pad - 6, "font-size": 10 }, nodeTime(top * 3600)));
  chart.append(svg("line", { x1: pad, y1: H - pad, x2: W, y2: H - pad, stroke: "#94a3b8" }));
  // no badput in these days: the words alone, not an empty chart's height
  box.replaceChildren(...(Math.max(...totals) > 0 ? [chart] : []));
  const causes = [...new Set(days.flatMap((d) => Object.keys(d.badput)))];
  const legend = $("badput-legend");
  legend.replaceChildren();
  for (const c of causes) {
    const item = el("span", {}, c);
    item.prepend(el("i", { style: { background: CAUSE_COLOURS[c] || "#111" } }));
    legend.append(item);
  }
  if (!causes.length) legend.append(el("span", { class: "muted" }, "no badput in these days"));
  const s = doc.split;
  $("fleet-goodput-line").textContent = s && s.goodput !== null
    ? "· goodput " + share(s.goodput) + " of time to result (" + nodeTime(s.node_seconds) + "), " +
      share(s.goodput_allocated) + " of allocated node-time (" + nodeTime(s.allocated_node_seconds) + "), " +
      s.jobs + " job(s)" : "";
}

// ---- requests -------------------------------------------------------------------------------

// the requests that end a job or its hold are asked twice
const CONFIRM = {
  "cancel": "Cancel job {job}? Its processes are stopped and it ends cancelled.",
  "give-up": "Give up on held job {job}? It is not resubmitted: it ends here.",
};

async function act(action) {
  const jobId = view.job;
  if (!jobId) return;
  const out = $("action-result");
  if (CONFIRM[action] && !window.confirm(CONFIRM[action].replace("{job}", jobId))) {
    out.textContent = action + " not sent";
    return;
  }
  try {
    await post("/api/jobs/" + encodeURIComponent(jobId) + "/" + action);
    out.textContent = action + " requested; the supervisor carries it out";
  } catch (e) {
    out.textContent = "refused: " + e.message;
  }
  await tick();
}

// ---- routing and polling --------------------------------------------------------------------

function showProblem(text) {
  $("problem").hidden = !text;
  $("problem").textContent = text;
}

function route() {
  const m = location.pathname.match(/^\/jobs\/([^/]+)$/);
  const job = m ? decodeURIComponent(m[1]) : null;
  if (job !== view.job) {
    stopLogs();
    $("logs").textContent = "";
    $("log-submission").replaceChildren();
    $("action-result").textContent = "";
    $("detail-title").textContent = "";
    for (const id of ["durations", "budgets", "times"]) document.querySelector("#" + id + " tbody").replaceChildren();
    $("history").replaceChildren();
  }
  view.job = job;
  $("list-view").hidden = job !== null;
  $("detail").hidden = true;
  if (job === null) { document.title = "dispatch"; filtersFromUrl(); }
  tick();
}

function go(url) {
  history.pushState(null, "", url);
  route();
}

let ticking = false;
let again = false; // a tick asked for while one runs runs right after it
async function tick() {
  if (ticking) { again = true; return; }
  ticking = true;
  again = false;
  try {
    if (view.job) {
      await refreshDetail();
      // the header's count of held jobs stays true on a job's page too (a 304 mostly)
      const { body } = await poll("/api/jobs?limit=1");
      drawHeldCount(body.held_count);
    } else {
      await refreshList();
      await refreshFleetGoodput();
    }
    if (view.job) showProblem("");
    $("updated").textContent = "updated " + fmtClock(new Date().toISOString());
  } catch (e) {
    showProblem(e.message);
  } finally {
    ticking = false;
  }
  if (again) tick();
}

function start() {
  const zone = fmtTime(new Date().toISOString()).slice(20);
  for (const col of ["created", "ended"]) $("jobs").querySelector('th[data-sort="' + col + '"]').title = "local time, " + zone;
  const causes = $("cause-filter");
  for (const kind of Object.keys(CAUSE_COLOURS)) causes.append(el("option", {}, kind));
  // an old link (/#JOB) opens the job's page
  if (location.hash.length > 1) history.replaceState(null, "", "/jobs/" + location.hash.slice(1));
  for (const b of document.querySelectorAll(".actions button")) b.addEventListener("click", () => act(b.dataset.action));
  for (const id of ["state-filter", "backend-filter", "cause-filter", "page-size"]) {
    $(id).addEventListener("change", () => { resetPages(); tick(); });
  }
  let typing = null;
  $("q").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { resetPages(); tick(); }, 250);
  });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  for (const th of document.querySelectorAll("#jobs th[data-sort]")) {
    th.addEventListener("click", () => {
      const col = th.dataset.sort;
      if (listState.order === col) listState.desc = !listState.desc;
      else { listState.order = col; listState.desc = NATURAL_DESC.has(col); }
      drawSortMarks();
      resetPages();
      tick();
    });
  }
  $("older").addEventListener("click", () => {
    if (!listState.next) return;
    listState.cursors[listState.page + 1] = listState.next;
    listState.page += 1;
    writeListUrl();
    tick();
  });
  $("newer").addEventListener("click", () => {
    if (listState.page === 0) return;
    listState.page -= 1;
    if (listState.page > 0 && !listState.cursors[listState.page]) listState.page = 0;
    writeListUrl();
    tick();
  });
  $("held-filter").addEventListener("click", () => {
    $("state-filter").value = "held";
    resetPages();
    tick();
  });
  for (const a of [$("home"), $("back"), $("held-count")]) {
    a.addEventListener("click", (e) => { e.preventDefault(); go(a.getAttribute("href")); });
  }
  $("log-submission").addEventListener("change", startLogs);
  $("log-follow").addEventListener("change", startLogs);
  $("log-node").addEventListener("change", () => showLogLines($("logs").lines || [], $("logs")));
  window.addEventListener("popstate", route);
  window.addEventListener("hashchange", () => {
    if (location.hash.length > 1) { history.replaceState(null, "", "/jobs/" + location.hash.slice(1)); route(); }
  });
  route();
  setInterval(tick, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);
