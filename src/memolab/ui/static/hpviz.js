// memolab dashboard: HParams (loaded before app.js; state, api, el, fmt* are its globals).
//
// * A table: arguments in the order the function takes them (constant ones hidden), the run's name
//   (a SummaryWriter's log_dir, memolab.log.name), and the final value of every scalar, sortable.
// * Parallel coordinates, as TensorBoard's HParams plugin: one axis per argument that varies, then
//   the metric; one line per run coloured by it (blue low, red high). An argument that is positive
//   and spans more than two decades (a learning rate) gets a log axis, ticked at its decades.
//   Brushing: drag along an axis to keep the runs in that range (several axes: all of them); the
//   brushed runs are selected (their curves drawn) and the table narrows to them. Double-click an
//   axis, or "clear", to drop its range.
// * A scatter of one argument against one metric (log x for a learning rate), best run starred.
// * The user's pick ("metrics and columns"): the metrics drawn as axes, in order, the first colouring
//   the lines (state.hpAxes; null: automatic, the sorted metric column or the validation loss and
//   two more), and the columns hidden from the table and the axes (state.hpHide). Both are in the
//   URL (hpm, hph) and read at every draw, so a live redraw (new runs, new values) keeps them.
"use strict";

async function renderHparams() {
  if (!state.fn) return;
  const which = state.script === null || state.script === undefined ? "" : state.script === "" ? "&none=1" : "&script=" + encodeURIComponent(state.script);
  const data = await api("hparams?fn=" + encodeURIComponent(state.fn) + which + `&limit=${RUN_WINDOW}`);  // the window
  state.hpData = data;
  drawHparams();
}

//: metric axes of the parallel coordinates besides the chosen one
const MORE_METRICS = 2;
function hpMetricRank(t) { return isSysTag(t) ? 3 : t.startsWith("train/") ? 0 : t.startsWith("val/") ? 1 : 2; }

function drawHparams() {
  const data = state.hpData;
  if (!data) return;
  if (!state.hpHide) state.hpHide = new Set();
  // a click under way on the table's head or the pick is not lost to a live redraw
  if (pressedIn($("#hparams-wrap")) || pressedIn($("#hp-pick"))) { whenReleased("hparams", drawHparams); return; }
  // argument order as the function declares it (the order of each run's arguments), not alphabetical
  const order = [];
  const seen = new Set();
  for (const r of data.rows) for (const k of Object.keys(r.hparams || {})) if (!seen.has(k)) { seen.add(k); order.push(k); }
  const constant = (get) => { const vals = new Set(data.rows.map((r) => JSON.stringify(get(r) ?? null))); return vals.size <= 1 && data.rows.length > 1; };
  const hpCols = order.map((k) => [k, (r) => r.hparams[k], "arg"]);
  data.metrics.sort((a, b) => hpMetricRank(a) - hpMetricRank(b) || (a < b ? -1 : 1));  // as the runs table: train/, val/ first
  const hidden = state.hpConst ? [] : hpCols.filter(([, get]) => constant(get)).map(([k]) => k);
  const named = data.rows.some((r) => r.name);
  const picked = (k) => !state.hpHide.has(k);  // the user's pick of columns
  const cols = [["status", (r) => r.status], ["id", (r) => r.eval_id || null],
    ...(named ? [["name", (r) => r.name || ""]] : []), ["code", (r) => (r.code || "").slice(0, 8)],
    ...hpCols.filter(([k]) => !hidden.includes(k) && picked(k)), ...data.metrics.filter(picked).map((k) => ["⟶ " + k, (r) => r.metrics[k], "metric"])];
  $("#hp-const").textContent = hidden.length ? `show ${hidden.length} constant column(s): ${hidden.join(", ")}`.slice(0, 120) : state.hpConst ? "hide constant columns" : "";
  const { key, dir } = state.hpSort;
  const brushed = hpBrushed();
  const rows = brushed ? data.rows.filter((r) => brushed.has(String(r.id))) : [...data.rows];
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
  const empty = $("#hp-empty");
  empty.classList.toggle("hidden", data.rows.length > 0 && data.metrics.length > 0);
  empty.textContent = !data.rows.length ? "No runs of this function yet." : "No metrics to compare: log scalars (memolab.log.scalar(\"val/loss\", v)); their final values are the metric columns.";
  // the metric axes: the user's (those this function logged), else the sorted metric column's
  const chosen = state.hpAxes ? state.hpAxes.filter((m) => data.metrics.includes(m)) : null;
  const metric = chosen ? chosen[0] || null : key && key.startsWith("⟶ ") ? key.slice(2) : null;
  const varying = hpCols.filter(([k, get]) => !constant(get) && picked(k));
  drawParallel(data, varying, metric, chosen);
  drawScatter(data, varying, metric);
  drawHpPicker(data, hpCols.filter(([, get]) => !constant(get)).map(([k]) => k));
}

// ---- the user's pick of metric axes and columns ----------------------------------------------------
// Drawn again only when what it shows changed: a redraw under a pointer pressed on it would take
// the click (the checkboxes it replaced are gone by the release).
function drawHpPicker(data, args) {
  const box = $("#hp-pick"), list = $("#hp-pick-list");
  box.classList.toggle("hidden", !data.rows.length || !data.metrics.length);
  const axes = state.hpDrawn || [];
  const sig = JSON.stringify([args, data.metrics, [...state.hpHide].sort(), axes, !!state.hpAxes]);
  if (list.dataset.sig === sig) return;
  list.dataset.sig = sig;
  const check = (attrs, on, change) => { const c = el("input", { type: "checkbox", ...attrs, onchange: () => change(c.checked) }); c.checked = on; return c; };
  const column = (k) => check({ "data-col": k, title: "a column of the table (an argument: and its axis)" }, !state.hpHide.has(k), (on) => {
    if (on) state.hpHide.delete(k); else state.hpHide.add(k);
    hpPicked();
  });
  // axes as drawn now (automatic ones included): a change starts from what the user sees
  const setAxes = (f) => { state.hpAxes = f([...axes]); hpPicked(); };
  list.replaceChildren(el("tr", {}, el("th", { text: "" }), el("th", { text: "column" }), el("th", { text: "axis" }), el("th", { text: "colours" })),
    ...args.map((k) => el("tr", { "data-arg": k }, el("td", { text: k }), el("td", {}, column(k)), el("td", { class: "muted", text: "(with its column)" }), el("td", {}))),
    ...data.metrics.map((m) => el("tr", { "data-metric": m }, el("td", { text: m }), el("td", {}, column(m)),
      el("td", {}, check({ "data-axis": m, title: "an axis of the parallel coordinates" }, axes.includes(m),
        (on) => setAxes((a) => (on ? [...a.filter((x) => x !== m), m] : a.filter((x) => x !== m))))),
      el("td", {}, el("input", { type: "radio", name: "hp-colour", "data-colour": m, title: "colour the lines by this metric", ...(axes[0] === m ? { checked: "" } : {}),
        onchange: () => setAxes((a) => [m, ...a.filter((x) => x !== m)]) })))));
}

function hpPicked() {
  saveUrl();
  drawHparams();
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

// ---- scales shared by the parallel coordinates and the scatter -----------------------------------
// numbers on a linear axis (log when positive and spread over more than two decades), anything
// else as evenly spaced categories; at(v) is 0..1, ticks are [value, 0..1, label]
function hpScale(values, metric) {
  const vals = values.filter((v) => v !== undefined && v !== null);
  if (vals.length && vals.every((v) => typeof v === "number")) {
    const lo = Math.min(...vals), hi = Math.max(...vals);
    const log = lo > 0 && hi / lo > 100;
    const f = log ? Math.log10 : (v) => v;
    const at = (v) => typeof v !== "number" ? null : hi === lo ? 0.5 : (f(v) - f(lo)) / (f(hi) - f(lo));
    let ticks;
    if (log) {
      ticks = [];
      for (let e = Math.ceil(Math.log10(lo) - 1e-9); e <= Math.floor(Math.log10(hi) + 1e-9); e++) ticks.push(10 ** e);
    } else ticks = hi === lo ? [lo] : niceTicks(lo, hi, 4).filter((t) => t >= lo && t <= hi);
    const label = metric ? fmtNum : (v) => (log ? logLabel(v) : fmtArg(+v.toPrecision(12)));
    return { log, lo, hi, at, inv: (t) => (log ? 10 ** (f(lo) + t * (f(hi) - f(lo))) : lo + t * (hi - lo)),
      ticks: ticks.map((t) => [t, at(t), label(t)]) };
  }
  const cats = [...new Set(vals.map((v) => fmtArg(v)))].sort();
  const at = (v) => v === undefined || v === null ? null : cats.length === 1 ? 0.5 : cats.indexOf(fmtArg(v)) / (cats.length - 1);
  return { cats, at, ticks: cats.map((c) => [c, at(c), c]) };
}

// ---- parallel coordinates with brushing ------------------------------------------------------------
// state.hpBrush: {axis label: [t0, t1]} in 0..1 of the axis; null when nothing is brushed
function hpBrushed() {
  const b = state.hpBrush, geo = state.hpGeo;
  if (!b || !Object.keys(b).length || !geo) return null;
  const keep = new Set();
  for (const r of state.hpData.rows) {
    let ok = true;
    for (const [label, [t0, t1]] of Object.entries(b)) {
      const i = geo.axes.findIndex((a) => a[0] === label);
      if (i < 0) continue;
      const t = geo.scales[i].at(geo.axes[i][1](r));
      if (t === null || t < t0 - 1e-9 || t > t1 + 1e-9) { ok = false; break; }
    }
    if (ok) keep.add(String(r.id));
  }
  return keep;
}

function drawParallel(data, argCols, metric, chosen) {
  const canvas = $("#parcoords");
  const metrics = data.metrics.filter((m) => !isSysTag(m));
  metric = chosen ? chosen[0] : metric || metrics.find((m) => /^(val|valid|eval|test)[/_]/.test(m) && /loss/.test(m)) || metrics.find((m) => m.startsWith("val/"))
    || metrics.find((m) => m.startsWith("train/")) || metrics[0];
  // several metric axes (as W&B and TensorBoard): the chosen one (it colours the lines) first, then
  // up to MORE_METRICS others, held-out ones first
  const others = chosen ? chosen.slice(1) : metric ? metrics.filter((m) => m !== metric)
    .sort((a, b) => (/^(val|valid|eval|test)[/_]/.test(b) - /^(val|valid|eval|test)[/_]/.test(a)) || (a < b ? -1 : 1)).slice(0, MORE_METRICS) : [];
  const axes = [...argCols.map(([k, get]) => [k, get]), ...(metric ? [metric, ...others].map((mt) => ["⟶ " + mt, (r) => r.metrics[mt]]) : [])];
  const mi = argCols.length;  // the colouring metric's axis
  // (no argument varies: nothing to compare the metrics across)
  canvas.classList.toggle("hidden", !argCols.length || axes.length < 2 || data.rows.length < 2);
  $("#hp-brush-bar").classList.toggle("hidden", canvas.classList.contains("hidden"));
  canvas.dataset.axes = axes.map((a) => a[0]).join("|");
  const drawn = metric ? [metric, ...others] : [];
  state.hpDrawn = drawn;
  if (canvas.classList.contains("hidden")) { state.hpGeo = null; return; }
  const [g, W, H] = setupCanvas(canvas);
  const scales = axes.map(([, get], i) => hpScale(data.rows.map(get), i >= mi && !!metric));
  // room for the first axis's tick labels (right-aligned left of it: `rmsprop` was cut to `sprop`)
  // and for the first and last axes' titles (centred on them)
  const title = (label, s) => (label.length > 22 ? label.slice(0, 21) + "…" : label) + (s.log ? " (log)" : "");
  const tickText = (text) => String(text).slice(0, 12);
  const wide = (t) => g.measureText(t).width;
  const pad = { l: Math.max(36, 8 + Math.max(0, ...scales[0].ticks.map(([, , t]) => wide(tickText(t)))), 4 + wide(title(axes[0][0], scales[0])) / 2),
    r: Math.max(24, 4 + wide(title(axes[axes.length - 1][0], scales[scales.length - 1])) / 2), t: 28, b: 22 };
  const x = (i) => pad.l + (axes.length === 1 ? 0 : i / (axes.length - 1)) * (W - pad.l - pad.r);
  const y = (t) => H - pad.b - t * (H - pad.t - pad.b);
  state.hpGeo = { axes, scales, x, y, pad, W, H, metric };
  canvas.dataset.drawn = String(+(canvas.dataset.drawn || 0) + 1);
  canvas.dataset.log = axes.filter((_, i) => scales[i].log).map((a) => a[0]).join("|");
  const brushed = hpBrushed();
  canvas.dataset.brushed = brushed ? [...brushed].join(",") : "";
  const m = scales[mi] || scales[scales.length - 1], mget = (axes[mi] || axes[axes.length - 1])[1];
  const rows = data.rows.length > 3000 ? data.rows.filter((r, i) => i % Math.ceil(data.rows.length / 3000) === 0) : data.rows;
  const low = metric ? lowerIsBetter(metric) : true;
  const line = (r) => {
    g.beginPath();
    let pen = false;
    axes.forEach(([, get], i) => {
      const v = scales[i].at(get(r));
      if (v === null) { pen = false; return; }
      if (pen) g.lineTo(x(i), y(v)); else g.moveTo(x(i), y(v));
      pen = true;
    });
    g.stroke();
  };
  g.lineWidth = 1;
  for (const r of rows) {  // out of the brushed ranges: grey, behind
    if (!brushed || brushed.has(String(r.id))) continue;
    g.strokeStyle = "rgba(160,165,175,0.25)";
    line(r);
  }
  for (const r of rows) {
    if (brushed && !brushed.has(String(r.id))) continue;
    const t = metric ? m.at(mget(r)) : null;
    // coloured so that the better end is red whichever way the metric is better
    const good = t === null ? null : low ? 1 - t : t;
    g.strokeStyle = good === null ? "rgba(120,120,120,0.35)" : `hsla(${240 - 240 * good}, 75%, 45%, 0.6)`;
    g.lineWidth = brushed ? 1.6 : 1;
    line(r);
  }
  g.lineWidth = 1;
  const clip = [];  // every label's left and right edge: the tests check none is cut by the canvas
  axes.forEach(([label], i) => {
    const s = scales[i];
    g.strokeStyle = "#5b6475"; g.fillStyle = "#1d2330"; g.textAlign = "center"; g.textBaseline = "alphabetic";
    g.beginPath(); g.moveTo(x(i), y(0)); g.lineTo(x(i), y(1)); g.stroke();
    g.fillText(title(label, s), x(i), 14);
    clip.push([x(i) - wide(title(label, s)) / 2, x(i) + wide(title(label, s)) / 2]);
    g.fillStyle = "#5b6475"; g.textAlign = "right"; g.textBaseline = "middle";
    const every = Math.max(1, Math.ceil(s.ticks.length / 8));
    s.ticks.forEach(([, t, text], k) => {
      if (t === null || k % every) return;
      g.beginPath(); g.moveTo(x(i) - 3, y(t)); g.lineTo(x(i), y(t)); g.stroke();
      g.fillText(tickText(text), x(i) - 5, y(t));
      clip.push([x(i) - 5 - wide(tickText(text)), x(i) - 5]);
    });
    const b = state.hpBrush && state.hpBrush[label];
    if (b) {  // the brushed range
      g.fillStyle = "rgba(58,95,176,0.18)"; g.strokeStyle = "#3a5fb0";
      g.fillRect(x(i) - 7, y(b[1]), 14, y(b[0]) - y(b[1])); g.strokeRect(x(i) - 7, y(b[1]), 14, y(b[0]) - y(b[1]));
    }
  });
  canvas.dataset.clipped = String(clip.filter(([a, b]) => a < 0 || b > W).length);
  $("#hp-brush-info").textContent = brushed ? `${brushed.size} of ${data.rows.length} runs in the brushed range${Object.keys(state.hpBrush).length > 1 ? "s" : ""}`
    : "drag along an axis to select the runs in a range";
  $("#hp-brush-clear").classList.toggle("hidden", !brushed);
}

function hpAxisAt(ev) {
  const geo = state.hpGeo;
  if (!geo) return null;
  const box = $("#parcoords").getBoundingClientRect();
  const px = ev.clientX - box.left, py = ev.clientY - box.top;
  let best = -1, dist = 24;
  geo.axes.forEach((_, i) => { const d = Math.abs(geo.x(i) - px); if (d < dist) { dist = d; best = i; } });
  if (best < 0) return null;
  const t = Math.min(1, Math.max(0, (geo.H - geo.pad.b - py) / (geo.H - geo.pad.t - geo.pad.b)));
  return { i: best, label: geo.axes[best][0], t };
}

// brushing ends by selecting the runs in range (those with logs): their curves are drawn
function applyBrush() {
  const brushed = hpBrushed();
  drawHparams();
  if (!brushed) return;
  const logged = state.hpData.rows.filter((r) => brushed.has(String(r.id))).map((r) => String(r.id));
  setSelection(logged);
}

function initHparamsViz() {
  const canvas = $("#parcoords");
  let drag = null;
  canvas.addEventListener("mousedown", (ev) => {
    const a = hpAxisAt(ev);
    if (!a) return;
    ev.preventDefault();
    drag = a;
  });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const a = hpAxisAt({ clientX: $("#parcoords").getBoundingClientRect().left + state.hpGeo.x(drag.i), clientY: ev.clientY });
    if (!a) return;
    state.hpBrush = { ...(state.hpBrush || {}), [drag.label]: [Math.min(drag.t, a.t), Math.max(drag.t, a.t)] };
    drawHparams();
  });
  window.addEventListener("mouseup", () => {
    if (!drag) return;
    const b = state.hpBrush && state.hpBrush[drag.label];
    if (b && b[1] - b[0] < 0.01) delete state.hpBrush[drag.label];  // a click, not a drag
    drag = null;
    applyBrush();
  });
  canvas.addEventListener("dblclick", (ev) => {
    const a = hpAxisAt(ev);
    if (a && state.hpBrush) { delete state.hpBrush[a.label]; applyBrush(); }
  });
  $("#hp-brush-clear").addEventListener("click", () => { state.hpBrush = null; drawHparams(); });
  $("#hp-pick-reset").addEventListener("click", () => { state.hpAxes = null; state.hpHide = new Set(); hpPicked(); });
  // (picked by the user: kept; else each draw's default, the metric that colours the lines)
  $("#scatter-x").addEventListener("change", () => { $("#scatter-x").dataset.picked = "1"; drawHparams(); });
  $("#scatter-y").addEventListener("change", () => { $("#scatter-y").dataset.picked = "1"; drawHparams(); });
  $("#scatter").addEventListener("mousemove", scatterHover);
  $("#scatter").addEventListener("mouseleave", () => $("#scatter-tip").classList.add("hidden"));
}

// ---- one argument against one metric -----------------------------------------------------------------
function drawScatter(data, argCols, metric) {
  const canvas = $("#scatter"), xs = $("#scatter-x"), ys = $("#scatter-y");
  const args = argCols.map(([k]) => k);
  const metrics = data.metrics;
  const box = $("#scatter-box");
  box.classList.toggle("hidden", !args.length || !metrics.length || data.rows.length < 2);
  if (box.classList.contains("hidden")) return;
  const fill = (sel, opts, want) => {
    const cur = sel.dataset.picked ? sel.value || want : want;  // the user's choice, else the default
    sel.replaceChildren(...opts.map((o) => el("option", { value: o, text: o })));
    sel.value = opts.includes(cur) ? cur : opts[0];
  };
  // x: the varying numeric argument with the most values (lr says more than optimizer), else the first
  const numeric = args.map((k) => [k, new Set(data.rows.map((r) => r.hparams[k]).filter((v) => typeof v === "number"))])
    .filter(([k, vals]) => vals.size > 1 && data.rows.every((r) => r.hparams[k] === undefined || typeof r.hparams[k] === "number"));
  numeric.sort((a, b) => b[1].size - a[1].size);
  fill(xs, args, numeric.length ? numeric[0][0] : args[0]);
  fill(ys, metrics, metric || metrics.find((m) => /^(val|eval|test)[/_].*loss/.test(m)) || metrics.find((m) => !isSysTag(m)) || metrics[0]);
  const ax = xs.value, my = ys.value;
  const pts = data.rows.map((r) => [r, r.hparams[ax], r.metrics[my]]).filter(([, a, v]) => a !== undefined && a !== null && typeof v === "number");
  const [g, W, H] = setupCanvas(canvas);
  const pad = { l: 62, r: 16, t: 12, b: 34 };
  const sx = hpScale(pts.map((p) => p[1]), false), sy = hpScale(pts.map((p) => p[2]), true);
  const X = (t) => pad.l + t * (W - pad.l - pad.r), Y = (t) => H - pad.b - t * (H - pad.t - pad.b);
  g.strokeStyle = "#eceef2"; g.fillStyle = "#5b6475"; g.font = "11px system-ui, sans-serif";
  g.textAlign = "right"; g.textBaseline = "middle";
  for (const [, t, text] of sy.ticks) { if (t === null) continue; g.beginPath(); g.moveTo(pad.l, Y(t)); g.lineTo(W - pad.r, Y(t)); g.stroke(); g.fillText(String(text), pad.l - 4, Y(t)); }
  g.textAlign = "center"; g.textBaseline = "top";
  const every = Math.max(1, Math.ceil(sx.ticks.length / 10));
  sx.ticks.forEach(([, t, text], k) => { if (t === null || k % every) return; g.beginPath(); g.moveTo(X(t), pad.t); g.lineTo(X(t), H - pad.b); g.stroke(); g.fillText(String(text), X(t), H - pad.b + 4); });
  g.fillText(`${ax}${sx.log ? " (log)" : ""}`, (pad.l + W - pad.r) / 2, H - 14);
  let best = null;
  for (const p of pts) if (better(my, p[2], best ? best[2] : null)) best = p;
  const jitter = sx.cats ? (r) => ((hashOf(String(r.id)) % 1000) / 1000 - 0.5) * 0.6 / Math.max(1, sx.cats.length) : () => 0;
  state.scatterPts = [];
  for (const p of pts) {
    const [r, a, v] = p;
    const px = X(Math.min(1, Math.max(0, sx.at(a) + jitter(r)))), py = Y(sy.at(v));
    const sel = state.selected.includes(String(r.id));
    g.fillStyle = sel ? colorOf(String(r.id)) : "rgba(90,100,120,0.55)";
    g.beginPath(); g.arc(px, py, p === best ? 6 : 4, 0, 2 * Math.PI); g.fill();
    if (p === best) { g.strokeStyle = "#1d2330"; g.lineWidth = 1.5; g.stroke(); g.fillStyle = "#1d2330"; g.textAlign = "left"; g.textBaseline = "middle"; g.fillText("★ best", px + 8, py); }
    state.scatterPts.push([px, py, r, a, v]);
  }
  canvas.dataset.points = String(pts.length);
  canvas.dataset.best = best ? String(best[0].id) : "";
  canvas.dataset.log = sx.log ? "x" : "";
}

function hashOf(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0; return h; }

function scatterHover(ev) {
  const box = $("#scatter").getBoundingClientRect(), tip = $("#scatter-tip");
  const mx = ev.clientX - box.left, my = ev.clientY - box.top;
  let near = null, d = 100;
  for (const p of state.scatterPts || []) { const dd = (p[0] - mx) ** 2 + (p[1] - my) ** 2; if (dd < d) { d = dd; near = p; } }
  if (!near) { tip.classList.add("hidden"); return; }
  const [, , r, a, v] = near;
  tip.textContent = `${idText({ ...r, stored: !!r.eval_id })} ${r.label || ""}: ${$("#scatter-x").value}=${fmtArg(a)}, ${$("#scatter-y").value}=${fmtNum(v)}`;
  tip.style.left = `${near[0] + 10}px`; tip.style.top = `${near[1] - 8}px`;
  tip.classList.remove("hidden");
}
