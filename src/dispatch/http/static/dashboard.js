// The dispatch dashboard: the job list and one job's timeline, polled from the JSON API.
// Every word that came from a user or a scheduler is set as text (textContent, title),
// never parsed as HTML.
"use strict";

const POLL_MS = 2000;
const CAUSE_COLOURS = {
  "none": "#16a34a", "preempted": "#f59e0b", "node-lost": "#7c3aed",
  "out-of-memory": "#dc2626", "time-limit": "#a16207", "non-zero-exit": "#e11d48",
  "launch-failed": "#9f1239", "no-capacity": "#64748b", "held": "#c026d3",
  "released": "#0d9488", "requeued": "#ca8a04", "cancelled": "#4b5563",
  "duplicate": "#334155", "unknown": "#111827",
};
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

let selected = null;
let timer = null;

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

async function api(path, options) {
  // the session cookie (HttpOnly, SameSite=Strict) rides along by itself
  const opts = Object.assign({ headers: {}, credentials: "same-origin" }, options || {});
  if (opts.method === "POST") {
    opts.headers["Content-Type"] = "application/json";
    opts.body = opts.body || "{}";
  }
  const resp = await fetch(path, opts);
  if (resp.status === 401) {
    location.assign("/login");  // the session is gone (the server restarted): log in again
    throw new Error("not logged in");
  }
  const body = await resp.json();
  if (!resp.ok && body && body.error) {
    const err = new Error(body.error.message);
    err.body = body;
    err.status = resp.status;
    throw err;
  }
  return body;
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
  if (c.at) parts.push(c.at);
  return parts.join("\n");
}

function age(iso) {
  if (!iso) return "-";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d";
}

function stateBadge(state, settled) {
  const b = el("span", { class: "state " + state }, state);
  if (settled === false && TERMINAL.has(state)) b.title = "not yet committed";
  return b;
}

async function refreshList() {
  const filter = $("state-filter").value;
  let path = "/api/jobs?all=1";
  if (filter === "live") path = "/api/jobs";
  else if (filter) path += "&state=" + encodeURIComponent(filter);
  const rows = await api(path);
  const tbody = document.querySelector("#jobs tbody");
  tbody.replaceChildren();
  const problems = new Set();
  for (const j of rows) {
    const tr = el("tr", { "data-job": j.job });
    if (j.job === selected) tr.classList.add("selected");
    tr.append(el("td", { class: "id" }, j.job));
    if (j.error) {
      tr.append(el("td", { colspan: 7 }, "record unusable: " + j.error.message));
      tbody.append(tr);
      continue;
    }
    tr.append(el("td", {}, j.name));
    const st = el("td", {});
    st.append(stateBadge(j.state, j.settled));
    tr.append(st);
    tr.append(el("td", { title: causeTitle(j.cause), class: "cause" }, causeText(j.cause)));
    tr.append(el("td", {}, j.submissions));
    const budget = Object.entries(j.budget_used || {}).map(([r, n]) => r + ": " + n).join(", ");
    tr.append(el("td", {}, budget || "-"));
    tr.append(el("td", { title: j.created_at || "" }, age(j.created_at)));
    tr.append(el("td", {}, j.backend));
    if (j.scheduler_problem) problems.add(j.backend + " " + j.scheduler + ": " + j.scheduler_problem);
    tr.addEventListener("click", () => select(j.job));
    tbody.append(tr);
  }
  $("empty").hidden = rows.length > 0;
  $("problem").hidden = problems.size === 0;
  $("problem").textContent = [...problems].join("\n");
}

function select(jobId) {
  selected = jobId;
  if (decodeURIComponent(location.hash.slice(1)) !== jobId) {
    history.replaceState(null, "", "#" + encodeURIComponent(jobId));
  }
  for (const tr of document.querySelectorAll("#jobs tbody tr")) {
    tr.classList.toggle("selected", tr.dataset.job === jobId);
  }
  $("action-result").textContent = "";
  refreshDetail();
}

async function refreshDetail() {
  if (!selected) { $("detail").hidden = true; return; }
  const jobId = selected;
  const [status, tl, history] = await Promise.all([
    api("/api/jobs/" + encodeURIComponent(jobId)).catch((e) => e.body || Promise.reject(e)),
    api("/api/jobs/" + encodeURIComponent(jobId) + "/timeline"),
    api("/api/jobs/" + encodeURIComponent(jobId) + "/history"),
  ]);
  if (jobId !== selected) return;
  $("detail").hidden = false;
  $("detail").dataset.job = jobId;
  $("detail-title").textContent = (status.name || "") + " · " + jobId;
  $("detail-state").className = "state " + status.state;
  $("detail-state").textContent = status.state;
  $("detail-cause").textContent = "cause: " + causeText(status.cause) +
    (status.cause && status.cause.detail ? " — “" + status.cause.detail + "”" : "") +
    (status.settled === false && TERMINAL.has(status.state) ? " (not yet committed)" : "");
  const held = status.state === "held";
  $("do-cancel").disabled = TERMINAL.has(status.state);
  $("do-resubmit").disabled = !held;
  $("do-give-up").disabled = !held;
  drawTimeline(tl);
  const esc = $("escalations");
  esc.replaceChildren();
  for (const x of tl.escalations) {
    esc.append(el("li", { title: causeTitle(x.cause) }, x.at.slice(11, 19) + "  " + x.message));
  }
  if (!tl.escalations.length) esc.append(el("li", { class: "muted" }, "none"));
  const hist = $("history");
  hist.replaceChildren();
  for (const h of history) {
    hist.append(el("li", { value: h.seq, "data-type": h.type }, h.at.slice(11, 19) + "  " + h.text));
  }
}

function drawTimeline(tl) {
  const box = $("timeline");
  box.replaceChildren();
  const t0 = Date.parse(tl.start);
  const t1 = Math.max(Date.parse(tl.end), t0 + 1000);
  const pct = (iso) => (100 * (Date.parse(iso) - t0)) / (t1 - t0);
  const span = (a, b) => ({ left: pct(a) + "%", width: Math.max(0, pct(b) - pct(a)) + "%" });

  for (const s of tl.submissions) {
    const row = el("div", { class: "tl-row", "data-submission": s.number });
    row.append(el("div", { class: "tl-label", title: s.ref ? "object " + s.ref : "not on a scheduler yet" },
      "submission " + s.number));
    const track = el("div", { class: "tl-track" });
    for (const h of tl.holds) {
      track.append(el("div", { class: "tl-hold", style: span(h.start, h.end || tl.end),
        title: "hold: " + causeTitle(h.cause) + (h.released_by ? "\nreleased by " + h.released_by : "") }));
    }
    if (!s.executions.length) {
      const end = s.end || tl.end;
      const bar = el("div", { class: "tl-bar" + (s.end ? "" : " open"),
        style: span(s.intended_at, end), title: s.rejected ? "rejected: " + causeTitle(s.end_cause)
          : "intended " + s.intended_at + (s.ref ? "" : "\nnot on a scheduler yet") });
      if (s.end_cause) bar.style.borderRightColor = CAUSE_COLOURS[s.end_cause.kind] || "#111";
      track.append(bar);
    }
    for (const x of s.executions) {
      const end = x.end || tl.end;
      const words = x.cause ? causeTitle(x.cause) : "running (no end recorded yet)";
      const bar = el("div", { class: "tl-bar" + (x.end ? "" : " open"), style: span(x.start, end),
        "data-cause": x.cause ? x.cause.kind : "",
        title: "submission " + s.number + ", execution " + x.index + (s.ref ? " (" + s.ref + ")" : "") +
          "\n" + x.start + " → " + (x.end || "now") + "\n" + words });
      if (x.cause) bar.style.borderRightColor = CAUSE_COLOURS[x.cause.kind] || "#111";
      track.append(bar);
    }
    if (s.stop) {
      track.append(el("span", { class: "tl-fence", style: { left: pct(s.stop.at) + "%" },
        title: "stop requested (fence): " + causeTitle(s.stop.cause) }, "▼"));
    }
    for (const m of tl.marks) {
      track.append(el("div", { class: "tl-mark " + m.kind, style: { left: pct(m.at) + "%" },
        title: m.kind + ": " + m.text + (m.cause ? "\n" + causeTitle(m.cause) : "") }));
    }
    row.append(track);
    box.append(row);
  }
  if (!tl.submissions.length) box.append(el("p", { class: "muted" }, "No submission yet."));
  const axis = el("div", { class: "tl-axis" });
  for (let i = 0; i <= 4; i++) {
    const t = new Date(t0 + ((t1 - t0) * i) / 4);
    axis.append(el("span", { style: { left: i * 25 + "%" } }, t.toISOString().slice(11, 19)));
  }
  box.append(axis);
  const legend = $("legend");
  if (!legend.childElementCount) {
    for (const [kind, colour] of Object.entries(CAUSE_COLOURS)) {
      const item = el("span", {}, kind);
      item.prepend(el("i", { style: { background: colour } }));
      legend.append(item);
    }
    legend.append(el("span", {}, "▼ fence (stop asked for)"));
    const hold = el("span", {}, "hold");
    hold.prepend(el("i", { style: { background: "rgba(217,70,239,.35)" } }));
    legend.append(hold);
  }
}

// the requests that end a job or its hold are asked twice
const CONFIRM = {
  "cancel": "Cancel job {job}? Its processes are stopped and it ends cancelled.",
  "give-up": "Give up on held job {job}? It is not resubmitted: it ends here.",
};

async function act(action) {
  if (!selected) return;
  const out = $("action-result");
  if (CONFIRM[action] && !window.confirm(CONFIRM[action].replace("{job}", selected))) {
    out.textContent = action + " not sent";
    return;
  }
  try {
    await api("/api/jobs/" + encodeURIComponent(selected) + "/" + action, { method: "POST" });
    out.textContent = action + " requested; the supervisor carries it out";
  } catch (e) {
    out.textContent = "refused: " + e.message;
  }
  await tick();
}

async function tick() {
  try {
    await refreshList();
    await refreshDetail();
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    if ($("problem").textContent === "") $("problem").hidden = true;
  } catch (e) {
    $("problem").hidden = false;
    $("problem").textContent = e.message;
  }
}

function start() {
  for (const b of document.querySelectorAll(".actions button")) {
    b.addEventListener("click", () => act(b.dataset.action));
  }
  $("state-filter").addEventListener("change", tick);
  const fromHash = decodeURIComponent(location.hash.slice(1));
  if (fromHash) selected = fromHash;
  window.addEventListener("hashchange", () => {
    const job = decodeURIComponent(location.hash.slice(1));
    if (job && job !== selected) select(job);
  });
  tick();
  timer = setInterval(tick, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);
