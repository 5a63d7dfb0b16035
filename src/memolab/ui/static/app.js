// memolab dashboard. Plain JS plus three vendored libraries (static/vendor/, refreshed from npm
// by vendor/refresh.sh): uPlot draws the scalar charts (zoom, crosshair, log axes), marked and
// DOMPurify render logged text as sanitised markdown. Nothing is fetched from elsewhere: the page
// works offline and ships inside the Python package.
//
// At the scale of a sweep (50 runs x 20 tags x 5,000 steps): the scalars of a view come in one
// batched request sized to the charts' pixel width (/api/series), are kept per run and tag, and
// are fetched again only for what changed (a newly selected run; the new points of a running
// one). An idle page asks only /api/heartbeat. Charts are drawn one per task, visible ones first,
// so the page never freezes; the runs table draws only the rows in view.
"use strict";

// 20 colours that stay apart on white (Tableau 10, then darker partners), and dash styles after
// them: 80 runs before a style repeats
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
  "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#3182bd", "#e6550d", "#31a354", "#ad494a"];
const DASHES = [null, [7, 3], [2, 3], [9, 3, 2, 3]];
//: runs of the newest function selected on arrival (newest first)
const AUTO_SELECT = 20;
//: the most runs one request may name (the server's limit)
const MAX_IDS = 1000;
const state = {
  fn: null, runs: [], selected: [], tab: "scalars", sort: { key: "started", dir: -1 },
  hpSort: { key: null, dir: 1 }, colors: {}, nextColor: 0, series: {}, tags: null, charts: {}, collapsed: new Set(),
  fetched: new Set(), fetchedAt: {}, px: 0, hb: null, ticks: 0, varying: null, metricCols: null, stat: "last",
  stats: {}, drawSeq: 0, hpConst: false,
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

async function api(path) {
  const r = await fetch("/api/" + path);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
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
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function argText(hp) { return Object.entries(hp || {}).map(([k, v]) => `${k}=${fmtArg(v)}`).join(", "); }
// One id everywhere, the one the CLI takes (`memolab show 5`): the evaluation id. A run that
// stored nothing (failed, lost, still running, a script's process run) has none: it is shown
// as "run" plus the end of its run id.
function idText(r) { return r.eval_id && r.stored ? `#${r.eval_id}` : `run …${String(r.id).slice(-4)}`; }
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
  const name = r.name || r.run_name || r.display_name;
  if (name) return `${String(name).slice(0, 60)} (${idText(r)})${code}`;
  const hp = r.hparams || {};
  const keys = varyingKeys().filter((k) => k in hp);
  const args = argText(Object.fromEntries(keys.map((k) => [k, hp[k]])));
  return `${idText(r)} ${args}`.trim().slice(0, 70) + code;
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

// ---- the view lives in the URL: ?fn=…&runs=…&tab=…&tags=… (share it, reload it) -------------
function saveUrl() {
  const p = new URLSearchParams();
  if (state.fn) p.set("fn", state.fn);
  p.set("runs", state.selected.join(","));  // present even when empty: a reload must not auto-select
  if (state.tab !== "scalars") p.set("tab", state.tab);
  const tags = $("#tag-filter").value;
  if (tags) p.set("tags", tags);
  const q = p.toString();
  history.replaceState(null, "", q ? "?" + q : location.pathname);
}

// ---- functions: memoized functions first, scripts' process runs in their own group -------------
async function loadFunctions() {
  const fns = await api("functions");
  const filter = $("#fn-filter").value.toLowerCase();
  const item = (f) => el("li", { "data-fn": f.fn, class: f.fn === state.fn ? "active" : "", onclick: () => selectFunction(f.fn), title: f.fn },
    isProcess(f.fn) ? f.fn.slice(9, -1) : f.fn,
    el("span", { class: "count", text: `${Math.max(f.runs, f.evaluations)}${f.running ? " ●" : ""}` }));
  const shown = fns.filter((f) => f.fn.toLowerCase().includes(filter));
  $("#functions").replaceChildren(...shown.filter((f) => !isProcess(f.fn)).map(item));
  const scripts = shown.filter((f) => isProcess(f.fn));
  $("#scripts").replaceChildren(...scripts.map(item));
  $("#scripts-title").classList.toggle("hidden", scripts.length === 0);
  const running = fns.reduce((n, f) => n + (f.running || 0), 0);
  $("#live").textContent = running ? `● ${running} running — live` : "";
  return fns;
}

async function selectFunction(fn, keep = false) {
  const fresh = state.fn !== fn && !keep;
  if (fresh) { state.selected = []; state.colors = {}; state.nextColor = 0; state.runsSig = null; state.metricCols = null; }
  state.fn = fn;
  for (const li of document.querySelectorAll("#sidebar li")) li.classList.toggle("active", li.dataset.fn === fn);
  $("#fn-title").textContent = isProcess(fn) ? `${fn} (logs of a script, outside memoized calls)` : fn;
  await loadRuns();
  if (fresh || state.autoSelect) {
    state.autoSelect = false;
    // arriving on a function shows its newest runs at once
    state.selected = state.runs.filter((r) => typeof r.id === "number").sort((a, b) => b.started - a.started)
      .slice(0, AUTO_SELECT).map((r) => String(r.id));
    renderRuns();
  }
  saveUrl();
  await refreshTab();
}

// ---- runs table -----------------------------------------------------------------
const ROW_H = 28;  // every row is this tall (CSS): the tables draw only the rows in view
const METRIC_COLS = 6;

// the metric columns: chosen by the user, else the tags with the most points, train/ and val/ first
function metricTags() {
  const all = new Map();
  for (const r of state.runs) for (const t of Object.keys(r.metrics || {})) all.set(t, (all.get(t) || 0) + ((state.stats[r.id] || {})[t]?.[3] || 1));
  const rank = (t) => (t.startsWith("train/") ? 0 : t.startsWith("val/") ? 1 : 2);
  const tags = [...all.keys()].sort((a, b) => rank(a) - rank(b) || all.get(b) - all.get(a) || (a < b ? -1 : 1));
  return { all: tags, shown: state.metricCols ? state.metricCols.filter((t) => all.has(t)) : tags.slice(0, METRIC_COLS) };
}

function metricValue(r, tag) {
  if (state.stat === "last") return (r.metrics || {})[tag];
  const s = (state.stats[r.id] || {})[tag];
  return s ? s[state.stat === "min" ? 1 : 2] : undefined;
}

function runCols() {
  return [
    ["", null], ["status", "status"], ["id", "eval_id"], ["arguments", "args"], ["code", "code"], ["started", "started"],
    ["duration", "duration"], ["hits", "hits"], ["result", "result"],
    ...metricTags().shown.map((t) => ["⟶ " + t, "m:" + t]),
  ];
}

// a run whose code differs from the run of the same function started just before it
function codeChanges() {
  const out = new Set();
  const byTime = state.runs.filter((r) => r.code).sort((a, b) => a.started - b.started);
  for (let i = 1; i < byTime.length; i++) if (byTime[i].code !== byTime[i - 1].code) out.add(String(byTime[i].id));
  return out;
}

async function loadRuns(force = true) {
  if (!state.fn) return false;
  const runs = await api("runs?fn=" + encodeURIComponent(state.fn));
  // polling must not rebuild the table when nothing changed
  const sig = JSON.stringify(runs.map((r) => [r.id, r.status, r.hits, r.stored, r.result, r.metrics, r.name, r.status === "running" && Math.round(r.duration)]));
  const changed = sig !== state.runsSig;
  state.runs = runs;
  state.byId = new Map(runs.map((r) => [String(r.id), r]));
  state.runsSig = sig;
  state.varying = null;
  state.selected = state.selected.filter((id) => runById(id));
  if (changed) loadStats();
  if (changed || force) renderRuns();
  return changed;
}

// points per run and tag (the default metric columns), and min/max once the user shows them: the
// table is drawn again when they come, the charts do not wait for them
function loadStats() {
  const fn = state.fn, minmax = state.stat !== "last";
  api(`metrics?fn=${encodeURIComponent(fn)}${minmax ? "&minmax=1" : ""}`)
    .then((st) => { if (state.fn === fn) { state.stats = st; state.statsMinmax = minmax; renderRuns(); } })
    .catch((e) => console.error(e));
}

// the runs filter: words, all of which must match: `status:failed`, `lr=0.1` (or != < > <= >=
// on an argument), or a regex over the label, arguments and status
function runFilter() {
  const src = $("#run-filter").value.trim();
  $("#run-filter").style.borderColor = "";
  if (!src) return null;
  const preds = src.split(/\s+/).map((tok) => {
    let m = tok.match(/^status:(\S+)$/);
    if (m) return (r) => r.status.startsWith(m[1]);
    m = tok.match(/^([\w.\/-]+)(<=|>=|!=|=|<|>)(.+)$/);
    if (m) {
      const [, k, op, want] = m;
      return (r) => {
        const v = (r.hparams || {})[k];
        if (v === undefined) return op === "!=";
        const a = typeof v === "number" ? v : fmtArg(v), b = typeof v === "number" ? +want : want;
        return op === "=" ? a === b || fmtArg(v) === want : op === "!=" ? a !== b && fmtArg(v) !== want
          : op === "<" ? a < b : op === ">" ? a > b : op === "<=" ? a <= b : a >= b;
      };
    }
    let re = null;
    try { re = new RegExp(tok, "i"); } catch (e) { $("#run-filter").style.borderColor = "red"; }
    return (r) => !re || re.test(`${runLabel(r)} ${r.name || ""} ${argText(r.hparams)} ${r.status}`);
  });
  return (r) => preds.every((p) => p(r));
}

function renderRuns() {
  const cols = runCols();
  state.cols = cols;
  const { key, dir } = state.sort;
  const val = (r) => key === "args" ? argText(r.hparams) : key.startsWith("m:") ? metricValue(r, key.slice(2)) : r[key];
  const keep = runFilter();
  const rows = (keep ? state.runs.filter(keep) : state.runs).map((r) => [val(r), r]);
  rows.sort(([x], [y]) => (x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1) * (x === null || x === undefined || y === null || y === undefined ? 1 : dir));
  state.view = rows.map((p) => p[1]);
  state.selSet = new Set(state.selected);
  state.changes = codeChanges();
  $("#runs thead").replaceChildren(el("tr", {}, ...cols.map(([label, k]) => el("th", {
    "data-col": label,
    onclick: () => { if (!k) return; state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : 1 }; renderRuns(); },
    text: label + (k && k === key ? (dir > 0 ? " ▲" : " ▼") : ""),
  }))));
  renderRows();
  const filtered = state.view.length !== state.runs.length ? `${state.view.length} of ` : "";
  $("#run-count").textContent = `${filtered}${state.runs.length} evaluation(s), ${state.selected.length} selected`;
  const stored = state.selected.map(runById).filter((r) => r && r.eval_id && r.stored);
  $("#compare-code").disabled = stored.length !== 2;
  $("#empty").classList.toggle("hidden", state.selected.length > 0 || state.tab === "hparams" || state.tab === "diff");
  renderColumnPicker();
}

// only the rows in view (plus a margin) are in the DOM: 10,000 runs sort and scroll like 50
function renderRows() {
  const wrap = $("#runs-wrap"), rows = state.view || [], cols = state.cols || runCols();
  virtualRows(wrap, $("#runs tbody"), rows, cols.length, (r) => runRow(r, cols));
}

// Draws rows[first..] that fit the scrolled box (plus 10 above and below) between two spacer rows
// as tall as the rows left out. The row height is measured (fonts differ), ROW_H until then.
function virtualRows(wrap, tbody, rows, ncols, make) {
  const h = state.rowH || ROW_H;
  const first = Math.max(0, Math.floor(wrap.scrollTop / h) - 10);
  const shown = rows.slice(first, first + Math.ceil((wrap.clientHeight || 400) / h) + 20);
  const spacer = (px) => el("tr", { class: "spacer" }, el("td", { colspan: String(ncols), style: `height:${px}px` }));
  tbody.replaceChildren(spacer(first * h), ...shown.map(make), spacer((rows.length - first - shown.length) * h));
  const one = tbody.querySelector("tr[data-run]");
  const measured = one ? one.getBoundingClientRect().height : 0;
  if (measured > 0 && Math.abs(measured - h) > 0.5) { state.rowH = measured; virtualRows(wrap, tbody, rows, ncols, make); }
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
  const code = el("td", { title: r.code || "" }, (r.code || "").slice(0, 8));
  if (state.changes.has(String(r.id))) code.append(el("span", { class: "badge", text: "code changed" }));
  const args = r.name ? `${r.name} · ${argText(r.hparams)}` : argText(r.hparams);
  return el("tr", {
    "data-run": String(r.id), "data-eval": r.eval_id && r.stored ? String(r.eval_id) : "", class: sel ? "selected" : "",
    title: logged ? "" : "stored without logs", onclick: () => logged && toggleRun(String(r.id)),
  }, el("td", {}, box, sw), el("td", {}, el("span", { class: "status " + r.status, text: status })),
  el("td", { class: "id", text: idText(r), title: `run ${r.id}` }), el("td", { text: args, title: args }),
  code, el("td", { text: fmtTime(r.started) }),
  el("td", { text: fmtDur(r.duration) }), el("td", { text: String(r.hits ?? 0) }),
  el("td", { class: "result" + (r.error ? " error" : ""), text: result, title: result }),
  ...cols.slice(9).map(([, k]) => el("td", { class: "num", text: fmtNum(metricValue(r, k.slice(2))) })));
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
  state.selected = ids;
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

function selectAll() {
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
      const ids = state.selected.slice();
      if (state.tab === "scalars") { await renderScalars(ids); continue; }
      if (state.tab === "hparams") { await renderHparams(); continue; }
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

// ---- scalars: one batched request per view, kept per run and tag, fetched again only when they grow -----
function tagFilter() {
  const src = $("#tag-filter").value.trim();
  if (!src) return () => true;
  try { const re = new RegExp(src); $("#tag-filter").style.borderColor = ""; return (t) => re.test(t); }
  catch (e) { $("#tag-filter").style.borderColor = "red"; return () => true; }
}

const groupOf = (tag) => (tag.includes("/") ? tag.slice(0, tag.indexOf("/")) : "");

// the plot width of one chart of the grid (CSS: auto-fill, minmax(420px, 1fr), gap 12px)
function chartPx() {
  const W = $("#charts").clientWidth || $("main").clientWidth || 1000;
  const cols = Math.max(1, Math.floor((W + 12) / 432));
  return Math.max(200, Math.floor((W - 12 * (cols - 1)) / cols) - 18);
}

// a run whose series are held but may have grown: it was running when they were fetched, or is now
function isStale(id, prefix = "") {
  const now = (state.hb?.running || {})[id];
  return state.fetchedAt[prefix + id] !== now;
}

async function fetchSeries(ids) {
  const want = Math.ceil(chartPx() / 50) * 50;
  if (want > state.px * 1.25 || !state.px) {  // wider charts (a resize): sized again, smaller ones reuse
    state.px = want; state.series = {}; state.fetched = new Set();
  }
  const fresh = ids.filter((id) => !state.fetched.has(id));
  const grown = ids.filter((id) => state.fetched.has(id) && isStale(id));
  if (!fresh.length && !grown.length) return false;
  const hb = state.hb?.running || {};
  for (let i = 0; i < fresh.length + grown.length; i += 200) {  // a long URL is split, never refused
    const part = [...fresh, ...grown].slice(i, i + 200);
    const seen = {};
    for (const id of part) {
      if (!state.fetched.has(id)) continue;
      const held = seen[id] = {};
      for (const [tag, per] of Object.entries(state.series)) {
        const d = per[id];
        if (d) held[tag] = [d.n, d.step[d.step.length - 1]];
      }
    }
    const at = Object.fromEntries(part.map((id) => [id, hb[id]]));
    const got = await api(`series?runs=${part.join(",")}&px=${state.px}` + (Object.keys(seen).length ? "&seen=" + encodeURIComponent(JSON.stringify(seen)) : ""));
    for (const [tag, per] of Object.entries(got)) {
      const dst = state.series[tag] || (state.series[tag] = {});
      for (const [id, d] of Object.entries(per)) dst[id] = d.append && dst[id] ? appendSeries(dst[id], d) : d;
    }
    for (const id of part) { state.fetched.add(id); state.fetchedAt[id] = at[id]; }
    // a live series that grew far past the chart's width is fetched whole (summarised) next time
    for (const per of Object.values(state.series)) for (const id of part) if (per[id] && per[id].step.length > 4 * state.px) state.fetched.delete(id);
  }
  return true;
}

function appendSeries(old, d) {
  const out = { n: d.n, downsampled: old.downsampled || d.downsampled };
  for (const k of ["step", "wall", "value"]) out[k] = old[k].concat(d[k]);
  if (old.min || d.min) {
    out.min = (old.min || old.value).concat(d.min || d.value);
    out.max = (old.max || old.value).concat(d.max || d.value);
  }
  return out;
}

function scalarTags(ids) {
  const keep = tagFilter();
  return Object.keys(state.series).filter((t) => keep(t) && ids.some((id) => state.series[t][id])).sort();
}

async function renderScalars(ids) {
  await fetchSeries(ids);
  const tags = scalarTags(ids);
  const box = $("#charts");
  const groups = new Map();
  for (const tag of tags) { const g = groupOf(tag); if (!groups.has(g)) groups.set(g, []); groups.get(g).push(tag); }
  const sections = [];
  const live = new Set(tags);
  for (const [g, gtags] of [...groups.entries()].sort((a, b) => (a[0] === "" ? -1 : b[0] === "" ? 1 : a[0] < b[0] ? -1 : 1))) {
    let sec = box.querySelector(`details.group[data-group="${CSS.escape(g)}"]`);
    if (!sec) {
      sec = el("details", { class: "group", "data-group": g }, el("summary", {}), el("div", { class: "grid" }));
      sec.open = !state.collapsed.has(g);
      sec.addEventListener("toggle", () => {
        if (sec.open) { state.collapsed.delete(g); redrawScalars(); } else state.collapsed.add(g);
      });
    }
    sec.querySelector("summary").textContent = `${g || "(no prefix)"}  ·  ${gtags.length} chart${gtags.length === 1 ? "" : "s"}`;
    const grid = sec.querySelector(".grid");
    const cards = gtags.map((tag) => state.charts[tag]?.card || scalarCard(tag));
    if (cards.length !== grid.children.length || cards.some((c, i) => grid.children[i] !== c)) grid.replaceChildren(...cards);
    sections.push(sec);
  }
  if (sections.length !== box.children.length || sections.some((s, i) => box.children[i] !== s)) box.replaceChildren(...sections);
  for (const tag of Object.keys(state.charts)) if (!live.has(tag)) { state.charts[tag].u?.destroy(); delete state.charts[tag]; }
  scheduleDraw(tags);
}

function scalarCard(tag) {
  const plot = el("div", { class: "plot" });
  const card = el("div", { class: "card chart", "data-tag": tag },
    el("div", { class: "card-head" }, el("h3", { text: tag, title: tag }),
      el("button", { type: "button", class: "reset", title: "reset zoom (or double-click the chart)", onclick: () => resetZoom(tag) }, "reset zoom"),
      el("button", { type: "button", class: "csv", title: "download this chart's data as CSV", onclick: () => downloadCsv(tag) }, "CSV")),
    plot, el("div", { class: "legend" }));
  state.charts[tag] = { card, u: null, sig: null };
  nearView.observe(card);
  return card;
}

// Charts are drawn in tasks of ~80 ms, the ones in view first: a chart of 50 runs takes 5-30 ms,
// a task over ~200 ms is a freeze the user feels, and each task ends with a paint of the page.
// A chart known to be out of view is marked dirty instead and drawn when it comes within 200 px:
// toggling one run of 50 redraws the few charts on screen, not all 20. body[data-drawn] counts
// the times the queue ran dry, body[data-dirty] is how many charts wait to be scrolled to.
const nearView = new IntersectionObserver((entries) => {
  const now = [];
  for (const e of entries) {
    const c = state.charts[e.target.dataset.tag];
    if (!c || c.card !== e.target) continue;
    c.inView = e.isIntersecting;
    if (c.inView && c.dirty) now.push(e.target.dataset.tag);
  }
  if (now.length) scheduleDraw(now);
}, { rootMargin: "200px 0px" });
let drawQueue = [], drawTimer = null;
function scheduleDraw(tags) {
  const queued = new Set(drawQueue);
  for (const t of tags) if (!queued.has(t)) drawQueue.push(t);
  const H = window.innerHeight;
  const inView = (t) => { const c = state.charts[t]; if (!c) return 1; const r = c.card.getBoundingClientRect(); return r.bottom > 0 && r.top < H ? 0 : 1; };
  drawQueue.sort((a, b) => inView(a) - inView(b));
  if (!drawTimer) drawTimer = setTimeout(drainDraws, 0);
}
function drainDraws() {
  drawTimer = null;
  const t0 = performance.now();
  while (drawQueue.length && performance.now() - t0 < 80) {
    const tag = drawQueue.shift(), c = state.charts[tag];
    if (c && c.inView === false) { c.dirty = true; continue; }
    if (c) c.dirty = false;
    drawScalarCard(tag, state.selected);
  }
  if (drawQueue.length) { drawTimer = setTimeout(drainDraws, 0); return; }
  document.body.dataset.dirty = String(Object.values(state.charts).filter((c) => c.dirty).length);
  document.body.dataset.drawn = String(++state.drawSeq);
}

function redrawScalars() {
  for (const c of Object.values(state.charts)) c.dsig = null;
  scheduleDraw(Object.keys(state.charts));
}

function smooth(values, w) {
  // TensorBoard's debiased exponential moving average; nulls (NaN/inf) are skipped
  const out = []; let last = 0, n = 0;
  for (const v of values) {
    if (v === null) { out.push(null); continue; }
    last = last * w + (1 - w) * v; n++;
    out.push(w > 0 ? last / (1 - Math.pow(w, n)) : v);
  }
  return out;
}

function seriesFor(tag, ids) {
  const data = state.series[tag] || {};
  const w = parseFloat($("#smoothing").value);
  const xmode = $("#xaxis").value;
  return ids.filter((id) => data[id] && data[id].n > 0).map((id) => {
    const d = data[id];
    const t0 = d.wall.length ? d.wall[0] : 0;
    const xs = xmode === "step" ? d.step : xmode === "relative" ? d.wall.map((t) => t - t0) : d.wall;
    return { id, color: colorOf(id), dash: dashOf(id), label: runLabel(runById(id)) || id, x: xs, raw: d.value,
      y: smooth(d.value, w), n: d.n, lo: d.min, hi: d.max, step: d.step, wall: d.wall, downsampled: !!d.downsampled };
  });
}

function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}

//: min/max bands are drawn while at most this many runs share a chart (past that they only blur it)
const MAX_BANDS = 10;

function drawScalarCard(tag, ids) {
  const c = state.charts[tag];
  if (!c) return;
  const card = c.card;
  const plot = card.querySelector(".plot");
  if (!card.isConnected || card.closest("details:not([open])")) return; // drawn when its section opens
  const logY = $("#logscale").checked;
  const xmode = $("#xaxis").value;
  const width = Math.max(200, plot.clientWidth || 400);
  const per = state.series[tag] || {};
  // nothing new for this chart (a run toggled elsewhere, a poll with no new points): nothing to do
  const dsig = JSON.stringify([ids.map((id) => [id, per[id]?.n, per[id]?.step.length, runLabel(runById(id)), colorOf(id)]), logY, xmode, $("#smoothing").value, width]);
  if (c.u && c.dsig === dsig) return;
  c.dsig = dsig;
  const series = seriesFor(tag, ids);
  // few runs: the smoothed line, the raw one faint behind it and the min/max band; many runs: the
  // smoothed line only (the raw value is in the tooltip), else 50 runs are 200 series to draw
  const bandsOn = series.length <= MAX_BANDS;
  const pos = (v) => (v === null || v === undefined ? v : logY && !(v > 0) ? null : v);
  const tables = series.map((s) => [s.x, s.y.map(pos), ...(bandsOn ? [s.raw.map(pos)] : []), ...(s.lo && bandsOn ? [s.lo.map(pos), s.hi.map(pos)] : [])]);
  const data = tables.length ? uPlot.join(tables) : [[]];
  const opts = [{}];
  const bands = [];
  let k = 1;
  for (const s of series) {
    const few = s.x.length <= 2;  // a single point (add_hparams' final metric) needs a marker, not a line
    opts.push({ label: s.label, stroke: s.color, width: 2, spanGaps: false, ...(s.dash ? { dash: s.dash } : {}),
      ...(few ? { points: { show: true, size: 8, fill: s.color } } : {}) });
    k += 1;
    if (bandsOn) {
      opts.push({ label: s.label + " (raw)", stroke: alpha(s.color, 0.3), width: 1, points: { show: false } });
      k += 1;
    }
    if (s.lo && bandsOn) {
      opts.push({ label: "min", stroke: "transparent", points: { show: false } });
      opts.push({ label: "max", stroke: "transparent", points: { show: false } });
      bands.push({ series: [k + 1, k], fill: alpha(s.color, 0.12) });
      k += 2;
    }
  }
  const sig = JSON.stringify([series.map((s) => [s.id, s.label, s.color, s.dash, !!s.lo]), bandsOn, logY, xmode]);
  if (c.u && c.sig === sig) {
    c.u.setData(data, !c.zoomed);  // live updates keep a zoomed view as it is
    if (c.u.width !== width) c.u.setSize({ width, height: 240 });
  } else {
    c.u?.destroy();
    c.zoomed = false;
    c.u = new uPlot({
      width, height: 240, series: opts, bands,
      legend: { show: false },
      padding: [8, 28, 0, 4],  // room on the right: the last x label is never clipped
      cursor: { drag: { x: true, y: false }, focus: { prox: 24 } },
      scales: {
        x: { time: xmode === "wall", range: (u, lo, hi) => (lo === hi ? [lo - 1, hi + 1] : [lo, hi]) },
        y: logY ? { distr: 3, log: 10 } : { range: (u, lo, hi) => (lo === null || hi === null ? [0, 1] : lo === hi ? [lo - 0.5, hi + 0.5] : uPlot.rangeNum(lo, hi, 0.05, true)) },
      },
      axes: [
        { stroke: "#5b6475", grid: { stroke: "#eceef2" }, ticks: { stroke: "#dde1e8" } },
        { stroke: "#5b6475", grid: { stroke: "#eceef2" }, ticks: { stroke: "#dde1e8" }, size: 62,
          values: logY ? (u, splits) => splits.map(logLabel) : (u, splits) => splits.map(fmtNum) },
      ],
      hooks: {
        setCursor: [(u) => showTooltip(u, tag)],
        setSelect: [(u) => { if (u.select.width > 0) c.zoomed = true; }],
      },
    }, data, (plot.replaceChildren(), plot));
    c.u.over.addEventListener("mouseleave", () => hideTooltip(tag));
    c.u.over.addEventListener("dblclick", () => { c.zoomed = false; });
    c.sig = sig;
  }
  c.series = series;
  c.bandsOn = bandsOn;
  const canvas = c.u.ctx.canvas;
  canvas.dataset.tag = tag;
  canvas.dataset.runs = series.map((s) => s.id).join(",");
  canvas.dataset.points = series.map((s) => s.n).join(",");
  canvas.dataset.sent = series.map((s) => s.x.length).join(",");  // points held: at most ~2 per pixel
  card._u = c.u;
  // one line, whatever the number of runs: the values are in the tooltip
  const LEGEND = 8;
  card.querySelector(".legend").replaceChildren(...series.slice(0, LEGEND).map((s) => el("span", { title: s.label },
    el("span", { class: "swatch", style: `background:${s.color}` }),
    `${s.label}  (${s.n} pts${s.downsampled ? ", downsampled" : ""}, last ${fmtNum(s.raw[s.raw.length - 1])})`)),
  ...(series.length > LEGEND ? [el("span", { class: "muted", text: `+${series.length - LEGEND} more: hover for values` })] : []));
}

// log axis labels: 1e-3 … 1e3 as plain numbers inside the usual range, every split labelled
function logLabel(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  return a !== 0 && (a >= 1e4 || a < 1e-3) ? v.toExponential(0) : String(+v.toPrecision(3));
}

function resetZoom(tag) {
  const c = state.charts[tag];
  if (!c || !c.u) return;
  c.zoomed = false;
  c.u.setData(c.u.data, true);
}

//: tooltip rows shown (highest values first); the rest are counted
const TIP_ROWS = 20;

// a crosshair tooltip: every run's value at the cursor's x, highest first, inside the window
function showTooltip(u, tag) {
  const c = state.charts[tag];
  const idx = u.cursor.idx;
  if (idx === null || idx === undefined || !c || !c.series) { hideTooltip(tag); return; }
  const x = u.data[0][idx];
  const xmode = $("#xaxis").value;
  const found = [];
  const tol = ((u.scales.x.max ?? 0) - (u.scales.x.min ?? 0)) / 40;
  for (const s of c.series) {
    // the run's point nearest to the cursor's x (its steps need not be the other runs' steps),
    // if it has one near there: a run that ended earlier is not listed at the end of another
    const j = nearest(s.x, x);
    if (j >= 0 && Math.abs(s.x[j] - x) <= tol) found.push([s.raw[j], s.y[j], s]);
  }
  found.sort((a, b) => (b[0] ?? -Infinity) - (a[0] ?? -Infinity));
  const rows = found.slice(0, TIP_ROWS).map(([v, sm, s]) => el("div", { class: "tip-row" },
    el("span", { class: "swatch", style: `background:${s.color}` }), el("b", { class: "tip-val", text: fmtNum(v) }),
    el("span", { class: "tip-label", text: s.label }), el("span", { class: "muted", text: ` (smoothed ${fmtNum(sm)})` })));
  if (found.length > TIP_ROWS) rows.push(el("div", { class: "muted", text: `… and ${found.length - TIP_ROWS} more` }));
  let tip = c.card.querySelector(".tooltip");
  if (!tip) { tip = el("div", { class: "tooltip" }); c.card.querySelector(".plot").append(tip); }
  const xl = xmode === "wall" ? new Date(x * 1000).toLocaleString() : `${xmode === "step" ? "step" : "t"} ${fmtNum(x)}${xmode === "relative" ? " s" : ""}`;
  tip.replaceChildren(el("b", { text: xl }), ...rows);
  // fixed to the window and kept inside it: right of the cursor, else left; below, else above
  const box = u.over.getBoundingClientRect();
  const cx = box.left + u.cursor.left, cy = box.top + u.cursor.top;
  const w = tip.offsetWidth, h = tip.offsetHeight, W = document.documentElement.clientWidth, H = window.innerHeight;
  let left = cx + 14 + w <= W - 4 ? cx + 14 : cx - 14 - w;
  let top = cy + 10 + h <= H - 4 ? cy + 10 : cy - 10 - h;
  tip.style.left = Math.max(4, Math.min(left, W - w - 4)) + "px";
  tip.style.top = Math.max(4, Math.min(top, H - h - 4)) + "px";
}

// the index of the point of sorted xs nearest to x whose value is not a gap (-1: none near)
function nearest(xs, x) {
  let lo = 0, hi = xs.length - 1;
  if (hi < 0) return -1;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid + 1; else hi = mid; }
  const j = lo > 0 && Math.abs(xs[lo - 1] - x) < Math.abs(xs[lo] - x) ? lo - 1 : lo;
  return j;
}

function hideTooltip(tag) {
  const tip = state.charts[tag]?.card.querySelector(".tooltip");
  if (tip) tip.remove();
}

function downloadCsv(tag) {
  const c = state.charts[tag];
  if (!c) return;
  const series = seriesFor(tag, state.selected);  // what the chart shows, even if it waits to be redrawn
  const q = (s) => `"${String(s).replace(/"/g, '""')}"`;
  const lines = ["run,id,arguments,step,wall_time,value"];
  for (const s of series) {
    const r = runById(s.id) || { id: s.id, hparams: {} };
    s.step.forEach((st, i) => lines.push([s.id, q(idText(r)), q(argText(r.hparams)), st, s.wall[i], s.raw[i] ?? ""].join(",")));
  }
  const a = el("a", { href: URL.createObjectURL(new Blob([lines.join("\n") + "\n"], { type: "text/csv" })),
    download: `${tag.replace(/[^A-Za-z0-9._-]+/g, "_")}.csv` });
  document.body.append(a);
  a.click();
  a.remove();
}

// ---- histograms: a shared x-range per tag; offset ridges or distribution bands ---------------------
async function renderHistograms(ids) {
  const box = $("#histograms");
  const mode = $("#hist-mode").value;
  const sections = [];
  for (const tag of state.tags.histogram || []) {
    const per = (await Promise.all(ids.map((id) => api(`histograms?run=${id}&tag=${encodeURIComponent(tag)}`)))).map((hs, i) => [ids[i], hs]).filter(([, hs]) => hs.length);
    if (!per.length) continue;
    let lo = Infinity, hi = -Infinity;  // one x-range for every run: shapes compare by eye
    for (const [, hs] of per) for (const h of hs) { const m = h.meta; if (!m.num) continue; lo = Math.min(lo, m.left); hi = Math.max(hi, m.limits[m.limits.length - 1]); }
    const cards = per.map(([id, hs]) => {
      const canvas = el("canvas", { "data-tag": tag, "data-run": id, "data-steps": String(hs.length), "data-mode": mode,
        "data-range": `${lo},${hi}` });
      const r = runById(id) || { id, hparams: {} };
      const card = el("div", { class: "card hist" }, el("h3", { title: `${tag} — ${runLabel(r)}` },
        el("span", { class: "swatch", style: `background:${colorOf(id)}` }), runLabel(r)), canvas);
      return [card, canvas, hs, colorOf(id)];
    });
    sections.push([el("section", { class: "tag-group", "data-tag": tag }, el("h2", { class: "tag-title", text: tag }),
      el("div", { class: "grid" }, ...cards.map((c) => c[0]))), cards, lo, hi]);
  }
  box.replaceChildren(...sections.map((s) => s[0]));
  for (const [, cards, lo, hi] of sections) {
    for (const [, canvas, hs, color] of cards) (mode === "offset" ? drawRidges : drawDistribution)(canvas, hs, color, lo, hi);
  }
}

function niceTicks(lo, hi, count) {
  if (!(hi > lo)) { hi = lo + 1; }
  const span = hi - lo, raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

function setupCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const W = canvas.clientWidth || 400, H = canvas.clientHeight || 260;
  canvas.width = W * dpr; canvas.height = H * dpr;
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.font = "11px system-ui, sans-serif";
  return [g, W, H];
}

// TensorBoard's "offset" view: one ridge per step, later steps in front; step labels on the right
function drawRidges(canvas, hs, color, lo, hi) {
  const [g, W, H] = setupCanvas(canvas);
  const pad = { l: 12, r: 70, t: 10, b: 24 };
  if (!isFinite(lo)) return;
  let cmax = 0;
  for (const h of hs) if (h.meta.num) cmax = Math.max(cmax, ...h.meta.counts);
  const n = hs.length, ridge = (H - pad.t - pad.b) * 0.45, gap = n > 1 ? (H - pad.t - pad.b - ridge) / (n - 1) : 0;
  const px = (x) => pad.l + (x - lo) / (hi - lo || 1) * (W - pad.l - pad.r);
  g.fillStyle = "#5b6475"; g.textAlign = "center"; g.textBaseline = "top";
  for (const t of niceTicks(lo, hi, 5)) if (t >= lo && t <= hi) g.fillText(fmtNum(t), px(t), H - pad.b + 4);
  let lastLabel = -Infinity;
  const labels = [];
  hs.forEach((h, k) => {
    const m = h.meta, base = pad.t + ridge + k * gap;
    g.beginPath(); g.moveTo(px(m.left), base);
    let left = m.left;
    m.counts.forEach((c, i) => { const mid = (left + m.limits[i]) / 2; g.lineTo(px(mid), base - c / (cmax || 1) * ridge); left = m.limits[i]; });
    g.lineTo(px(left), base); g.closePath();
    g.globalAlpha = 0.85; g.fillStyle = "#fff"; g.fill(); g.globalAlpha = 0.25 + 0.6 * (k + 1) / n;
    g.strokeStyle = color; g.lineWidth = 1.2; g.stroke(); g.globalAlpha = 1;
    // labels never overlap: one every 13 px at least
    if (base - lastLabel >= 13) {
      const text = `step ${h.step}`;
      g.fillStyle = "#5b6475"; g.textAlign = "left"; g.textBaseline = "middle";
      g.fillText(text, W - pad.r + 6, base);
      labels.push([text, W - pad.r + 6, base, g.measureText(text).width]);
      lastLabel = base;
    }
  });
  canvas.dataset.labels = JSON.stringify(labels);  // what was written where (for tests)
}

// quantiles of a histogram (linear within a bucket), TensorBoard's distribution basis points
const BANDS = [0, 0.0668, 0.1587, 0.3085, 0.5, 0.6915, 0.8413, 0.9332, 1];
function quantiles(m) {
  const total = m.counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const out = [];
  let acc = 0, i = 0, left = m.left;
  for (const q of BANDS) {
    const want = q * total;
    while (i < m.counts.length - 1 && acc + m.counts[i] < want) { acc += m.counts[i]; left = m.limits[i]; i++; }
    const c = m.counts[i] || 1, right = m.limits[i];
    out.push(q === 0 ? m.min ?? m.left : q === 1 ? m.max ?? right : left + (right - left) * Math.min(1, Math.max(0, (want - acc) / c)));
  }
  return out;
}

function drawDistribution(canvas, hs, color, lo, hi) {
  const [g, W, H] = setupCanvas(canvas);
  const pad = { l: 54, r: 16, t: 10, b: 24 };
  const qs = hs.map((h) => [h.step, quantiles(h.meta)]).filter(([, q]) => q);
  if (!qs.length || !isFinite(lo)) return;
  const s0 = qs[0][0], s1 = qs[qs.length - 1][0];
  const px = (s) => pad.l + (s1 === s0 ? 0.5 : (s - s0) / (s1 - s0)) * (W - pad.l - pad.r);
  const py = (v) => H - pad.b - (v - lo) / (hi - lo || 1) * (H - pad.t - pad.b);
  g.strokeStyle = "#eceef2"; g.fillStyle = "#5b6475"; g.textAlign = "right"; g.textBaseline = "middle";
  for (const t of niceTicks(lo, hi, 5)) {
    if (t < lo || t > hi) continue;
    g.beginPath(); g.moveTo(pad.l, py(t)); g.lineTo(W - pad.r, py(t)); g.stroke(); g.fillText(fmtNum(t), pad.l - 4, py(t));
  }
  g.textAlign = "center"; g.textBaseline = "top";
  for (const t of niceTicks(s0, s1 === s0 ? s0 + 1 : s1, 5)) if (t >= s0 && t <= s1) g.fillText(fmtNum(t), px(t), H - pad.b + 4);
  for (let b = 0; b < 4; b++) {  // outer band first, the median's neighbours darkest
    g.beginPath();
    qs.forEach(([s, q], i) => (i ? g.lineTo(px(s), py(q[b])) : g.moveTo(px(s), py(q[b]))));
    for (let i = qs.length - 1; i >= 0; i--) g.lineTo(px(qs[i][0]), py(qs[i][1][8 - b]));
    g.closePath(); g.fillStyle = alpha(color, 0.12 + 0.1 * b); g.fill();
  }
  g.beginPath(); g.strokeStyle = color; g.lineWidth = 1.5;
  qs.forEach(([s, q], i) => (i ? g.lineTo(px(s), py(q[4])) : g.moveTo(px(s), py(q[4]))));
  g.stroke();
  if (qs.length === 1) { g.fillStyle = color; g.fillRect(px(qs[0][0]) - 3, py(qs[0][1][4]) - 3, 6, 6); }
}

// ---- images and text: grouped by tag across runs, one step slider per tag ------------------------
async function renderImages(ids) {
  await renderByTag($("#images"), "image", ids, (id, tag) => api(`images?run=${id}&tag=${encodeURIComponent(tag)}`),
    (it, tag) => el("img", { src: `/api/image/${it.id}`, alt: `${tag} step ${it.step}` }), "imgbox");
}

async function renderTexts(ids) {
  await renderByTag($("#texts"), "text", ids, (id, tag) => api(`texts?run=${id}&tag=${encodeURIComponent(tag)}`),
    (it) => markdown(it.text), "textbox");
}

// Logged text is markdown (TensorBoard renders it so). Raw HTML inside it is shown as text, not
// parsed; what marked makes is sanitised again by DOMPurify into a DOM fragment (never innerHTML
// of logged text), and the page's Content-Security-Policy forbids inline script besides.
const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
if (window.marked) marked.use({ renderer: { html: (token) => escapeHtml(token.text ?? token.raw ?? "") } });

function markdown(text) {
  const box = el("div", { class: "md" });
  if (window.marked && window.DOMPurify) {
    box.append(DOMPurify.sanitize(marked.parse(text, { gfm: true, breaks: true }), { RETURN_DOM_FRAGMENT: true }));
  } else {
    box.append(el("pre", { text }));
  }
  return box;
}

async function renderByTag(box, kind, ids, fetchItems, render, cls) {
  const sections = [];
  for (const tag of state.tags[kind] || []) {
    const per = (await Promise.all(ids.map((id) => fetchItems(id, tag)))).map((items, i) => [ids[i], items]).filter(([, items]) => items.length);
    if (!per.length) continue;
    const steps = [...new Set(per.flatMap(([, items]) => items.map((it) => it.step)))].sort((a, b) => a - b);
    const slider = el("input", { type: "range", min: "0", max: String(steps.length - 1), step: "1", value: String(steps.length - 1), class: "step-slider" });
    const label = el("span", { class: "muted" });
    const cells = per.map(([id, items]) => {
      const view = el("div", { class: cls });
      const r = runById(id) || { id, hparams: {} };
      const note = el("div", { class: "muted small" });
      return [el("div", { class: "cell", "data-run": String(id) }, el("div", { class: "cell-title", title: runLabel(r) },
        el("span", { class: "swatch", style: `background:${colorOf(id)}` }), runLabel(r)), note, view), items, view, note];
    });
    const show = () => {
      const step = steps[+slider.value];
      label.textContent = ` step ${step} (${+slider.value + 1}/${steps.length})`;
      for (const [, items, view, note] of cells) {
        // the run's latest item at or before the chosen step
        let it = null;
        for (const x of items) if (x.step <= step) it = x;
        note.textContent = it ? (it.step === step ? "" : `(step ${it.step})`) : "(nothing yet)";
        view.replaceChildren(...(it ? [render(it, tag)] : []));
      }
    };
    slider.addEventListener("input", show);
    const sec = el("section", { class: "card tag-group", "data-tag": tag }, el("h3", { class: "tag-title", text: tag }),
      el("div", {}, slider, label), el("div", { class: "cells" }, ...cells.map((c) => c[0])));
    show();
    sections.push(sec);
  }
  box.replaceChildren(...sections);
}

// ---- hparams: arguments (in the order the function takes them) vs final metrics, sortable -------------
async function renderHparams() {
  if (!state.fn) return;
  const data = await api("hparams?fn=" + encodeURIComponent(state.fn));
  state.hpData = data;
  drawHparams();
}

function drawHparams() {
  const data = state.hpData;
  if (!data) return;
  // argument order as the function declares it (the order of each run's arguments), not alphabetical
  const order = [];
  const seen = new Set();
  for (const r of data.rows) for (const k of Object.keys(r.hparams || {})) if (!seen.has(k)) { seen.add(k); order.push(k); }
  const constant = (get) => { const vals = new Set(data.rows.map((r) => JSON.stringify(get(r) ?? null))); return vals.size <= 1 && data.rows.length > 1; };
  const hpCols = order.map((k) => [k, (r) => r.hparams[k], "arg"]);
  const rank = (t) => (t.startsWith("train/") ? 0 : t.startsWith("val/") ? 1 : 2);
  data.metrics.sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : 1));  // as the runs table: train/, val/ first
  const hidden = state.hpConst ? [] : hpCols.filter(([, get]) => constant(get)).map(([k]) => k);
  const cols = [["status", (r) => r.status], ["id", (r) => r.eval_id || null], ["code", (r) => (r.code || "").slice(0, 8)],
    ...hpCols.filter(([k]) => !hidden.includes(k)), ...data.metrics.map((k) => ["⟶ " + k, (r) => r.metrics[k], "metric"])];
  $("#hp-const").textContent = hidden.length ? `show ${hidden.length} constant column(s): ${hidden.join(", ")}`.slice(0, 120) : state.hpConst ? "hide constant columns" : "";
  const { key, dir } = state.hpSort;
  const rows = [...data.rows];
  const col = cols.find((c) => c[0] === key);
  if (col) {
    const get = col[1];
    rows.sort((a, b) => {
      const x = get(a), y = get(b);
      if (x === y) return 0; if (x === undefined || x === null) return 1; if (y === undefined || y === null) return -1;
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x) < String(y) ? -1 : 1) * dir;
    });
  }
  $("#hparams thead").replaceChildren(el("tr", {}, ...cols.map(([label]) => el("th", {
    "data-col": label, text: label + (label === key ? (dir > 0 ? " ▲" : " ▼") : ""),
    onclick: () => { state.hpSort = { key: label, dir: state.hpSort.key === label ? -state.hpSort.dir : 1 }; drawHparams(); },
  }))));
  state.hpRows = rows;
  state.hpCols = cols;
  renderHpRows();
  drawParallel(data, hpCols.filter(([, get]) => !constant(get)), key && key.startsWith("⟶ ") ? key.slice(2) : null);
}

// like the runs table, only the rows in view are in the DOM (10,000 evaluations scroll like 50)
function renderHpRows() {
  const wrap = $("#hparams-wrap"), rows = state.hpRows || [], cols = state.hpCols || [];
  virtualRows(wrap, $("#hparams tbody"), rows, cols.length, (r) => el("tr", { "data-run": String(r.id) },
    ...cols.map(([label, get, kind], i) => {
      const v = get(r);
      const text = i === 1 ? idText({ ...r, stored: !!r.eval_id }) : kind === "arg" ? fmtArg(v) : typeof v === "number" ? fmtNum(v) : v === undefined ? "–" : String(v);
      return el("td", { text, class: kind === "metric" || typeof v === "number" ? "num" : "" });
    })));
}

// Parallel coordinates (as TensorBoard's HParams plugin): one axis per argument that varies, then
// the metric (the sorted metric column, else the first val/ or train/ one); one line per run,
// coloured by that metric (blue low, red high). Numbers on a linear axis (log when positive and
// spread over more than two decades), anything else as evenly spaced categories.
function drawParallel(data, argCols, metric) {
  const canvas = $("#parcoords");
  const metrics = data.metrics;
  metric = metric || metrics.find((m) => m.startsWith("val/")) || metrics.find((m) => m.startsWith("train/")) || metrics[0];
  const axes = [...argCols.map(([k, get]) => [k, get]), ...(metric ? [["⟶ " + metric, (r) => r.metrics[metric]]] : [])];
  canvas.classList.toggle("hidden", axes.length < 2 || data.rows.length < 2);
  canvas.dataset.axes = axes.map((a) => a[0]).join("|");
  if (canvas.classList.contains("hidden")) return;
  const [g, W, H] = setupCanvas(canvas);
  const pad = { l: 30, r: 60, t: 28, b: 22 };
  const scales = axes.map(([, get]) => {
    const vals = data.rows.map(get).filter((v) => v !== undefined && v !== null);
    if (vals.length && vals.every((v) => typeof v === "number")) {
      const lo = Math.min(...vals), hi = Math.max(...vals);
      const log = lo > 0 && hi / lo > 100;
      const f = log ? Math.log10 : (v) => v;
      return { lo, hi, at: (v) => typeof v !== "number" ? null : hi === lo ? 0.5 : (f(v) - f(lo)) / (f(hi) - f(lo)) };
    }
    const cats = [...new Set(vals.map((v) => fmtArg(v)))].sort();
    return { cats, at: (v) => v === undefined || v === null ? null : cats.length === 1 ? 0.5 : cats.indexOf(fmtArg(v)) / (cats.length - 1) };
  });
  const x = (i) => pad.l + (axes.length === 1 ? 0 : i / (axes.length - 1)) * (W - pad.l - pad.r);
  const y = (t) => H - pad.b - t * (H - pad.t - pad.b);
  const m = scales[scales.length - 1], mget = axes[axes.length - 1][1];
  const rows = data.rows.length > 3000 ? data.rows.filter((r, i) => i % Math.ceil(data.rows.length / 3000) === 0) : data.rows;
  g.lineWidth = 1;
  for (const r of rows) {
    const t = metric ? m.at(mget(r)) : null;
    g.strokeStyle = t === null ? "rgba(120,120,120,0.35)" : `hsla(${240 - 240 * t}, 75%, 45%, 0.55)`;
    g.beginPath();
    let pen = false;
    axes.forEach(([, get], i) => {
      const v = scales[i].at(get(r));
      if (v === null) { pen = false; return; }
      if (pen) g.lineTo(x(i), y(v)); else g.moveTo(x(i), y(v));
      pen = true;
    });
    g.stroke();
  }
  g.fillStyle = "#1d2330"; g.strokeStyle = "#5b6475"; g.textAlign = "center"; g.textBaseline = "alphabetic";
  axes.forEach(([label], i) => {
    g.beginPath(); g.moveTo(x(i), y(0)); g.lineTo(x(i), y(1)); g.stroke();
    g.fillText(label.length > 22 ? label.slice(0, 21) + "…" : label, x(i), 14);
    const s = scales[i];
    const ends = s.cats ? [s.cats[0], s.cats[s.cats.length - 1]] : [s.lo, s.hi].map(i < argCols.length ? fmtArg : fmtNum);
    g.fillStyle = "#5b6475";
    g.fillText(ends[1] ?? "", x(i), y(1) - 3);
    g.fillText(ends[0] ?? "", x(i), H - 6);
    g.fillStyle = "#1d2330";
  });
}

// ---- code diff between two stored evaluations: always older -> newer --------------------------------
async function compareCode() {
  const pair = state.selected.map(runById).filter((r) => r && r.eval_id && r.stored);
  const [a, b] = pair.sort((x, y) => (x.finished || x.started) - (y.finished || y.started));
  showTab("diff");
  const d = await api(`diff?a=${a.eval_id}&b=${b.eval_id}`);
  const box = $("#diff");
  box.classList.remove("muted");
  const head = el("p", { class: "diff-head" }, el("b", { text: `#${a.eval_id}` }), ` (${fmtTime(a.finished || a.started)}, older) → `,
    el("b", { text: `#${b.eval_id}` }), ` (${fmtTime(b.finished || b.started)}, newer)`);
  if (d.same) { box.replaceChildren(head, el("p", { text: `Evaluations #${a.eval_id} and #${b.eval_id} ran the same code.` })); return; }
  box.replaceChildren(head, ...d.changes.map((c) => el("div", { class: "card" }, el("h3", { text: `${c.symbol} (${c.status})` }),
    el("pre", {}, ...c.diff.split("\n").map((l) => el("span", {
      class: l.startsWith("@@") ? "hunk" : l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : "",
      text: l + "\n" }))))));
}

// ---- live refresh: a cheap heartbeat every 2 s; more only when something changed -----------------
// An idle page (nothing running) asks /api/heartbeat and nothing else. A run starting or ending,
// an evaluation stored or hit, reloads the functions and the runs; a selected running run that
// wrote since its series were fetched gets only its new points.
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
    }
    if (!state.fn) return;
    const stale = state.selected.some((id) => isStale(id, state.tab === "scalars" ? "" : "o"));
    if (state.tab === "scalars" ? stale : state.tab === "hparams" ? hb.sig !== prev?.sig : stale) await refreshTab();
  } catch (e) { console.error(e); }
}

async function init() {
  const info = await api("info");
  $("#store").textContent = info.store;
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#fn-filter").addEventListener("input", loadFunctions);
  $("#tag-filter").addEventListener("input", () => { saveUrl(); refreshTab(); });
  $("#run-filter").addEventListener("input", renderRuns);
  $("#runs-wrap").addEventListener("scroll", () => { if (!state.rowFrame) state.rowFrame = requestAnimationFrame(() => { state.rowFrame = null; renderRows(); }); });
  $("#smoothing").addEventListener("input", () => { $("#smoothing-val").textContent = (+$("#smoothing").value).toFixed(2); redrawScalars(); });
  $("#xaxis").addEventListener("change", redrawScalars);
  $("#logscale").addEventListener("change", redrawScalars);
  $("#hist-mode").addEventListener("change", () => refreshTab());
  $("#select-none").addEventListener("click", () => setSelection([]));
  $("#select-all").addEventListener("click", selectAll);
  $("#metric-stat").addEventListener("change", () => {
    state.stat = $("#metric-stat").value;
    if (state.stat !== "last" && !state.statsMinmax) loadStats(); else renderRuns();
  });
  $("#hp-const").addEventListener("click", () => { state.hpConst = !state.hpConst; drawHparams(); });
  $("#hparams-wrap").addEventListener("scroll", () => { if (!state.hpFrame) state.hpFrame = requestAnimationFrame(() => { state.hpFrame = null; renderHpRows(); }); });
  $("#compare-code").addEventListener("click", compareCode);
  window.addEventListener("resize", () => { redrawScalars(); renderRows(); });
  const url = new URLSearchParams(location.search);
  if (url.get("tags")) $("#tag-filter").value = url.get("tags");
  state.hb = await api("heartbeat");
  const fns = await loadFunctions();
  // open on what was asked for, else on the most recently run memoized function (not a script's process run)
  const memoized = fns.filter((f) => !isProcess(f.fn)).sort((a, b) => (b.last || 0) - (a.last || 0));
  const wanted = url.get("fn") || (memoized[0] || fns[0] || {}).fn;
  if (wanted) {
    state.selected = (url.get("runs") || "").split(",").filter(Boolean);
    state.autoSelect = !url.has("runs");  // a shared or reloaded view keeps its selection, even an empty one
    await selectFunction(wanted, true);
  }
  const tab = url.get("tab");
  if (tab && document.querySelector(`#tabs button[data-tab="${CSS.escape(tab)}"]`)) showTab(tab);
  saveUrl();  // also drops an access token from the address bar: the cookie carries it from here on
  document.body.dataset.ready = "1";
  setInterval(poll, 2000);
}

init();
