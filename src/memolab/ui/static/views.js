// memolab dashboard: how a sweep is read (loaded before app.js; its globals state, $, el, runById,
// metricValue... are resolved when these functions run).
//
// * The view in the URL: function, selection, tab, tag and run filters, smoothing, x axis, log y,
//   grouping, metric directions, the run page, the HParams pick of metrics and columns (a view can
//   be shared and survives a reload).
// * The run filter narrows the charts as well as the table: what is drawn is the selection that
//   passes the filter (shownIds).
// * The best run of a metric: lower is better for loss-, error- and perplexity-like tags, higher
//   for the others (tracking/names.lower_is_better is the same rule), changeable per column.
// * Groups: runs grouped by an argument or a name pattern, drawn as each group's mean with a
//   min-max or +-std band, as W&B and Aim do.
"use strict";

// ---- the view in the URL -----------------------------------------------------------------------
function saveUrl() {
  const p = new URLSearchParams();
  // the function as `memolab ls` prints it (a.py:train: its label names the script too), which
  // every command takes back; a symbol and a script only where no entry labels them
  const entry = currentEntry();
  if (entry && entry.label) p.set("fn", entry.label);
  else {
    if (state.fn) p.set("fn", state.fn);
    if (state.script !== null && state.script !== undefined) p.set("script", state.script);
  }
  p.set("runs", state.selected.join(","));  // present even when empty: a reload must not auto-select
  if (state.tab !== "scalars") p.set("tab", state.tab);
  const put = (k, v, dflt) => { if (v !== undefined && v !== null && String(v) !== String(dflt)) p.set(k, v); };
  put("tags", $("#tag-filter").value, "");
  put("q", $("#run-filter").value, "");
  put("smooth", (+$("#smoothing").value).toFixed(2), "0.60");
  put("x", $("#xaxis").value, "step");
  put("logy", $("#logscale").checked ? "1" : "", "");
  put("group", state.group.by, "");
  put("gpat", state.group.by === "pattern" ? state.group.pattern : "", "");
  put("band", state.group.band, "minmax");
  put("grouped", state.group.by && !state.group.on ? "0" : "", "");
  put("gcode", state.group.by && state.group.perCode ? "1" : "", "");
  put("stat", state.stat, "last");
  put("dirs", Object.entries(state.dirs).map(([t, d]) => `${t}:${d}`).join(","), "");
  put("run", state.page || "", "");
  // the HParams pick: the metric axes in order ("" none; absent: automatic), the hidden columns
  if (state.hpAxes) { if (!state.hpAxes.length) p.set("hpm", ""); for (const m of state.hpAxes) p.append("hpm", m); }
  for (const k of state.hpHide || []) p.append("hph", k);
  put("pby", state.pipe ? state.pipe.by : "", "");  // the pipeline's sweeps: one node per ...
  const q = p.toString();
  history.replaceState(null, "", q ? "?" + q : location.pathname);
}

// the controls as the URL says (before the first draw)
function restoreView(url) {
  if (url.get("tags")) $("#tag-filter").value = url.get("tags");
  if (url.get("q")) $("#run-filter").value = url.get("q");
  const sm = parseFloat(url.get("smooth"));
  if (sm >= 0 && sm <= 0.99) { $("#smoothing").value = String(sm); $("#smoothing-val").textContent = sm.toFixed(2); }
  if (["step", "relative", "wall"].includes(url.get("x"))) $("#xaxis").value = url.get("x");
  $("#logscale").checked = url.get("logy") === "1";
  state.group.by = url.get("group") || "";
  state.group.pattern = url.get("gpat") || "";
  state.group.band = ["minmax", "std", "none"].includes(url.get("band")) ? url.get("band") : "minmax";
  state.group.on = url.get("grouped") !== "0";
  state.group.perCode = url.get("gcode") === "1";
  if (["last", "min", "max"].includes(url.get("stat"))) { state.stat = url.get("stat"); $("#metric-stat").value = state.stat; }
  state.dirs = {};
  for (const part of (url.get("dirs") || "").split(",")) {
    const i = part.lastIndexOf(":");
    if (i > 0 && ["min", "max"].includes(part.slice(i + 1))) state.dirs[part.slice(0, i)] = part.slice(i + 1);
  }
  state.page = url.get("run") || null;
  state.hpAxes = url.has("hpm") ? url.getAll("hpm").filter(Boolean) : null;
  state.hpHide = new Set(url.getAll("hph").filter(Boolean));
  if (url.get("pby")) pipeState().by = url.get("pby");
  syncGroupControls();
}

// ---- the run filter, on the table and the charts ------------------------------------------------
// words, all of which must match: `status:failed`, `tag:baseline`, `lr=0.1` (or != < > <= >= on an
// argument), or a regex over the label, arguments, tags and status
function compileFilter() {
  const src = $("#run-filter").value.trim();
  $("#run-filter").style.borderColor = "";
  state.srvFilter = src ? serverFilter(src.split(/\s+/)) : null;
  if (!src) { state.filter = null; return; }
  const preds = src.split(/\s+/).map((tok) => {
    let m = tok.match(/^status:(\S+)$/);
    if (m) return (r) => r.status.startsWith(m[1]);
    m = tok.match(/^tag:(\S+)$/);
    if (m) return (r) => (r.run_tags || []).includes(m[1]);
    m = tok.match(/^code:([0-9a-fA-F]+)$/);  // a code version by the start of its digest, as the table shows it
    if (m) return (r) => !!r.code && r.code.toLowerCase().startsWith(m[1].toLowerCase());
    m = tok.match(/^([\w.\/-]+)(<=|>=|!=|=|<|>)(.+)$/);
    if (m) {
      const [, k, op, want] = m;
      return (r) => {
        const v = (r.hparams || {})[k];
        if (v === undefined || v === null) return op === "!=";  // (null: no value, as the sort and the server have it)
        const a = typeof v === "number" ? v : fmtArg(v), b = typeof v === "number" ? +want : want;
        return op === "=" ? a === b || fmtArg(v) === want : op === "!=" ? a !== b && fmtArg(v) !== want
          : op === "<" ? a < b : op === ">" ? a > b : op === "<=" ? a <= b : a >= b;
      };
    }
    let re = null;
    try { re = new RegExp(tok, "i"); } catch (e) { $("#run-filter").style.borderColor = "red"; }
    return (r) => !re || re.test(`${runLabel(r)} ${r.name || ""} ${argText(r.hparams)} ${(r.run_tags || []).join(" ")} ${r.status}`);
  });
  state.filter = (r) => preds.every((p) => p(r));
}
function runFilter() { return state.filter; }

// The filter words as the server's query (/api/runs: the same meaning, over every run of the
// function, paged), or null where a word is one only the page can apply (a regex over the labels,
// two tags): then the page filters the newest RUN_WINDOW runs itself, as it did every filter.
const STATUSES = ["running", "done", "failed", "interrupted", "lost"];
function serverFilter(words) {
  const q = [];
  let statuses = null, tags = 0;
  for (const tok of words) {
    let m = tok.match(/^status:(\S+)$/);
    if (m) { const s = STATUSES.filter((x) => x.startsWith(m[1])); statuses = statuses ? statuses.filter((x) => s.includes(x)) : s; continue; }
    m = tok.match(/^tag:(\S+)$/);
    if (m) { if (++tags > 1) return null; q.push("tag=" + encodeURIComponent(m[1])); continue; }
    m = tok.match(/^code:([0-9a-fA-F]+)$/);
    if (m) { q.push("code=" + m[1]); continue; }
    if (/^([\w.\/-]+)(<=|>=|!=|=|<|>)(.+)$/.test(tok)) { q.push("arg=" + encodeURIComponent(tok)); continue; }
    return null;
  }
  // (no status passes every status word: a status no run has)
  if (statuses) q.push(...(statuses.length ? statuses : ["none"]).map((s) => "status=" + s));
  return q.length ? "&" + q.join("&") : "";
}

// what the charts draw: the selected runs that pass the filter
function shownIds() {
  const keep = state.filter;
  if (!keep) return state.selected.slice();
  return state.selected.filter((id) => { const r = runById(id); return r && keep(r); });
}

// ---- which way is better -------------------------------------------------------------------------
const LOWER_ANYWHERE = ["loss", "error", "perplexity"];
const LOWER_WORDS = new Set(["err", "ppl", "mse", "mae", "rmse", "nll", "wer", "cer", "fid", "cost", "regret", "latency", "distance"]);
function lowerByName(tag) {
  const t = tag.toLowerCase();
  return LOWER_ANYWHERE.some((w) => t.includes(w)) || t.split(/[^a-z0-9]+/).some((w) => LOWER_WORDS.has(w));
}
function lowerIsBetter(tag) { return state.dirs[tag] ? state.dirs[tag] === "min" : lowerByName(tag); }
const isSysTag = (t) => t.startsWith("sys/");
function toggleDirection(tag) {
  const now = lowerIsBetter(tag) ? "max" : "min";
  if ((now === "min") === lowerByName(tag)) delete state.dirs[tag]; else state.dirs[tag] = now;
  saveUrl();
  renderRuns();
  redrawScalars();
}
// a is better than b (numbers; null/NaN never better)
function better(tag, a, b) {
  if (a === null || a === undefined || Number.isNaN(a)) return false;
  if (b === null || b === undefined || Number.isNaN(b)) return true;
  return lowerIsBetter(tag) ? a < b : a > b;
}
// the best of these runs by the value the columns show (last, min or max), or null
function bestOf(tag, ids) {
  if (isSysTag(tag)) return null;
  let best = null, bv = null;
  for (const id of ids) {
    const r = runById(id);
    const v = r ? metricValue(r, tag) : undefined;
    if (better(tag, v, bv)) { best = String(id); bv = v; }
  }
  return best;
}

// ---- groups --------------------------------------------------------------------------------------
// by an argument (`lr`) or by a pattern over the run's label (`seed=\d+`: the part it matches, or
// its first capture group); each group drawn as its mean with a min-max or +-std band
//: the group-by key of a run's code version (not an argument's name: an argument may be called "code")
const BY_CODE = "@code";
function groupKey(r) {
  const g = state.group;
  if (g.by === BY_CODE) return r.code ? `code ${r.code.slice(0, 7)}` : "(no code version)";
  if (g.by === "pattern") {
    let re = null;
    try { re = new RegExp(g.pattern); } catch (e) { return "(bad pattern)"; }
    const m = `${runLabel(r)} ${r.name || ""}`.match(re);
    return m ? (m[1] !== undefined ? m[1] : m[0]) : "(no match)";
  }
  const v = (r.hparams || {})[g.by];
  return v === undefined ? "(none)" : `${g.by}=${fmtArg(v)}`;
}
function grouping() { return !!(state.group.by && state.group.on && (state.group.by !== "pattern" || state.group.pattern)); }

// ids -> [{key, ids}] in a stable order (numbers as numbers)
function groupsOf(ids) {
  const m = new Map();
  for (const id of ids) {
    const r = runById(id);
    if (!r) continue;
    const k = groupKey(r);
    if (!m.has(k)) m.set(k, []);
    m.get(k).push(id);
  }
  // "per code version": a group whose runs span code versions is split by version, so a band is
  // read per version and no two codes are averaged (a group of one version keeps its name)
  if (state.group.perCode && state.group.by !== BY_CODE) {
    for (const [k, gids] of [...m.entries()]) {
      const codes = codeVersions(gids);
      if (codes.length < 2) continue;
      m.delete(k);
      for (const [c] of codes) m.set(`${k} · code ${c.slice(0, 7)}`, gids.filter((id) => runById(id)?.code === c));
      const none = gids.filter((id) => !runById(id)?.code);
      if (none.length) m.set(`${k} · (no code version)`, none);
    }
  }
  const num = (k) => { const x = parseFloat(k.slice(k.indexOf("=") + 1)); return Number.isFinite(x) ? x : null; };
  return [...m.entries()].sort(([a], [b]) => {
    const x = num(a), y = num(b);
    return x !== null && y !== null && x !== y ? x - y : a < b ? -1 : a > b ? 1 : 0;
  }).map(([key, gids]) => ({ key, ids: gids }));
}

// A group's series: its members' raw values (at their own x) linearly interpolated onto one grid
// (the union of their x, or ~1 point a pixel when that is finer than the chart), then the mean, the
// min and max and the standard deviation where at least one member has a value; smoothed as a run's.
function aggregate(members, px, w) {
  let xs = [];
  for (const s of members) for (const x of s.x) xs.push(x);
  xs.sort((a, b) => a - b);
  const grid = [];
  for (const x of xs) if (!grid.length || x !== grid[grid.length - 1]) grid.push(x);
  let at = grid;
  if (grid.length > 2 * px) {
    const lo = grid[0], hi = grid[grid.length - 1];
    at = Array.from({ length: px + 1 }, (_, i) => lo + (hi - lo) * i / px);
  }
  const sum = new Float64Array(at.length), sq = new Float64Array(at.length), cnt = new Int32Array(at.length);
  const mn = new Array(at.length).fill(null), mx = new Array(at.length).fill(null);
  for (const s of members) {
    const x = s.x, v = s.raw;
    let j = 0;
    for (let i = 0; i < at.length; i++) {
      const t = at[i];
      if (t < x[0] || t > x[x.length - 1]) continue;  // no extrapolation: a shorter run ends where it ends
      while (j < x.length - 1 && x[j + 1] < t) j++;
      let val;
      if (x[j] === t || j === x.length - 1) val = v[j];
      else if (x[j + 1] === t) val = v[j + 1];
      else {
        const a = v[j], b = v[j + 1];
        val = a === null || b === null ? null : a + (b - a) * (t - x[j]) / (x[j + 1] - x[j]);
      }
      if (val === null || val === undefined || !Number.isFinite(val)) continue;
      sum[i] += val; sq[i] += val * val; cnt[i]++;
      if (mn[i] === null || val < mn[i]) mn[i] = val;
      if (mx[i] === null || val > mx[i]) mx[i] = val;
    }
  }
  const mean = [], sd = [], n = [];
  for (let i = 0; i < at.length; i++) {
    const c = cnt[i];
    n.push(c);
    if (!c) { mean.push(null); sd.push(null); continue; }
    const m = sum[i] / c;
    mean.push(m);
    sd.push(Math.sqrt(Math.max(0, sq[i] / c - m * m)));
  }
  const band = state.group.band;
  const lo = band === "std" ? mean.map((m, i) => (m === null ? null : m - sd[i])) : mn;
  const hi = band === "std" ? mean.map((m, i) => (m === null ? null : m + sd[i])) : mx;
  return { x: at, raw: mean, y: smooth(mean, w), lo: band === "none" ? null : smooth(lo, w), hi: band === "none" ? null : smooth(hi, w),
    min: mn, max: mx, sd, count: n };
}

// the charts' group series for a tag (each: id "g:<key>", the group's runs, its aggregate)
function groupSeriesFor(tag, ids) {
  const runs = seriesFor(tag, ids);
  const byId = new Map(runs.map((s) => [s.id, s]));
  const w = parseFloat($("#smoothing").value);
  const px = Math.max(100, state.px || 500);
  return groupsOf(ids).map((g, i) => {
    const members = g.ids.map((id) => byId.get(id)).filter(Boolean);
    if (!members.length) return null;
    const a = aggregate(members, px, w);
    // a group whose runs span code versions averages runs of different code (8 ReLU and 2 GELU runs
    // as one "adam"): said in its label, with how many runs each version has
    const codes = codeVersions(g.ids);
    const mixed = codes.length > 1 ? ` ⚠ ${codes.length} code versions: ${codes.map(([c, n]) => `${c.slice(0, 7)}×${n}`).join(", ")}` : "";
    return { id: "g:" + g.key, group: g, members, color: COLORS[i % COLORS.length], dash: DASHES[Math.floor(i / COLORS.length) % DASHES.length],
      label: `${g.key} (${members.length} run${members.length === 1 ? "" : "s"})${mixed}`, x: a.x, y: a.y, raw: a.raw, lo: a.lo, hi: a.hi,
      agg: a, n: members.reduce((k, s) => k + s.n, 0), step: a.x, downsampled: false, codes: codes.length };
  }).filter(Boolean);
}

// [code, runs] of these runs' code versions, the most runs first
function codeVersions(ids) {
  const n = new Map();
  for (const id of ids) { const c = runById(id)?.code; if (c) n.set(c, (n.get(c) || 0) + 1); }
  return [...n.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
}

// the groups' best by their mean of the value the columns show
function bestGroup(tag, series) {
  if (isSysTag(tag)) return null;
  let best = null, bv = null;
  for (const s of series) {
    const vals = s.group.ids.map((id) => metricValue(runById(id) || {}, tag)).filter((v) => typeof v === "number" && Number.isFinite(v));
    const v = vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : null;
    if (better(tag, v, bv)) { best = s.id; bv = v; }
  }
  return best;
}

// Grouped by an argument: each group's count and the mean, min and max of the primary metric's final
// value over every run of the function (/api/groups: SQLite's, not the runs the page holds)
function loadGroupStats() {
  const box = $("#group-stats"), by = state.group.by, tag = state.primary || metricTags().shown[0];
  if (!box) return;
  if (!state.fn || !by || by === "pattern" || by === BY_CODE || !tag) { box.classList.add("hidden"); return; }
  const fn = state.fn, which = state.script === null || state.script === undefined ? "" : state.script === "" ? "&none=1" : "&script=" + encodeURIComponent(state.script);
  const seq = state.groupSeq = (state.groupSeq || 0) + 1;  // (an older answer, of another tag, come last is dropped)
  api(`groups?fn=${encodeURIComponent(fn)}${which}&by=${encodeURIComponent(by)}&tag=${encodeURIComponent(tag)}`).then((g) => {
    if (seq !== state.groupSeq || state.fn !== fn || state.group.by !== by) return;
    let best = null;
    for (const x of g.groups) if (better(tag, x.mean, best === null ? null : best.mean)) best = x;
    box.querySelector("thead").replaceChildren(el("tr", {}, ...[by, "runs", `n (${tag})`, "mean", "min", "max"].map((t) => el("th", { text: t }))));
    box.querySelector("tbody").replaceChildren(...g.groups.map((x) => el("tr", { class: x === best ? "best" : "", "data-group": x.value === null ? "" : fmtArg(x.value) },
      el("td", { text: x.value === null ? "(none)" : fmtArg(x.value) }), el("td", { class: "num", text: String(x.runs) }),
      el("td", { class: "num", text: String(x.n) }), ...[x.mean, x.min, x.max].map((v) => el("td", { class: "num", text: fmtNum(v) }))),
      ...(g.total > g.groups.length ? [el("tr", { class: "more" }, el("td", { colspan: "6", class: "muted", text: `the first ${g.groups.length} of ${g.total} groups` }))] : [])));
    box.dataset.tag = tag;
    box.classList.remove("hidden");
  }).catch((e) => console.error(e));
}

// the controls of grouping: an argument that varies, or a name pattern; the band; grouped or not
function syncGroupControls() {
  const sel = $("#group-by");
  if (!sel) return;
  const keys = state.runs && state.runs.length ? varyingKeys() : [];
  const want = ["", ...keys, BY_CODE, "pattern"];
  if (state.group.by && !want.includes(state.group.by)) want.splice(want.length - 1, 0, state.group.by);
  const text = (k) => (k === "" ? "none" : k === "pattern" ? "name pattern…" : k === BY_CODE ? "code version" : k);
  sel.replaceChildren(...want.map((k) => el("option", { value: k, text: text(k) })));
  sel.value = state.group.by;
  $("#group-pattern").classList.toggle("hidden", state.group.by !== "pattern");
  $("#group-pattern").value = state.group.pattern;
  $("#group-band").value = state.group.band;
  $("#group-on").checked = state.group.on;
  $("#group-on").disabled = !state.group.by;
  $("#group-code").checked = !!state.group.perCode;
  $("#group-code").disabled = !state.group.by || state.group.by === BY_CODE;
}

function initGroupControls() {
  const changed = () => { syncGroupControls(); saveUrl(); redrawScalars(); loadGroupStats(); };
  $("#group-by").addEventListener("change", () => { state.group.by = $("#group-by").value; state.group.on = true; changed(); });
  $("#group-pattern").addEventListener("input", () => { state.group.pattern = $("#group-pattern").value; changed(); });
  $("#group-band").addEventListener("change", () => { state.group.band = $("#group-band").value; changed(); });
  $("#group-on").addEventListener("change", () => { state.group.on = $("#group-on").checked; changed(); });
  $("#group-code").addEventListener("change", () => { state.group.perCode = $("#group-code").checked; changed(); });
}
