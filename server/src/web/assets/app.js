// Weir's dashboard. Every number on it comes from a `weir_catalog` system table,
// read through /api/catalog/<table> (the same rows `SELECT * FROM weir_catalog.<table>`
// gives in psql), so the pages and SQL never disagree. No build step, no library:
// the job graph and the charts are plain SVG.
"use strict";

const REFRESH_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");
let timer = null;

// ---- data -------------------------------------------------------------------------

// Rows of a system table as objects keyed by column name.
async function catalog(table) {
  const res = await fetch("/api/catalog/" + table, { cache: "no-store" });
  if (!res.ok) throw new Error(table + ": " + res.status + " " + (await res.text()));
  const body = await res.json();
  return body.rows.map((r) => Object.fromEntries(body.columns.map((c, i) => [c, r[i]])));
}

// ---- formatting -------------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n), u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return (u ? v.toFixed(1) : v.toFixed(0)) + " " + units[u];
}
function num(n) {
  if (n === null || n === undefined || n === "") return "";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
}
function millis(ms) {
  if (ms === null || ms === undefined) return "";
  ms = Number(ms);
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 7200000) return (ms / 60000).toFixed(1) + " min";
  return (ms / 3600000).toFixed(1) + " h";
}

// ---- DOM helpers ------------------------------------------------------------------

// An element with attributes and children; strings become text nodes (never HTML).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function badge(text) { return h("span", { class: "badge " + text }, text); }
function card(value, key, test) {
  return h("div", { class: "card", "data-test": test }, h("div", { class: "v" }, value), h("div", { class: "k" }, key));
}

// A table: columns are [header, cell(row) -> node or text, numeric?].
function table(rows, columns, test) {
  return h("table", { "data-test": test },
    h("thead", {}, h("tr", {}, columns.map(([name, , isNum]) => h("th", { class: isNum ? "num" : null }, name)))),
    h("tbody", {}, rows.length === 0
      ? h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "none"))
      : rows.map((r) => h("tr", {}, columns.map(([, cell, isNum, wrap]) =>
          h("td", { class: isNum ? "num" : wrap ? "wrap" : null }, cell(r)))))));
}

// ---- pages ------------------------------------------------------------------------

async function overview() {
  const [jobs, checkpoints, progress] = await Promise.all([
    catalog("jobs"), catalog("checkpoints"), catalog("progress"),
  ]);
  const running = jobs.filter((j) => j.status === "RUNNING").length;
  const completed = checkpoints.filter((c) => c.status === "COMPLETED");
  const failed = checkpoints.filter((c) => c.status === "FAILED").length;
  const last = completed.length ? completed[completed.length - 1] : null;
  const active = progress.filter((p) => p.status === "running");
  return [
    h("h1", {}, "Overview"),
    h("div", { class: "cards" },
      card(jobs.length, "jobs", "jobs-total"),
      card(running, "running", "jobs-running"),
      card(completed.length, "checkpoints completed", "checkpoints-completed"),
      card(failed, "checkpoints failed", "checkpoints-failed"),
      card(last ? millis(last.duration_ms) : "—", "last checkpoint duration", "last-checkpoint")),
    h("h2", {}, "Jobs"),
    table(jobs, [
      ["name", (j) => h("a", { href: "#/job/" + encodeURIComponent(j.name), "data-job": j.name }, j.name)],
      ["kind", (j) => j.kind],
      ["status", (j) => badge(j.status)],
      ["parallelism", (j) => j.parallelism, true],
      ["restarts", (j) => j.restarts, true],
      ["freshness", (j) => millis(j.freshness_ms), true],
      ["last failure", (j) => j.last_failure || "", false, true],
    ], "jobs"),
    active.length ? [h("h2", {}, "Work in progress"), progressTable(active)] : [],
  ];
}

async function job(name) {
  const [jobs, operators, exchanges, checkpoints] = await Promise.all([
    catalog("jobs"), catalog("operators"), catalog("exchanges"), catalog("checkpoints"),
  ]);
  const j = jobs.find((x) => x.name === name);
  if (!j) return [h("h1", {}, name), h("p", { class: "muted" }, "no such job (dropped?)")];
  const ops = operators.filter((o) => o.job === name);
  const edges = exchanges.filter((e) => e.job === name);
  const mine = checkpoints.filter((c) => c.job === name);
  return [
    h("h1", {}, name, " ", badge(j.status)),
    h("div", { class: "cards" },
      card(j.kind, "kind"), card(j.parallelism, "parallelism"), card(j.restarts, "restarts"),
      card(millis(j.freshness_ms), "freshness (now − last committed epoch)"),
      card(mine.filter((c) => c.status === "COMPLETED").length, "checkpoints completed")),
    j.last_failure ? h("p", { class: "muted" }, "last failure: " + j.last_failure) : [],
    h("h2", {}, "Operator graph"),
    legend(),
    graph(ops, edges),
    h("h2", {}, "Operators"),
    table(ops, [
      ["fragment", (o) => o.fragment_id, true],
      ["operator", (o) => o.operator],
      ["uid", (o) => o.uid],
      ["parallelism", (o) => o.parallelism, true],
      ["records in", (o) => num(o.records_in), true],
      ["records out", (o) => num(o.records_out), true],
      ["records in/s", (o) => num(o.records_in_per_s), true],
      ["records out/s", (o) => num(o.records_out_per_s), true],
      ["busy ms/s", (o) => o.busy_ms_per_s, true],
      ["backpressured ms/s", (o) => o.backpressured_ms_per_s, true],
      ["idle ms/s", (o) => o.idle_ms_per_s, true],
      ["backpressure", (o) => badge(o.backpressure)],
      ["state", (o) => bytes(o.state_bytes), true],
      ["watermark", (o) => o.watermark || ""],
    ], "operators"),
  ];
}

async function checkpoints() {
  const [rows, jobs] = await Promise.all([catalog("checkpoints"), catalog("jobs")]);
  const pick = document.getElementById("ckjob");
  const chosen = pick ? pick.value : "";
  const shown = chosen ? rows.filter((c) => c.job === chosen) : rows;
  const done = shown.filter((c) => c.status === "COMPLETED").slice(-40);
  const inProgress = shown.filter((c) => c.status === "IN_PROGRESS");
  const select = h("select", { id: "ckjob", onchange: render },
    h("option", { value: "" }, "all jobs"),
    jobs.map((j) => h("option", { value: j.name, selected: j.name === chosen }, j.name)));
  return [
    h("h1", {}, "Checkpoints"),
    h("p", {}, "job: ", select),
    h("div", { class: "charts" },
      barChart("duration (ms)", done, (c) => Number(c.duration_ms), (v) => millis(v), "chart-duration"),
      barChart("full size", done, (c) => Number(c.full_size), bytes, "chart-size")),
    h("h2", {}, "In progress"),
    checkpointTable(inProgress, "checkpoints-in-progress"),
    h("h2", {}, "History (newest first)"),
    checkpointTable(shown.slice().reverse(), "checkpoints"),
  ];
}

function checkpointTable(rows, test) {
  return table(rows, [
    ["id", (c) => c.id, true],
    ["job", (c) => c.job],
    ["status", (c) => badge(c.status)],
    ["trigger time", (c) => c.trigger_time],
    ["duration", (c) => millis(c.duration_ms), true],
    ["alignment", (c) => millis(c.alignment_ms), true],
    ["upload", (c) => millis(c.upload_ms), true],
    ["full size", (c) => bytes(c.full_size), true],
    ["incremental size", (c) => bytes(c.incremental_size), true],
    ["failure", (c) => c.failure || "", false, true],
  ], test);
}

async function savepoints() {
  const rows = await catalog("savepoints");
  return [h("h1", {}, "Savepoints"), table(rows, [
    ["name", (r) => r.name],
    ["created", (r) => r.created],
    ["epoch", (r) => r.epoch, true],
    ["views", (r) => r.views, false, true],
    ["size", (r) => bytes(r.size), true],
    ["format", (r) => r.format_version, true],
    ["location", (r) => r.location, false, true],
  ], "savepoints")];
}

async function sources() {
  const [rows, errors] = await Promise.all([catalog("sources"), catalog("source_errors")]);
  return [
    h("h1", {}, "Sources"),
    table(rows, [
      ["table", (r) => r.table_name],
      ["connector", (r) => r.connector],
      ["partition", (r) => r.partition, true],
      ["position", (r) => num(r.position), true],
      ["high watermark", (r) => num(r.high_watermark), true],
      ["lag", (r) => num(r.lag), true],
      ["bad records", (r) => num(r.bad_records), true],
    ], "sources"),
    h("h2", {}, "Bad records (skipped)"),
    table(errors, [
      ["table", (r) => r.table_name],
      ["partition", (r) => r.partition, true],
      ["offset", (r) => r.offset, true],
      ["reason", (r) => r.reason, false, true],
      ["at", (r) => r.at],
    ], "source-errors"),
  ];
}

function progressTable(rows) {
  return table(rows, [
    ["id", (p) => p.id, true],
    ["work", (p) => p.kind],
    ["object", (p) => p.object],
    ["status", (p) => badge(p.status)],
    ["done", (p) => progressBar(p), false],
    ["rate", (p) => p.rate_per_s === null ? "" : num(p.rate_per_s) + " " + p.unit + "/s", true],
    ["time left", (p) => p.eta_ms === null ? "" : millis(p.eta_ms), true],
    ["started", (p) => p.started],
  ], "progress");
}
function progressBar(p) {
  const share = p.total ? Math.min(1, Number(p.done) / Number(p.total)) : 0;
  const text = p.unit === "bytes"
    ? bytes(p.done) + " of " + (p.total === null ? "?" : bytes(p.total))
    : num(p.done) + " of " + (p.total === null ? "?" : num(p.total)) + " " + p.unit;
  return h("div", {}, h("div", { class: "bar" }, h("span", { style: "width:" + (share * 100).toFixed(1) + "%" })), text);
}

async function progress() {
  const rows = await catalog("progress");
  return [h("h1", {}, "Progress of long work"), progressTable(rows.slice().reverse())];
}

async function settings() {
  const rows = await catalog("settings");
  return [h("h1", {}, "Configuration"), table(rows, [
    ["key", (r) => r.name],
    ["effective value", (r) => r.value],
    ["from", (r) => r.source],
    ["scope", (r) => r.scope],
  ], "settings")];
}

// ---- the job graph ----------------------------------------------------------------

// Flink's colours: blue when idle, through purple to red as busy time grows, near
// black when back-pressured (waiting on a slow consumer).
function colour(o) {
  const busy = Number(o.busy_ms_per_s) || 0, bp = Number(o.backpressured_ms_per_s) || 0;
  if (bp > busy && bp > 100) return "hsl(0, 0%, " + (40 - (bp / 1000) * 30).toFixed(0) + "%)";
  const t = Math.min(1, busy / 1000);
  const mix = (a, b) => Math.round(a + (b - a) * t);
  return "rgb(" + mix(31, 198) + "," + mix(111, 40) + "," + mix(191, 40) + ")";
}
function legend() {
  return h("div", { class: "legend" },
    h("span", {}, h("i", { style: "background:rgb(31,111,191)" }), "idle"),
    h("span", {}, h("i", { style: "background:rgb(198,40,40)" }), "busy"),
    h("span", {}, h("i", { style: "background:hsl(0,0%,15%)" }), "back-pressured"));
}

// Nodes are fragments (their chained operators listed inside, as Flink chains
// operators into one vertex) and the relations a job reads; columns by longest path.
function graph(ops, edges) {
  const nodes = new Map();
  for (const o of ops) {
    const id = "f" + o.fragment_id;
    if (!nodes.has(id)) nodes.set(id, { id, fragment: o.fragment_id, ops: [], relation: null });
    nodes.get(id).ops.push(o);
  }
  for (const e of edges) {
    if (e.from_relation !== null) {
      const id = "r:" + e.from_relation;
      if (!nodes.has(id)) nodes.set(id, { id, relation: e.from_relation, ops: [] });
    }
  }
  const from = (e) => (e.from_relation !== null ? "r:" + e.from_relation : "f" + e.from_fragment);
  const depth = new Map();
  const depthOf = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const ins = edges.filter((e) => "f" + e.to_fragment === id);
    const d = ins.length ? 1 + Math.max(...ins.map((e) => depthOf(from(e), seen))) : 0;
    depth.set(id, d);
    return d;
  };
  for (const id of nodes.keys()) depthOf(id, new Set());
  const W = 300, GAP_X = 90, GAP_Y = 24, LINE = 16;
  const height = (n) => (n.relation !== null ? 34 : 56 + n.ops.length * LINE * 2);
  const columns = [];
  for (const n of nodes.values()) (columns[depth.get(n.id)] = columns[depth.get(n.id)] || []).push(n);
  let maxY = 0;
  columns.forEach((col, c) => {
    let y = 20;
    for (const n of col || []) {
      n.x = 20 + c * (W + GAP_X); n.y = y; n.h = height(n);
      y += n.h + GAP_Y;
    }
    maxY = Math.max(maxY, y);
  });
  const svg = s("svg", { width: 40 + columns.length * (W + GAP_X), height: maxY + 10, "data-test": "graph" });
  svg.append(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" },
    s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a94a6" }))));
  for (const e of edges) {
    const a = nodes.get(from(e)), b = nodes.get("f" + e.to_fragment);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2, mx = (x1 + x2) / 2;
    svg.append(s("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, fill: "none", stroke: "#8a94a6", "stroke-width": 1.5, "marker-end": "url(#arrow)" }));
    const label = e.partitioning + (e.keys ? "(" + e.keys + ")" : "");
    svg.append(s("text", { x: mx, y: (y1 + y2) / 2 - 4, "text-anchor": "middle", class: "edge" }, label));
  }
  for (const n of nodes.values()) {
    if (n.relation !== null) {
      svg.append(s("g", { class: "relation", "data-relation": n.relation },
        s("rect", { x: n.x, y: n.y, width: W, height: n.h, rx: 6, fill: "#e8ecf2", stroke: "#b8c1cf" }),
        s("text", { x: n.x + 10, y: n.y + 21 }, "relation " + n.relation)));
      continue;
    }
    const head = n.ops[0];
    const g = s("g", { "data-fragment": n.fragment, "data-backpressure": head.backpressure },
      s("rect", { x: n.x, y: n.y, width: W, height: n.h, rx: 6, fill: colour(head) }),
      s("text", { x: n.x + 10, y: n.y + 17 }, `fragment ${n.fragment} · parallelism ${head.parallelism} · ${head.backpressure}`),
      s("text", { x: n.x + 10, y: n.y + 33 },
        `records in ${num(head.records_in_per_s)}/s · out ${num(head.records_out_per_s)}/s`),
      s("text", { x: n.x + 10, y: n.y + 49 },
        `busy ${head.busy_ms_per_s} · back-pressured ${head.backpressured_ms_per_s} ms/s`));
    n.ops.forEach((o, i) => {
      const y = n.y + 56 + i * LINE * 2 + 12;
      g.append(s("text", { x: n.x + 10, y }, o.operator + (o.state_bytes ? " · state " + bytes(o.state_bytes) : "")));
      g.append(s("text", { x: n.x + 18, y: y + LINE - 2, "font-size": 10 }, o.uid));
    });
    g.append(s("title", {}, n.ops.map((o) => o.operator + ": " + o.description).join("\n")));
    svg.append(g);
  }
  return h("div", { class: "graph" }, svg);
}

// ---- charts -----------------------------------------------------------------------

function barChart(title, rows, value, label, test) {
  const W = 520, H = 180, L = 70, B = 24;
  const values = rows.map(value);
  const max = Math.max(1, ...values);
  const bw = values.length ? (W - L - 10) / values.length : 0;
  const svg = s("svg", { width: W, height: H, class: "chart", "data-test": test, "data-points": values.length },
    s("text", { x: L, y: 14 }, title),
    s("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#b8c1cf" }),
    s("text", { x: L - 6, y: 28, "text-anchor": "end" }, label(max)),
    s("text", { x: L - 6, y: H - B, "text-anchor": "end" }, "0"));
  values.forEach((v, i) => {
    const bh = ((H - B - 24) * v) / max;
    svg.append(s("rect", { x: L + i * bw + 1, y: H - B - bh, width: Math.max(1, bw - 2), height: bh, fill: "#0b5cad" },
      s("title", {}, "checkpoint " + rows[i].id + ": " + label(v))));
  });
  if (rows.length) {
    svg.append(s("text", { x: L, y: H - 8 }, "#" + rows[0].id));
    svg.append(s("text", { x: W - 10, y: H - 8, "text-anchor": "end" }, "#" + rows[rows.length - 1].id));
  }
  return svg;
}

// ---- routing and refresh ----------------------------------------------------------

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const page = parts[0] || "overview";
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === page);
  switch (page) {
    case "job": return () => job(decodeURIComponent(parts.slice(1).join("/")));
    case "checkpoints": return checkpoints;
    case "savepoints": return savepoints;
    case "sources": return sources;
    case "progress": return progress;
    case "settings": return settings;
    default: return overview;
  }
}

// One render at a time; a route change during one renders again once it ends, and
// content fetched for a route the user already left is never shown.
let rendering = false;
let renderAgain = false;
async function render() {
  if (rendering) {
    renderAgain = true;
    return;
  }
  rendering = true;
  const hash = location.hash;
  const error = document.getElementById("error");
  try {
    const content = await route()();
    if (location.hash !== hash) return;
    const scroll = window.scrollY;
    main.replaceChildren(...[content].flat(3));
    window.scrollTo(0, scroll);
    error.hidden = true;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    main.dataset.route = hash;
    main.dataset.renders = String(Number(main.dataset.renders || 0) + 1);
  } catch (e) {
    error.textContent = "cannot read the server: " + e.message;
    error.hidden = false;
  } finally {
    rendering = false;
    if (renderAgain || location.hash !== hash) {
      renderAgain = false;
      render();
    }
  }
}

function schedule() {
  clearInterval(timer);
  if (document.getElementById("auto").checked) timer = setInterval(render, REFRESH_MS);
}

window.addEventListener("hashchange", render);
document.getElementById("auto").addEventListener("change", schedule);
render();
schedule();
