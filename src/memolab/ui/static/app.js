// memolab dashboard. Plain JS plus three vendored libraries (static/vendor/, refreshed from npm
// by vendor/refresh.sh): uPlot draws the scalar charts (zoom, crosshair, log axes), marked and
// DOMPurify render logged text as sanitised markdown. Nothing is fetched from elsewhere: the page
// works offline and ships inside the Python package.
//
// At the scale of a sweep (50 runs x 20 tags x 5,000 steps): the scalars of a view come in two
// batched requests sized to the charts' pixel width (/api/series: the tags of the charts in view,
// then the others), are kept per run and tag, and
// are fetched again only for what changed (a newly selected run; the new points of a running
// one). An idle page asks only /api/heartbeat. Charts are drawn in short tasks, visible ones
// first, so the page never freezes; the runs table draws only the rows in view.
//
// Classic scripts sharing one global scope: charts.js (the scalar charts), panels.js (histograms,
// images, text, code diff), lineage.js (an evaluation's panel, the pipeline graph), views.js (the
// view in the URL, the filter on the charts, the best run, groups), runpage.js (a run's page, notes
// and tags) and hpviz.js (HParams: parallel coordinates with brushing, a scatter) are loaded first;
// this one holds the state, the runs table, the tabs and the live refresh, and starts the page.
"use strict";

// 24 colours that stay apart on white, and dash styles after them: 96 runs before a style repeats.
// Tableau 10, then 14 picked one at a time as the farthest (CIE Lab) from all before it among
// colours dark enough for white (L* <= 68): no two closer than ΔE 27 (Tableau 20's darker partners
// were 4.6 apart: a sweep's 24 runs showed as similar blues)
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
  "#1717d3", "#000000", "#e72be7", "#1e511e", "#0b0b64", "#ae1351", "#511e47", "#aa8a40", "#13ae7f", "#174fd3",
  "#7f13ae", "#ae5113", "#890f71", "#1e4251"];
const DASHES = [null, [7, 3], [2, 3], [9, 3, 2, 3]];
//: runs of the newest function selected on arrival (newest first)
const AUTO_SELECT = 20;
//: the most runs one request may name (the server's limit)
const MAX_IDS = 1000;
//: the runs the page loads when it filters or sorts them itself (a filter, a sort by an argument,
//: a metric's min or max): the newest of a function with more, and the count says "the window of N"
//: (a million runs are never sent)
const RUN_WINDOW = 2000;
//: rows asked for beyond those the screen shows: otherwise the page asks for what it can show, the
//: server sorts (by start, a metric's final value), and scrolling asks for the pages scrolled to
const ROWS_MARGIN = 20;
const state = {
  fn: null, runs: [], total: 0, selected: [], tab: "scalars", sort: { key: "started", dir: -1 },
  hpSort: { key: null, dir: 1 }, colors: {}, nextColor: 0, series: {}, tags: null, charts: {}, collapsed: new Set(),
  fetched: new Set(), partial: {}, restComing: false, fetchedAt: {}, px: 0, hb: null, ticks: 0, varying: null, scripts: null, metricCols: null, stat: "last",
  stats: {}, drawSeq: 0, hpConst: false,
  // a script's __main__ function is one entry per script (its absolute path; "" none known)
  script: null, short: 6, filter: null, dirs: {}, page: null,
  group: { by: "", pattern: "", band: "minmax", on: true },
};

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};

async function api(path, post) {
  state.inflight = (state.inflight || 0) + 1;
  try {
    const r = await fetch("/api/" + path, post === undefined ? undefined
      : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(post) });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  } finally {
    state.inflight--;
  }
}

// ---- formatting -------------------------------------------------------------
function fmtNum(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3);
  return String(+v.toPrecision(6));
}
// an argument as the user wrote it: 100000 stays 100000, 1e-7 stays 1e-7
function fmtArg(v) { return v === undefined ? "–" : typeof v === "string" ? v : JSON.stringify(v); }
function fmtDur(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}
// a size as every face says it (memolab.text.human_bytes): decimal units, 1 KB = 1000 B
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  let v = +n;
  for (const unit of ["B", "KB", "MB", "GB", "TB"]) {
    if (Math.abs(v) < 1000 || unit === "TB") return unit === "B" ? `${v.toFixed(0)} B` : `${v.toFixed(1)} ${unit}`;
    v /= 1000;
  }
}
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function argText(hp) { return Object.entries(hp || {}).map(([k, v]) => `${k}=${fmtArg(v)}`).join(", "); }
// One id everywhere, the one the CLI takes (`memolab show 5`): the evaluation id. A run that
// stored nothing (failed, lost, still running, a script's process run) has none: it is shown as
// the start of its run id that tells it apart in the store, after an r (`memolab show r147562`,
// as `memolab runs` shows it: cli/ids.py).
function idText(r) { return r.eval_id && r.stored ? `#${r.eval_id}` : runShort(r.id); }
function runShort(id) { return typeof id === "number" || /^\d+$/.test(String(id)) ? `r${String(id).slice(0, state.short)}` : String(id); }
function codeDiffers() {
  const codes = new Set(state.selected.map(runById).filter((r) => r && r.code).map((r) => r.code));
  return codes.size > 1;
}
// the arguments whose values differ between the function's runs: what tells runs apart
function varyingKeys() {
  if (state.varying) return state.varying;
  const first = new Map(), varying = new Set();
  for (const r of state.runs) {
    for (const [k, v] of Object.entries(r.hparams || {})) {
      const s = JSON.stringify(v);
      if (!first.has(k)) first.set(k, s); else if (first.get(k) !== s) varying.add(k);
    }
  }
  for (const r of state.runs) for (const k of first.keys()) if (!(k in (r.hparams || {}))) varying.add(k);
  state.varying = [...first.keys()].filter((k) => varying.has(k));
  return state.varying;
}
// The one place a run's label is made (legends, tooltips, titles): the run's name when it has
// one, else its id and the arguments that differ between the function's runs (W&B style), plus
// its code version when the selected runs differ in code.
function runLabel(r) {
  if (!r) return "?";
  const code = codeDiffers() && r.code ? ` · code ${r.code.slice(0, 8)}` : "";
  const script = "";  // one script per entry of the sidebar: its name is in the title
  const name = r.name || r.run_name || r.display_name;
  if (name) return `${script}${String(name).slice(0, 60)} (${idText(r)})${code}`;
  const hp = r.hparams || {};
  const keys = varyingKeys().filter((k) => k in hp);
  const args = argText(Object.fromEntries(keys.map((k) => [k, hp[k]])));
  return `${script}${idText(r)} ${args}`.trim().slice(0, 70) + code;
}
// a selected run keeps its colour; a newly selected one takes the first colour no selected run has
function styleIndex(id) {
  if (!(id in state.colors)) {
    const used = new Set(state.selected.map((x) => state.colors[x]));
    let i = 0;
    while (used.has(i)) i++;
    state.colors[id] = i;
  }
  return state.colors[id];
}
function colorOf(id) { return COLORS[styleIndex(id) % COLORS.length]; }
function dashOf(id) { return DASHES[Math.floor(styleIndex(id) / COLORS.length) % DASHES.length]; }
function runById(id) { return state.byId ? state.byId.get(String(id)) : undefined; }
const isProcess = (fn) => fn.startsWith("<process:");

// ---- functions: memoized functions first, scripts' process runs in their own group -------------
// One name per function, as `memolab ls` and `runs` say it: a script's function is its file's
// (`a.py:train`), one entry per script that ran it (query.function_entries labels them).
const entryKey = (fn, script) => `${fn}\u0000${script ?? ""}`;
function fnLabel(f) { return isProcess(f.fn) ? f.fn.slice(9, -1) : f.label || f.fn; }
function currentEntry() { return (state.entries || []).find((f) => f.fn === state.fn && (f.script ?? null) === (state.script ?? null)); }
async function loadFunctions() {
  // (two polls may overlap on a loaded machine: an older list, come last, is not drawn over a newer one)
  const seq = state.fnsSeq = (state.fnsSeq || 0) + 1;
  const fns = await api("functions");
  if (seq !== state.fnsSeq) return fns;
  state.entries = fns;
  const filter = $("#fn-filter").value.toLowerCase();
  const item = (f) => el("li", { "data-fn": f.fn, "data-script": f.script ?? "", "data-label": fnLabel(f),
    class: f.fn === state.fn && (f.script ?? null) === (state.script ?? null) ? "active" : "",
    onclick: () => selectFunction(f.fn, false, f.script ?? null), title: f.script ? `${f.fn} in ${f.script}` : f.fn },
    fnLabel(f),
    el("span", { class: "count", text: `${Math.max(f.runs, f.evaluations)}${f.running ? " ●" : ""}` }));
  const shown = fns.filter((f) => f.fn.toLowerCase().includes(filter) || fnLabel(f).toLowerCase().includes(filter));
  $("#functions").replaceChildren(...shown.filter((f) => !isProcess(f.fn)).map(item));
  const scripts = shown.filter((f) => isProcess(f.fn));
  $("#scripts").replaceChildren(...scripts.map(item));
  $("#scripts-title").classList.toggle("hidden", scripts.length === 0);
  const running = fns.reduce((n, f) => n + (f.running || 0), 0);
  $("#live").textContent = running ? `● ${running} running — live` : "";
  return fns;
}

async function selectFunction(fn, keep = false, script = null) {
  const fresh = (state.fn !== fn || (state.script ?? null) !== (script ?? null)) && !keep;
  if (fresh) { state.selected = []; state.colors = {}; state.nextColor = 0; state.runsSig = null; state.metricCols = null; state.total = 0; }
  state.fn = fn;
  state.script = script;
  for (const li of document.querySelectorAll("#sidebar li")) li.classList.toggle("active", li.dataset.fn === fn && li.dataset.script === (script ?? ""));
  const entry = currentEntry() || { fn, label: fn };
  $("#fn-title").textContent = isProcess(fn) ? `${fnLabel(entry)} (logs of a script, outside memoized calls)` : fnLabel(entry);
  $("#fn-title").title = script ? `${fn} in ${script}` : fn;
  await loadRuns(true, false);
  if (state.fn !== fn || (state.script ?? null) !== (script ?? null)) return;  // another was chosen meanwhile: its call draws
  if (fresh || state.autoSelect) {
    state.autoSelect = false;
    // arriving on a function shows its newest runs at once
    const logged = state.runs.filter((r) => typeof r.id === "number");
    state.selected = logged.sort((a, b) => b.started - a.started).slice(0, AUTO_SELECT).map((r) => String(r.id));
    state.autoPicked = { ids: state.selected.join(","), of: logged.length };
  }
  renderRuns();
  saveUrl();
  await refreshTab();
}

// ---- runs table -----------------------------------------------------------------
const ROW_H = 28;  // every row is this tall (CSS): the tables draw only the rows in view
const METRIC_COLS = 6;

// the metric columns: chosen by the user, else a validation loss and accuracy first (val/loss,
// eval/acc: what a sweep is judged by), then train/ and val/ tags, then the tags with the most
// points; system metrics (sys/) only when chosen
function metricTags() {
  const all = new Map();
  for (const r of state.runs) for (const t of Object.keys(r.metrics || {})) all.set(t, (all.get(t) || 0) + ((state.stats[r.id] || {})[t]?.[3] || 1));
  const heldOut = (t) => /^(val|valid|validation|eval|test)[/_]/i.test(t);
  const rank = (t) => (isSysTag(t) ? 9 : heldOut(t) && /loss/i.test(t) ? 0 : heldOut(t) && /acc/i.test(t) ? 1
    : t.startsWith("train/") ? 2 : t.startsWith("val/") ? 3 : 4);
  const tags = [...all.keys()].sort((a, b) => rank(a) - rank(b) || all.get(b) - all.get(a) || (a < b ? -1 : 1));
  const dflt = tags.filter((t) => !isSysTag(t)).slice(0, METRIC_COLS);
  return { all: tags, shown: state.metricCols ? state.metricCols.filter((t) => all.has(t)) : dflt };
}

function metricValue(r, tag) {
  if (state.stat === "last") return (r.metrics || {})[tag];
  const s = (state.stats[r.id] || {})[tag];
  return s ? s[state.stat === "min" ? 1 : 2] : undefined;
}

// The arguments that vary between the function's runs, each a sortable column of its own (a:lr,
// a:optimizer, a:seed): a sweep's arguments began with its name and four constant tensor summaries,
// so what told its runs apart was cut off. The constant ones are folded into one cell (its tooltip
// lists them; "show" in its head unfolds them). One run: nothing varies, every argument is shown.
const ARG_COLS = 8;
function argKeys() {
  if (state.runs.length <= 1) return [];
  const keys = varyingKeys().slice(0, ARG_COLS);
  // the argument sorted by keeps its column, though the rows of a page sorted by it may all share one value
  const k = state.sort.key.startsWith("a:") ? state.sort.key.slice(2) : null;
  if (k && !keys.includes(k) && state.runs.some((r) => k in (r.hparams || {}))) keys.push(k);
  return keys;
}

function runCols() {
  const args = argKeys();
  return [
    ["", null], ["status", "status"], ["id", "eval_id"], ...args.map((k) => [k, "a:" + k]),
    [args.length ? "other arguments" : "arguments", "args"], ["code", "code"], ["started", "started"],
    ["duration", "duration"], ["hits", "hits"], ["result", "result"],
    ...metricTags().shown.map((t) => ["⟶ " + t, "m:" + t]),
  ];
}

// a value of an argument column, as it sorts: numbers as numbers, anything else as its text
function argValue(r, k) {
  const v = (r.hparams || {})[k];
  return v === undefined || v === null ? undefined : typeof v === "number" ? v : fmtArg(v);
}

// a run whose code differs from the run of the same function started just before it
// (of the same script: two scripts that each define `train` share the function __main__:train, and
// one file's code is not an edit of the other's)
function codeChanges() {
  const out = new Set();
  const last = new Map();
  for (const r of state.runs.filter((r) => r.code).sort((a, b) => a.started - b.started)) {
    const prev = last.get(r.script || "");
    if (prev !== undefined && prev !== r.code) out.add(String(r.id));
    last.set(r.script || "", r.code);
  }
  return out;
}
// (each script's function is an entry of its own: no run needs its file beside its arguments)
function scriptOf(r) { return ""; }

// what one request of the function's runs names: its function (and script), the sort the server does
// (sorted false: which runs, not in what order)
function runsQuery(limit, offset, sorted = true) {
  const which = state.script === null || state.script === undefined ? "" : state.script === "" ? "&none=1" : "&script=" + encodeURIComponent(state.script);
  const { key, dir } = state.sort;
  const bySrv = sorted && serverSorts() && !(key === "started" && dir < 0) ? `&sort=${encodeURIComponent(key)}&dir=${dir > 0 ? "asc" : "desc"}` : "";
  return "runs?fn=" + encodeURIComponent(state.fn) + which + `&limit=${limit}` + (offset ? `&offset=${offset}` : "") + bySrv
    + (serverFilters() ? state.srvFilter : "");
}
// the server can sort by start, by a metric's final value and by an argument's value
function serverSorts() { const { key } = state.sort; return key === "started" || key.startsWith("a:") || (key.startsWith("m:") && state.stat === "last"); }
// the server filters by status, tag, code and arguments (views.js serverFilter), over every run
function serverFilters() { return !!(state.filter && state.srvFilter !== null && state.srvFilter !== undefined); }
// the page filters or sorts the runs itself: it needs them all (up to RUN_WINDOW, the newest)
function wantsAll() { return !!((state.filter && !serverFilters()) || !serverSorts() || state.stat !== "last" || state.wantAll); }
// the rows the screen can show (the viewport's height in rows), and a margin: what one page asks
function screenRows() {
  return Math.max(AUTO_SELECT, Math.ceil(Math.max(window.innerHeight || 0, 400) / (state.rowH || ROW_H))) + ROWS_MARGIN;
}
// a view that needs every run loaded while the page holds only some: load them (and back)
function reloadIfModeChanged() {
  if (state.paged && wantsAll()) { loadRuns(true); return true; }
  if (state.loadedAll && !wantsAll() && state.total > state.runs.length) { loadRuns(true); return true; }
  return false;
}

// The runs of the table as they are asked for now (function, filter, sort). Every response is applied
// only if it answers the newest request AND the table as it is asked for when it comes: a sort clicked
// or a filter typed while it was on its way (which asked nothing themselves: the rows held were every
// run) asks again, instead of drawing the older query's rows under the new sort's arrow. A call
// overtaken by a newer one resolves when the newest is applied (state.runsLast): its caller (select
// all, the choice of a function) then reads the rows asked for, not the ones before.
function loadRuns(force = true, render = true) {
  if (!state.fn) return Promise.resolve(false);
  const seq = state.runsSeq = (state.runsSeq || 0) + 1;
  const p = state.runsLast = runsLoad(seq, force, render);
  return p;
}
// the query the table needs now: every run (up to the window) or a screen of them
function runsWanted() { const all = wantsAll(); return { all, size: all ? RUN_WINDOW : screenRows() }; }
async function runsLoad(seq, force, render) {
  const { all, size } = runsWanted();
  const fn = state.fn, asked = runsQuery(size, 0), which = runsQuery(0, 0, false);
  const page = await api(asked);
  if (seq !== state.runsSeq || fn !== state.fn) return state.runsLast;  // a newer request (another function, sort) won
  const now = runsWanted();
  // every run that passes the filter came: any order of them is drawn by the page itself
  const complete = page.total <= page.rows.length;
  if (runsQuery(now.size, 0) !== asked && !(complete && runsQuery(0, 0, false) === which)) return loadRuns(force, render);
  const runs = page.rows;
  state.total = page.total;
  // paged: the first page of what the server sorted; the others come as the table is scrolled to them
  const paged = !all && page.total > runs.length;
  // polling must not rebuild the table when nothing changed
  const sig = JSON.stringify([paged, state.sort, serverFilters() && state.srvFilter, runs.map((r) => [r.id, r.status, r.hits, r.stored, r.result, r.metrics, r.name, r.run_tags, r.kept, r.notes.length, r.status === "running" && Math.round(r.duration)])]);
  const changed = sig !== state.runsSig || page.total !== state.shownTotal;
  state.shownTotal = page.total;
  const before = state.byId;
  state.runs = runs;
  state.byId = new Map(runs.map((r) => [String(r.id), r]));
  state.paged = paged;
  state.loadedAll = all;
  if (paged && (changed || !state.slots)) {
    state.slots = new Array(page.total);
    for (let i = 0; i < runs.length; i++) state.slots[i] = runs[i];
    state.pageSize = size;
    state.slotsQuery = asked;  // the other pages are of this query (its sort, its filter), whatever is typed since
    state.asked = new Set([0]);
    state.bestSrv = {};
  } else if (paged) {  // nothing changed: the pages scrolled to stay
    for (const r of state.slots) if (r) state.byId.set(String(r.id), r);
    state.runs = state.slots.filter(Boolean);
  } else state.slots = null;
  state.runsSig = sig;
  state.varying = null;
  state.scripts = null;
  // selected runs beyond the rows loaded (a shared view, a page scrolled away from) are asked by id
  const missing = state.selected.filter((id) => !runById(id) && /^\d+$/.test(id));
  for (const id of missing) { const r = before && before.get(id); if (r) state.byId.set(id, r); }
  const ask = missing.filter((id) => !runById(id)).slice(0, MAX_IDS);
  if (ask.length && page.total > runs.length) {
    const got = await api(`runs?ids=${ask.join(",")}`);
    if (seq !== state.runsSeq) return state.runsLast;
    for (const r of got) if (r.fn === fn) state.byId.set(String(r.id), r);
  }
  state.selected = state.selected.filter((id) => runById(id));
  if (state.filter) compileFilter();  // labels (and so the regex's subjects) may have changed
  if (changed) { loadStats(); syncGroupControls(); loadGroupStats(); }
  if ((changed || force) && render) renderRuns();
  return changed;
}

// the pages of a paged table holding rows [first, last) not yet asked for: asked, drawn when they come
function fillRows(first, last) {
  if (!state.paged || !state.slots) return;
  const size = state.pageSize, slots = state.slots, fn = state.fn, seq = state.runsSeq, base = state.slotsQuery;
  for (let p = Math.floor(first / size); p * size < Math.min(last, slots.length); p++) {
    if (state.asked.has(p)) continue;
    state.asked.add(p);
    api(base + (p ? `&offset=${p * size}` : "")).then((page) => {
      if (seq !== state.runsSeq || fn !== state.fn || slots !== state.slots) return;  // reloaded meanwhile
      page.rows.forEach((r, i) => {
        if (p * size + i < slots.length) slots[p * size + i] = r;
        state.byId.set(String(r.id), r);
        state.runs.push(r);
      });
      renderRows();
    }).catch((e) => { state.asked.delete(p); console.error(e); });
  }
}

// points per run and tag (the default metric columns), and min/max once the user shows them: the
// table is drawn again when they come, the charts do not wait for them
function loadStats() {
  const fn = state.fn, minmax = state.stat !== "last", seq = state.statsSeq = (state.statsSeq || 0) + 1;
  const some = state.total > state.runs.length  // (a window or a page: the stats of its runs only)
    ? "&runs=" + state.runs.filter((r) => typeof r.id === "number").slice(0, MAX_IDS).map((r) => r.id).join(",") : "";
  api(`metrics?fn=${encodeURIComponent(fn)}${minmax ? "&minmax=1" : ""}${some}`)
    .then((st) => { if (seq === state.statsSeq && state.fn === fn) { state.stats = st; state.statsMinmax = minmax; renderRuns(); } })
    .catch((e) => console.error(e));
}

function renderRuns() {
  const cols = runCols();
  state.cols = cols;
  const { key, dir } = state.sort;
  markBest(cols);
  const val = (r) => key === "args" ? argText(r.hparams) : key.startsWith("m:") ? metricValue(r, key.slice(2))
    : key.startsWith("a:") ? argValue(r, key.slice(2)) : r[key];
  const keep = runFilter();
  if (state.paged) state.view = state.slots;  // (sorted by the server, the pages not yet come are holes)
  else {
    const rows = (keep ? state.runs.filter(keep) : state.runs).map((r) => [val(r), r]);
    rows.sort(([x], [y]) => (x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1) * (x === null || x === undefined || y === null || y === undefined ? 1 : dir));
    state.view = rows.map((p) => p[1]);
  }
  state.selSet = new Set(state.selected);
  state.changes = codeChanges();
  // a pointer down in the table: its head and rows are drawn after the release (a click survives)
  if (pressedIn($("#runs"))) whenReleased("runs", renderRuns);
  else $("#runs thead").replaceChildren(el("tr", {}, ...cols.map(([label, k]) => {
    const th = el("th", {
      "data-col": label,
      onclick: () => {
        if (!k) return;
        state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : 1 };
        // more runs than loaded: the server sorts (paged), or the page needs them all (a sort of its own)
        if (state.paged || state.total > state.runs.length || (state.loadedAll && state.total > RUN_WINDOW && serverSorts())) loadRuns(true);
        else renderRuns();
      },
      text: label + (k && k === key ? (dir > 0 ? " ▲" : " ▼") : ""),
    });
    if (k && k.startsWith("m:")) {  // which way is better: click to turn it (the best row follows)
      const tag = k.slice(2), low = lowerIsBetter(tag);
      th.prepend(el("span", { class: "dir", "data-dir": low ? "min" : "max", title: `${low ? "lower" : "higher"} is better (click to turn)`,
        onclick: (ev) => { ev.stopPropagation(); toggleDirection(tag); } }, low ? "↓" : "↑"), " ");
    }
    return th;
  })));
  if (!pressedIn($("#runs"))) renderRows();
  // filtered by the server: how many pass of the function's all (the sidebar's count)
  const entry = currentEntry(), whole = entry ? Math.max(entry.runs, entry.evaluations) : null;
  const bySrv = serverFilters() && whole !== null;
  const filtered = bySrv ? `${state.total} of ` : !state.paged && state.view.length !== state.runs.length ? `${state.view.length} of ` : "";
  const shown = shownIds().length;
  const more = !bySrv && !state.paged && state.total > state.runs.length ? ` (the window of ${state.total})` : "";
  $("#run-count").textContent = `${filtered}${bySrv ? whole : state.paged ? state.total : state.runs.length}${more} evaluation(s), ${state.selected.length} selected`
    + (shown !== state.selected.length ? ` (${shown} pass the filter)` : "");
  const stored = state.selected.map(runById).filter((r) => r && r.eval_id && r.stored);
  $("#compare-code").disabled = stored.length !== 2;
  $("#empty").classList.toggle("hidden", state.selected.length > 0 || ["hparams", "diff", "pipeline"].includes(state.tab));
  $("#empty").textContent = state.runs.length ? "Select evaluations in the table to see their logs."
    : "No runs yet: call a memoized function (its arguments and logs are recorded), or log outside one with memolab.log.scalar().";
  renderColumnPicker();
  explainSelection();
  foldToggle();
  pipelineMetricChanged();
}

// "show"/"fold" in the head of the constant arguments' column
function foldToggle() {
  const th = document.querySelector('#runs thead th[data-col="other arguments"]');
  if (!th || th.querySelector(".fold")) return;
  th.append(" ", el("button", { type: "button", class: "linkish fold", title: "the arguments every run has the same value of",
    onclick: (ev) => { ev.stopPropagation(); state.argsOpen = !state.argsOpen; renderRuns(); } }, state.argsOpen ? "fold" : "show"));
}

// Why these runs are selected, while the selection is the one made on arrival: "20 of 24" said
// nothing of the 4 left out (the newest AUTO_SELECT, so a big sweep's first draw stays quick).
function explainSelection() {
  const why = $("#run-why"), a = state.autoPicked;
  const auto = !!a && a.ids === state.selected.join(",") && a.of > state.selected.length;
  why.classList.toggle("hidden", !auto);
  if (auto) why.textContent = `— the ${state.selected.length} newest of ${a.of} runs, selected on arrival; "select all" draws every one`;
}

// only the rows in view (plus a margin) are in the DOM: 10,000 runs sort and scroll like 50
function renderRows() {
  if (pressedIn($("#runs tbody"))) { whenReleased("runs rows", renderRows); return; }  // (renderRuns)
  const wrap = $("#runs-wrap"), rows = state.view || [], cols = state.cols || runCols();
  let lo = Infinity, hi = -1;
  virtualRows(wrap, $("#runs tbody"), rows, cols.length, (r, i) => {
    if (r) return runRow(r, cols);
    lo = Math.min(lo, i); hi = Math.max(hi, i);  // a row of a page not yet come: asked for
    return el("tr", { class: "pending" }, el("td", { colspan: String(cols.length), class: "muted", text: "…" }));
  });
  if (hi >= 0) fillRows(lo, hi + 1);
}

// Draws rows[first..] that fit the scrolled box (plus 10 above and below) between two spacer rows
// as tall as the rows left out. The row height is measured (fonts differ), ROW_H until then.
function virtualRows(wrap, tbody, rows, ncols, make) {
  const h = state.rowH || ROW_H;
  const first = Math.max(0, Math.floor(wrap.scrollTop / h) - 10);
  // (a paged table's rows not yet come are holes: given to make as undefined, with their place)
  const n = Math.max(0, Math.min(rows.length - first, Math.ceil((wrap.clientHeight || 400) / h) + 20));
  const shown = Array.from({ length: n }, (_, i) => make(rows[first + i], first + i));
  const spacer = (px) => el("tr", { class: "spacer" }, el("td", { colspan: String(ncols), style: `height:${px}px` }));
  tbody.replaceChildren(spacer(first * h), ...shown, spacer((rows.length - first - shown.length) * h));
  const one = tbody.querySelector("tr[data-run]");
  const measured = one ? one.getBoundingClientRect().height : 0;
  if (measured > 0 && Math.abs(measured - h) > 0.5) { state.rowH = measured; virtualRows(wrap, tbody, rows, ncols, make); }
}

// the best run of each metric column among the rows the filter shows (by the value the columns
// show, in the column's direction), and of the sorted metric (else the first): its row
function markBest(cols) {
  const keep = state.filter, rows = (keep ? state.runs.filter(keep) : state.runs).map((r) => String(r.id));
  // a paged table holds a page of the runs: the best of every run is the server's (/api/best)
  const of = (tag) => state.paged ? serverBest(tag) : bestOf(tag, rows);
  state.best = {};
  for (const [, k] of cols) if (k && k.startsWith("m:")) state.best[k.slice(2)] = of(k.slice(2));
  const primary = state.sort.key && state.sort.key.startsWith("m:") ? state.sort.key.slice(2) : (metricTags().shown[0] || null);
  state.bestRow = primary ? state.best[primary] ?? of(primary) : null;
  state.primary = primary;
}

// the best run of every run of the function by a metric's final value, in the column's direction
// (asked once per tag and direction after each reload; null until it comes)
function serverBest(tag) {
  if (isSysTag(tag)) return null;
  const low = lowerIsBetter(tag), k = `${tag}\u0000${low ? "min" : "max"}`;
  if (k in state.bestSrv) return state.bestSrv[k];
  state.bestSrv[k] = null;
  const bests = state.bestSrv, which = state.script === null || state.script === undefined ? "" : state.script === "" ? "&none=1" : "&script=" + encodeURIComponent(state.script);
  api(`best?fn=${encodeURIComponent(state.fn)}${which}&tag=${encodeURIComponent(tag)}&dir=${low ? "min" : "max"}`)
    .then((b) => { if (bests === state.bestSrv) { bests[k] = b.run === null ? null : String(b.run); renderRuns(); } })
    .catch((e) => console.error(e));
  return null;
}

function runRow(r, cols) {
  const sel = state.selSet.has(String(r.id));
  const logged = typeof r.id === "number";
  const box = el("input", { type: "checkbox" });
  box.checked = sel;
  if (!logged) box.disabled = true;
  const sw = el("span", { class: "swatch", style: sel ? `background:${colorOf(r.id)}` : "" });
  // a script's process run stores nothing by design: "(not stored)" is for memoized calls only
  const status = r.status + (r.stored || isProcess(r.fn) ? "" : r.status === "done" ? " (not stored)" : "");
  const result = r.status === "failed" || r.status === "lost" ? (r.error || r.status) : r.result ?? "–";
  const code = el("td", { class: "code", title: r.code || "" }, (r.code || "").slice(0, 8));
  // a code change the user accepted as giving the same results (`memolab accept`): marked as such on
  // both codes it names, instead of "code changed"
  const accepted = r.accepted || [];
  if (accepted.length) {
    code.append(el("span", {
      class: "badge accepted", text: "accepted change",
      title: accepted.map((a) => `accept #${a.id}: code ${a.new_code.slice(0, 8)}… gives the results of code ` +
        `${a.old_code.slice(0, 8)}… (accepted by ${a.by}, ${fmtTime(a.time)}; memolab accept --undo takes it back)`).join("\n"),
    }));
  } else if (state.changes.has(String(r.id))) code.append(el("span", { class: "badge", text: "code changed" }));
  const args = r.name ? `${r.name} · ${argText(r.hparams)}` : argText(r.hparams);
  const best = state.bestRow === String(r.id);
  // the arguments of their own columns are left out of this cell; the constant ones are folded
  const own = new Set(cols.filter(([, k]) => k && k.startsWith("a:")).map(([, k]) => k.slice(2)));
  const rest = Object.fromEntries(Object.entries(r.hparams || {}).filter(([k]) => !own.has(k)));
  const nrest = Object.keys(rest).length;
  const folded = own.size > 0 && !state.argsOpen;
  const restText = folded ? (nrest ? `${nrest} constant` : "") : argText(rest);
  const argsCell = el("td", { class: "args", title: args + ((r.run_tags || []).length ? `\ntags: ${r.run_tags.join(", ")}` : "") },
    ...(r.run_tags || []).map((t) => el("span", { class: "chip", text: t })),
    ...(r.kept ? [el("span", { class: "chip kept", title: "kept: gc never drops this evaluation (memolab unkeep takes it off)", text: "kept" })] : []),
    ...((r.notes || []).length ? [el("span", { class: "note-count", title: r.notes.map((n) => n.text).join("\n"), text: `✎${r.notes.length}` })] : []),
    ...(r.name ? [r.name + (restText ? " · " : "")] : []),
    ...(restText ? [folded ? el("span", { class: "muted folded" }, restText) : restText] : []));
  const argCells = cols.filter(([, k]) => k && k.startsWith("a:")).map(([, k]) => {
    const v = (r.hparams || {})[k.slice(2)];
    return el("td", { class: "arg" + (typeof v === "number" ? " num" : ""), "data-arg": k.slice(2), text: fmtArg(v) });
  });
  const open = el("button", { type: "button", class: "open-run", title: "open this run's page: status, arguments, notes, traceback",
    onclick: (ev) => { ev.stopPropagation(); openRunPage(String(r.id)); } }, "⋯");
  return el("tr", {
    "data-run": String(r.id), "data-eval": r.eval_id && r.stored ? String(r.eval_id) : "",
    class: (sel ? "selected" : "") + (best ? " best" : ""),
    title: logged ? "" : "stored without logs", onclick: () => logged && toggleRun(String(r.id)),
  }, el("td", {}, box, sw), el("td", {}, el("span", { class: "status " + r.status, text: status }), ...(logged ? [open] : [])),
  el("td", { class: "id", title: `run ${r.id}` + (best ? ` — best ${state.primary}` : "") }, r.eval_id && r.stored
    ? el("a", { href: "#", class: "eval-open", title: "its inputs, what used it", onclick: (ev) => { ev.preventDefault(); ev.stopPropagation(); showEvaluation(r.eval_id); } }, idText(r))
    : idText(r)), ...argCells, argsCell,
  code, el("td", { text: fmtTime(r.started) }),
  el("td", { text: fmtDur(r.duration) }), el("td", { text: String(r.hits ?? 0) }),
  el("td", { class: "result" + (r.error ? " error" : ""), text: result, title: result }),
  ...cols.filter(([, k]) => k && k.startsWith("m:")).map(([, k]) => {
    const tag = k.slice(2), top = state.best[tag] === String(r.id);
    return el("td", { class: "num" + (top ? " best" : ""), title: top ? `best ${tag} (${lowerIsBetter(tag) ? "lowest" : "highest"})` : "",
      text: fmtNum(metricValue(r, tag)) });
  }));
}

function renderColumnPicker() {
  const { all, shown } = metricTags();
  const on = new Set(shown);
  $("#metric-list").replaceChildren(...all.map((t) => {
    const box = el("input", { type: "checkbox", "data-tag": t });
    box.checked = on.has(t);
    box.addEventListener("change", () => {
      const now = metricTags().shown.filter((x) => x !== t);
      state.metricCols = box.checked ? [...now, t] : now;
      renderRuns();
    });
    return el("label", {}, box, " " + t);
  }));
}

function setSelection(ids) {
  state.selected = ids.map(String);
  const keep = new Set(ids);
  for (const id of Object.keys(state.colors)) if (!keep.has(id)) delete state.colors[id];
  renderRuns();
  saveUrl();
  refreshTab();
}

function toggleRun(id) {
  const i = state.selected.indexOf(id);
  setSelection(i >= 0 ? state.selected.filter((x) => x !== id) : [...state.selected, id]);
}

async function selectAll() {
  // the rows of what the user last asked for: a load of them under way (a filter just typed) is waited
  // for, never the previous filter's rows selected
  if (state.runsLast) await state.runsLast.catch(() => false);
  // a paged table: every run first (the newest RUN_WINDOW), as a filter does
  if (state.paged) { state.wantAll = true; await loadRuns(true); state.wantAll = false; }
  // the filtered rows, in table order, that have logs (as many as one request may name)
  const have = new Set(state.selected);
  const add = (state.view || []).filter((r) => typeof r.id === "number" && !have.has(String(r.id))).map((r) => String(r.id));
  setSelection([...state.selected, ...add].slice(0, MAX_IDS));
}

// ---- tabs --------------------------------------------------------------------------
function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll(".tab")) s.classList.toggle("hidden", s.id !== "tab-" + tab);
  if (state.page) closeRunPage(false);
  renderRuns();
  saveUrl();
  if (tab !== "diff") refreshTab();
}

let refreshing = null;
async function refreshTab() {
  // one refresh at a time; a request made meanwhile runs once the current one ends
  if (refreshing) { refreshing.again = true; return; }
  refreshing = { again: false };
  try {
    do {
      refreshing.again = false;
      const ids = shownIds();  // the selection, narrowed by the run filter
      if (state.tab === "scalars") { await renderScalars(ids); continue; }
      if (state.tab === "hparams") { await renderHparams(); continue; }
      if (state.tab === "pipeline") { await renderPipeline(); continue; }
      state.tags = ids.length ? await api("tags?runs=" + ids.join(",")) : { scalar: [], histogram: [], image: [], text: [] };
      for (const id of ids) state.fetchedAt["o" + id] = (state.hb?.running || {})[id];
      if (state.tab === "histograms") await renderHistograms(ids);
      else if (state.tab === "images") await renderImages(ids);
      else if (state.tab === "text") await renderTexts(ids);
    } while (refreshing.again);
  } catch (e) {
    console.error(e);
  } finally {
    refreshing = null;
  }
}

// ---- live refresh: a cheap heartbeat every 2 s; more only when something changed -----------------
// An idle page (nothing running) asks /api/heartbeat and nothing else. A run starting or ending,
// an evaluation stored or hit, reloads the functions and the runs; a selected running run that
// wrote since its series were fetched gets only its new points.

// A running run that wrote since the last heartbeat: its final values (and the stats), read before
// its chart's new points are fetched, so the table's last value is never behind its chart's last
// point. (A run logging changes no heartbeat ``sig``: without this the table caught up only on the
// 30 s "lost?" look, 0.0714 beside a chart ending at 0.0625.) A few runs' scalar_tags rows, not the runs window.
async function loadLastValues(hb, prev) {
  const fn = state.fn, minmax = state.stat !== "last";
  const ids = Object.keys(hb.running).filter((id) => hb.running[id] !== (prev.running || {})[id] && runById(id));
  if (!ids.length) return;
  const st = await api(`metrics?fn=${encodeURIComponent(fn)}${minmax ? "&minmax=1" : ""}&runs=${ids.slice(0, MAX_IDS).join(",")}`);
  if (state.fn !== fn) return;
  for (const id of ids) {
    const r = runById(id), got = st[id] || {};
    if (!r) continue;
    r.metrics = { ...r.metrics };
    for (const [t, v] of Object.entries(got)) r.metrics[t] = v[0];
    state.stats[id] = { ...(state.stats[id] || {}), ...got };
  }
  renderRuns();
}

async function poll() {
  try {
    const prev = state.hb;
    const hb = state.hb = await api("heartbeat");
    const running = Object.keys(hb.running).length > 0;
    state.ticks++;
    // a killed process cannot say so: while runs are "running", look again every 30 s (lost?)
    if (!prev || hb.sig !== prev.sig || (running && state.ticks % 15 === 0)) {
      await loadFunctions();
      if (state.fn) await loadRuns(false);
    } else if (state.fn) await loadLastValues(hb, prev);
    if (!state.fn) return;
    const stale = state.selected.some((id) => isStale(id, state.tab === "scalars" ? "" : "o"));
    if (state.tab === "scalars" ? stale : state.tab === "hparams" || state.tab === "pipeline" ? hb.sig !== prev?.sig : stale) await refreshTab();
  } catch (e) { console.error(e); }
}

// a URL naming a script's function without its script: its only (or first) script's entry
function defaultScript(fn) {
  const mine = (state.entries || []).filter((f) => f.fn === fn);
  return mine.length ? mine[0].script ?? null : null;
}

async function init() {
  // what the page opens on, asked for at once (one round trip, not four in a row)
  const asked = Promise.all([api("info"), api("heartbeat"), api("ids"), loadFunctions()]);
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#fn-filter").addEventListener("input", loadFunctions);
  $("#tag-filter").addEventListener("input", () => { saveUrl(); refreshTab(); });
  // the filter narrows the charts too: redrawn once typing pauses
  $("#run-filter").addEventListener("input", () => {
    const was = serverFilters() && state.srvFilter;
    compileFilter();
    // a filter the server applies (or one it no longer does) asks for the runs again
    if (!reloadIfModeChanged()) { if ((serverFilters() && state.srvFilter) !== was) loadRuns(true); else renderRuns(); }
    saveUrl();
    clearTimeout(state.filterTimer);
    state.filterTimer = setTimeout(() => refreshTab(), 150);
  });
  initGroupControls();
  initHparamsViz();
  $("#runs-wrap").addEventListener("scroll", () => { if (!state.rowFrame) state.rowFrame = requestAnimationFrame(() => { state.rowFrame = null; renderRows(); }); });
  $("#smoothing").addEventListener("input", () => { $("#smoothing-val").textContent = (+$("#smoothing").value).toFixed(2); saveUrl(); redrawScalars(); });
  $("#xaxis").addEventListener("change", () => { saveUrl(); redrawScalars(); });
  $("#logscale").addEventListener("change", () => { saveUrl(); redrawScalars(); });
  $("#hist-mode").addEventListener("change", () => refreshTab());
  $("#select-none").addEventListener("click", () => setSelection([]));
  $("#select-all").addEventListener("click", selectAll);
  $("#metric-stat").addEventListener("change", () => {
    state.stat = $("#metric-stat").value;
    saveUrl();
    if (reloadIfModeChanged()) return;
    if (state.stat !== "last" && !state.statsMinmax) loadStats(); else { renderRuns(); redrawScalars(); }
  });
  $("#hp-const").addEventListener("click", () => { state.hpConst = !state.hpConst; drawHparams(); });
  $("#hparams-wrap").addEventListener("scroll", () => { if (!state.hpFrame) state.hpFrame = requestAnimationFrame(() => { state.hpFrame = null; renderHpRows(); }); });
  $("#compare-code").addEventListener("click", compareCode);
  window.addEventListener("resize", () => { redrawScalars(); renderRows(); });
  const url = new URLSearchParams(location.search);
  restoreView(url);
  compileFilter();
  const [info, hb, ids, fns] = await asked;
  $("#store").textContent = info.store;
  state.hb = hb;
  state.short = ids.short;
  // open on what was asked for, else on the memoized function (not a script's process run) whose runs
  // logged scalars most recently: a sweep's curves, not its pipeline's last step (evaluate, no scalars);
  // among functions that logged none, the most recently run
  const memoized = fns.filter((f) => !isProcess(f.fn))
    .sort((a, b) => (b.scalars_last || 0) - (a.scalars_last || 0) || (b.last || 0) - (a.last || 0));
  const first = memoized[0] || fns[0] || {};
  // ?fn= a label (a.py:train, as the URL is written) or a symbol (__main__:train, &script=)
  const labelled = url.get("fn") && !url.has("script") ? fns.find((f) => f.label !== f.fn && f.label === url.get("fn")) : undefined;
  const wanted = labelled ? labelled.fn : url.get("fn") || first.fn;
  if (wanted) {
    state.selected = (url.get("runs") || "").split(",").filter(Boolean);
    state.autoSelect = !url.has("runs");  // a shared or reloaded view keeps its selection, even an empty one
    await selectFunction(wanted, true, labelled ? labelled.script ?? null : url.get("fn") ? (url.has("script") ? url.get("script") : defaultScript(wanted)) : first.script ?? null);
  }
  const tab = url.get("tab");
  if (tab && document.querySelector(`#tabs button[data-tab="${CSS.escape(tab)}"]`)) showTab(tab);
  if (state.page) openRunPage(state.page);
  saveUrl();  // also drops an access token from the address bar: the cookie carries it from here on
  document.body.dataset.ready = "1";
  setInterval(poll, 2000);
}

init();
