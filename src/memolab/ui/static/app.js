// memolab dashboard. Plain JS, no dependencies: the page must work offline and
// ship inside the Python package. Charts are drawn on <canvas> by drawChart().
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
const state = {
  fn: null, runs: [], selected: [], tab: "scalars", sort: { key: "started", dir: -1 },
  hpSort: { key: null, dir: 1 }, colors: {}, nextColor: 0, series: {}, tags: null,
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
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3);
  return String(+v.toPrecision(5));
}
function fmtDur(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function argText(hp) { return Object.entries(hp || {}).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(", "); }
function runLabel(r) { const a = argText(r.hparams); return `#${String(r.id).slice(-5)} ${a}`.slice(0, 80); }
function colorOf(id) {
  if (!(id in state.colors)) state.colors[id] = COLORS[state.nextColor++ % COLORS.length];
  return state.colors[id];
}
function runById(id) { return state.runs.find((r) => String(r.id) === String(id)); }

// ---- functions ----------------------------------------------------------------
async function loadFunctions() {
  const fns = await api("functions");
  const ul = $("#functions");
  const filter = $("#fn-filter").value.toLowerCase();
  ul.replaceChildren(...fns.filter((f) => f.fn.toLowerCase().includes(filter)).map((f) => el("li",
    { "data-fn": f.fn, class: f.fn === state.fn ? "active" : "", onclick: () => selectFunction(f.fn), title: f.fn },
    f.fn, el("span", { class: "count", text: `${Math.max(f.runs, f.evaluations)}${f.running ? " ●" : ""}` }))));
  const running = fns.reduce((n, f) => n + (f.running || 0), 0);
  $("#live").textContent = running ? `● ${running} running — live` : "";
  return fns;
}

async function selectFunction(fn) {
  if (state.fn !== fn) { state.selected = []; state.colors = {}; state.nextColor = 0; state.showAll = false; state.runsSig = null; }
  state.fn = fn;
  for (const li of document.querySelectorAll("#functions li")) li.classList.toggle("active", li.dataset.fn === fn);
  $("#fn-title").textContent = fn;
  await loadRuns();
  await refreshTab();
}

// ---- runs table -----------------------------------------------------------------
const ROW_LIMIT = 200;
const RUN_COLS = [
  ["", null], ["status", "status"], ["run", "id"], ["arguments", "args"], ["code", "code"], ["started", "started"],
  ["duration", "duration"], ["hits", "hits"], ["result", "result"],
];

async function loadRuns(force = true) {
  if (!state.fn) return false;
  const runs = await api("runs?fn=" + encodeURIComponent(state.fn));
  // polling must not rebuild a 1,000-row table every 2 s when nothing changed
  const sig = JSON.stringify(runs.map((r) => [r.id, r.status, r.hits, r.stored, r.result, r.status === "running" && Math.round(r.duration)]));
  const changed = sig !== state.runsSig;
  state.runs = runs;
  state.runsSig = sig;
  if (changed || force) renderRuns();
  return changed;
}

function renderRuns() {
  const { key, dir } = state.sort;
  const val = (r) => key === "args" ? argText(r.hparams) : r[key];
  const rows = [...state.runs].sort((a, b) => {
    const x = val(a), y = val(b);
    return (x === y ? 0 : x === null || x === undefined ? 1 : y === null || y === undefined ? -1 : x < y ? -1 : 1) * dir;
  });
  $("#runs thead").replaceChildren(el("tr", {}, ...RUN_COLS.map(([label, k]) => el("th", {
    onclick: () => { if (!k) return; state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : 1 }; renderRuns(); },
    text: label + (k && k === key ? (dir > 0 ? " ▲" : " ▼") : ""),
  }))));
  // Laying out a 1,000-row table costs hundreds of ms: show the first ROW_LIMIT (plus any selected) until asked.
  const shown = state.showAll ? rows : rows.filter((r, i) => i < ROW_LIMIT || state.selected.includes(String(r.id)));
  const more = rows.length - shown.length;
  $("#runs tbody").replaceChildren(...shown.map((r) => {
    const sel = state.selected.includes(String(r.id));
    const logged = typeof r.id === "number";
    const box = el("input", { type: "checkbox" });
    box.checked = sel;
    if (!logged) box.disabled = true;
    const sw = el("span", { class: "swatch", style: sel ? `background:${colorOf(r.id)}` : "" });
    return el("tr", {
      "data-run": String(r.id), class: sel ? "selected" : "", title: logged ? "" : "stored without logs",
      onclick: () => logged && toggleRun(String(r.id)),
    }, el("td", {}, box, sw), el("td", {}, el("span", { class: "status " + r.status, text: r.status + (r.stored ? "" : r.status === "done" ? " (not stored)" : "") })),
    el("td", { text: logged ? String(r.id).slice(-6) : r.id }), el("td", { text: argText(r.hparams), title: argText(r.hparams) }),
    el("td", { text: (r.code || "").slice(0, 10), title: r.code || "" }), el("td", { text: fmtTime(r.started) }),
    el("td", { text: fmtDur(r.duration) }), el("td", { text: String(r.hits ?? 0) }),
    el("td", { text: r.result ?? "–", title: r.result ?? "" }));
  }), ...(more > 0 ? [el("tr", { id: "show-all" }, el("td", { colspan: String(RUN_COLS.length) },
    el("button", { type: "button", onclick: () => { state.showAll = true; renderRuns(); } }, `show ${more} more`)))] : []));
  $("#run-count").textContent = `${state.runs.length} evaluation(s), ${state.selected.length} selected`;
  const stored = state.selected.map(runById).filter((r) => r && r.eval_id && r.stored);
  $("#compare-code").disabled = stored.length !== 2;
  $("#empty").classList.toggle("hidden", state.selected.length > 0 || state.tab === "hparams" || state.tab === "diff");
}

function toggleRun(id) {
  const i = state.selected.indexOf(id);
  if (i >= 0) state.selected.splice(i, 1); else state.selected.push(id);
  renderRuns();
  refreshTab();
}

// ---- tabs --------------------------------------------------------------------------
function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll(".tab")) s.classList.toggle("hidden", s.id !== "tab-" + tab);
  renderRuns();
  refreshTab();
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
      state.tags = ids.length ? await api("tags?runs=" + ids.join(",")) : { scalar: [], histogram: [], image: [], text: [] };
      if (state.tab === "scalars") await renderScalars(ids);
      else if (state.tab === "histograms") await renderHistograms(ids);
      else if (state.tab === "images") await renderImages(ids);
      else if (state.tab === "text") await renderTexts(ids);
      else if (state.tab === "hparams") await renderHparams();
    } while (refreshing.again);
  } catch (e) {
    console.error(e);
  } finally {
    refreshing = null;
  }
}

// ---- scalars -------------------------------------------------------------------------
function tagFilter() {
  const src = $("#tag-filter").value.trim();
  if (!src) return () => true;
  try { const re = new RegExp(src); $("#tag-filter").style.borderColor = ""; return (t) => re.test(t); }
  catch (e) { $("#tag-filter").style.borderColor = "red"; return () => true; }
}

async function renderScalars(ids) {
  const keep = tagFilter();
  const tags = state.tags.scalar.filter(keep);
  const box = $("#charts");
  const cards = [];
  for (const tag of tags) {
    const data = await api(`scalars?runs=${ids.join(",")}&tag=${encodeURIComponent(tag)}&max=1000`);
    state.series[tag] = data;
    let card = box.querySelector(`.card[data-tag="${CSS.escape(tag)}"]`);
    if (!card) {
      const canvas = el("canvas", { "data-tag": tag });
      card = el("div", { class: "card chart", "data-tag": tag }, el("h3", { text: tag }), canvas, el("div", { class: "legend" }));
      attachTooltip(canvas, tag);
    }
    cards.push(card);
  }
  box.replaceChildren(...cards);
  for (const card of cards) drawScalarCard(card, ids);
}

function redrawScalars() {
  for (const card of document.querySelectorAll("#charts .card")) drawScalarCard(card, state.selected);
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
    return { id, color: colorOf(id), label: runById(id) ? runLabel(runById(id)) : id, x: xs, raw: d.value,
      y: smooth(d.value, w), n: d.n, lo: d.min, hi: d.max };
  });
}

function drawScalarCard(card, ids) {
  const tag = card.dataset.tag;
  const canvas = card.querySelector("canvas");
  const series = seriesFor(tag, ids);
  canvas.dataset.runs = series.map((s) => s.id).join(",");
  canvas.dataset.points = series.map((s) => s.n).join(",");
  const xmode = $("#xaxis").value;
  drawChart(canvas, series, { logY: $("#logscale").checked, xTime: xmode === "wall" });
  card.querySelector(".legend").replaceChildren(...series.map((s) => el("span", {},
    el("span", { class: "swatch", style: `background:${s.color}` }),
    `${s.label}  (${s.n} pts, last ${fmtNum(s.raw[s.raw.length - 1])})`)));
}

function niceTicks(lo, hi, count) {
  if (!(hi > lo)) { hi = lo + 1; }
  const span = hi - lo, raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

function drawChart(canvas, series, { logY = false, xTime = false } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const W = canvas.clientWidth || 400, H = canvas.clientHeight || 260;
  canvas.width = W * dpr; canvas.height = H * dpr;
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, W, H);
  const pad = { l: 58, r: 12, t: 8, b: 28 };
  const fy = logY ? (v) => (v > 0 ? Math.log10(v) : null) : (v) => v;
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const s of series) {
    s.x.forEach((x, i) => {
      for (const v of [s.raw[i], s.y[i], s.lo ? s.lo[i] : null, s.hi ? s.hi[i] : null]) {
        const y = v === null || v === undefined ? null : fy(v);
        if (y === null || !isFinite(y)) continue;
        if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
      }
    });
  }
  canvas._plot = null;
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#7a8294";
  if (!isFinite(x0)) { g.fillText("no data", W / 2 - 20, H / 2); return; }
  if (x1 === x0) { x1 = x0 + 1; }
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const ym = (y1 - y0) * 0.05; y0 -= ym; y1 += ym;
  const px = (x) => pad.l + (x - x0) / (x1 - x0) * (W - pad.l - pad.r);
  const py = (y) => H - pad.b - (y - y0) / (y1 - y0) * (H - pad.t - pad.b);
  // grid and axes
  g.strokeStyle = "#eceef2"; g.lineWidth = 1; g.textAlign = "right"; g.textBaseline = "middle";
  const yt = logY ? niceTicks(Math.floor(y0), Math.ceil(y1), 5).filter((v) => Number.isInteger(v) && v >= y0 && v <= y1) : niceTicks(y0, y1, 5);
  for (const t of yt) {
    g.beginPath(); g.moveTo(pad.l, py(t)); g.lineTo(W - pad.r, py(t)); g.stroke();
    g.fillText(logY ? "1e" + t : fmtNum(t), pad.l - 4, py(t));
  }
  g.textAlign = "center"; g.textBaseline = "top";
  for (const t of niceTicks(x0, x1, Math.max(2, Math.floor(W / 90)))) {
    if (t < x0 || t > x1) continue;
    g.beginPath(); g.moveTo(px(t), pad.t); g.lineTo(px(t), H - pad.b); g.stroke();
    g.fillText(xTime ? new Date(t * 1000).toLocaleTimeString() : fmtNum(t), px(t), H - pad.b + 4);
  }
  g.strokeStyle = "#9aa1b0"; g.strokeRect(pad.l, pad.t, W - pad.l - pad.r, H - pad.t - pad.b);
  const line = (xs, ys, color, width, alpha) => {
    g.strokeStyle = color; g.lineWidth = width; g.globalAlpha = alpha; g.beginPath();
    let pen = false;
    xs.forEach((x, i) => {
      const y = ys[i] === null || ys[i] === undefined ? null : fy(ys[i]);
      if (y === null || !isFinite(y)) { pen = false; return; }
      if (pen) g.lineTo(px(x), py(y)); else { g.moveTo(px(x), py(y)); pen = true; }
    });
    g.stroke(); g.globalAlpha = 1;
  };
  for (const s of series) {
    if (s.lo && s.hi) { // min/max envelope of downsampled buckets
      g.fillStyle = s.color; g.globalAlpha = 0.12; g.beginPath();
      s.x.forEach((x, i) => { const y = fy(s.hi[i]); if (y !== null && isFinite(y)) g.lineTo(px(x), py(y)); });
      for (let i = s.x.length - 1; i >= 0; i--) { const y = fy(s.lo[i]); if (y !== null && isFinite(y)) g.lineTo(px(s.x[i]), py(y)); }
      g.fill(); g.globalAlpha = 1;
    }
    line(s.x, s.raw, s.color, 1, 0.25);
    line(s.x, s.y, s.color, 2, 1);
  }
  canvas._plot = { series, px, py, fy, x0, x1 };
}

function attachTooltip(canvas, tag) {
  let tip = null;
  canvas.addEventListener("mousemove", (ev) => {
    const p = canvas._plot;
    if (!p) return;
    const r = canvas.getBoundingClientRect();
    const mx = ev.clientX - r.left;
    const lines = [];
    for (const s of p.series) {
      let best = -1, bd = Infinity;
      s.x.forEach((x, i) => { const d = Math.abs(p.px(x) - mx); if (d < bd) { bd = d; best = i; } });
      if (best >= 0) lines.push(`<span style="color:${s.color}">■</span> x=${fmtNum(s.x[best])}  ${fmtNum(s.raw[best])} (smoothed ${fmtNum(s.y[best])})`);
    }
    if (!tip) { tip = el("div", { class: "tooltip" }); document.body.append(tip); }
    tip.innerHTML = `<b>${tag.replace(/</g, "&lt;")}</b><br>` + lines.join("<br>");
    tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
  });
  canvas.addEventListener("mouseleave", () => { if (tip) { tip.remove(); tip = null; } });
}

// ---- histograms: one ridge per step, later steps in front (TensorBoard's "offset" view) ----
async function renderHistograms(ids) {
  const box = $("#histograms");
  const cards = [];
  for (const id of ids) {
    for (const tag of state.tags.histogram || []) {
      const hs = await api(`histograms?run=${id}&tag=${encodeURIComponent(tag)}`);
      if (!hs.length) continue;
      const canvas = el("canvas", { "data-tag": tag, "data-run": id, "data-steps": String(hs.length) });
      const card = el("div", { class: "card hist" }, el("h3", {}, el("span", { class: "swatch", style: `background:${colorOf(id)}` }),
        `${tag} — ${runLabel(runById(id) || { id, hparams: {} })}`), canvas);
      cards.push([card, canvas, hs, colorOf(id)]);
    }
  }
  box.replaceChildren(...cards.map((c) => c[0]));
  for (const [, canvas, hs, color] of cards) drawHistograms(canvas, hs, color);
}

function drawHistograms(canvas, hs, color) {
  const dpr = window.devicePixelRatio || 1;
  const W = canvas.clientWidth || 400, H = canvas.clientHeight || 260;
  canvas.width = W * dpr; canvas.height = H * dpr;
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  const pad = { l: 50, r: 12, t: 10, b: 24 };
  let lo = Infinity, hi = -Infinity, cmax = 0;
  for (const h of hs) { const m = h.meta; if (!m.num) continue; lo = Math.min(lo, m.left); hi = Math.max(hi, m.limits[m.limits.length - 1]); cmax = Math.max(cmax, ...m.counts); }
  if (!isFinite(lo)) return;
  const n = hs.length, ridge = (H - pad.t - pad.b) * 0.45, gap = n > 1 ? (H - pad.t - pad.b - ridge) / (n - 1) : 0;
  const px = (x) => pad.l + (x - lo) / (hi - lo || 1) * (W - pad.l - pad.r);
  g.font = "11px system-ui, sans-serif"; g.fillStyle = "#7a8294"; g.textAlign = "center"; g.textBaseline = "top";
  for (const t of niceTicks(lo, hi, 5)) if (t >= lo && t <= hi) g.fillText(fmtNum(t), px(t), H - pad.b + 4);
  hs.forEach((h, k) => {
    const m = h.meta, base = pad.t + ridge + k * gap;
    g.beginPath(); g.moveTo(px(m.left), base);
    let left = m.left;
    m.counts.forEach((c, i) => { const mid = (left + m.limits[i]) / 2; g.lineTo(px(mid), base - c / (cmax || 1) * ridge); left = m.limits[i]; });
    g.lineTo(px(left), base); g.closePath();
    g.globalAlpha = 0.85; g.fillStyle = "#fff"; g.fill(); g.globalAlpha = 0.25 + 0.6 * (k + 1) / n;
    g.strokeStyle = color; g.lineWidth = 1.2; g.stroke(); g.globalAlpha = 1;
    if (k === 0 || k === n - 1 || k % Math.ceil(n / 6) === 0) { g.fillStyle = "#7a8294"; g.textAlign = "right"; g.textBaseline = "middle"; g.fillText("step " + h.step, pad.l - 4, base); }
  });
}

// ---- images and text: one card per run and tag, a slider over steps --------------------
async function renderImages(ids) {
  const box = $("#images");
  const cards = [];
  for (const id of ids) {
    for (const tag of state.tags.image || []) {
      const items = await api(`images?run=${id}&tag=${encodeURIComponent(tag)}`);
      if (items.length) cards.push(stepCard(id, tag, items, (it) => el("img", { src: `/api/image/${it.id}`, alt: `${tag} step ${it.step}` }), "imgbox"));
    }
  }
  box.replaceChildren(...cards);
}

async function renderTexts(ids) {
  const box = $("#texts");
  const cards = [];
  for (const id of ids) {
    for (const tag of state.tags.text || []) {
      const items = await api(`texts?run=${id}&tag=${encodeURIComponent(tag)}`);
      if (items.length) cards.push(stepCard(id, tag, items, (it) => el("pre", { text: it.text }), "textbox"));
    }
  }
  box.replaceChildren(...cards);
}

function stepCard(id, tag, items, render, cls) {
  const view = el("div", { class: cls });
  const label = el("span", { class: "muted" });
  const slider = el("input", { type: "range", min: "0", max: String(items.length - 1), step: "1", value: String(items.length - 1), class: "step-slider" });
  const show = () => { const it = items[+slider.value]; label.textContent = ` step ${it.step} (${+slider.value + 1}/${items.length})`; view.replaceChildren(render(it)); };
  slider.addEventListener("input", show);
  const card = el("div", { class: "card", "data-tag": tag, "data-run": id },
    el("h3", {}, el("span", { class: "swatch", style: `background:${colorOf(id)}` }), `${tag} — ${runLabel(runById(id) || { id, hparams: {} })}`),
    el("div", {}, slider, label), view);
  show();
  return card;
}

// ---- hparams: arguments vs final metrics, sortable --------------------------------------
async function renderHparams() {
  if (!state.fn) return;
  const data = await api("hparams?fn=" + encodeURIComponent(state.fn));
  const cols = [["status", (r) => r.status], ["run", (r) => r.id],
    ...data.hparams.map((k) => [k, (r) => r.hparams[k]]), ...data.metrics.map((k) => ["⟶ " + k, (r) => r.metrics[k]])];
  const { key, dir } = state.hpSort;
  const rows = [...data.rows];
  if (key !== null) {
    const get = cols[key][1];
    rows.sort((a, b) => {
      const x = get(a), y = get(b);
      if (x === y) return 0; if (x === undefined || x === null) return 1; if (y === undefined || y === null) return -1;
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x) < String(y) ? -1 : 1) * dir;
    });
  }
  $("#hparams thead").replaceChildren(el("tr", {}, ...cols.map(([label], i) => el("th", {
    "data-col": label, text: label + (i === key ? (dir > 0 ? " ▲" : " ▼") : ""),
    onclick: () => { state.hpSort = { key: i, dir: state.hpSort.key === i ? -state.hpSort.dir : 1 }; renderHparams(); },
  }))));
  $("#hparams tbody").replaceChildren(...rows.map((r) => el("tr", { "data-run": String(r.id) },
    ...cols.map(([, get], i) => { const v = get(r); return el("td", { text: i === 1 ? String(v).slice(-6) : typeof v === "number" ? fmtNum(v) : v === undefined ? "–" : String(v) }); }))));
}

// ---- code diff between two stored evaluations ---------------------------------------------
async function compareCode() {
  const [a, b] = state.selected.map(runById).filter((r) => r && r.eval_id && r.stored);
  showTab("diff");
  const d = await api(`diff?a=${a.eval_id}&b=${b.eval_id}`);
  const box = $("#diff");
  if (d.same) { box.replaceChildren(el("p", { text: `Evaluations #${a.eval_id} and #${b.eval_id} ran the same code.` })); return; }
  box.replaceChildren(...d.changes.map((c) => el("div", { class: "card" }, el("h3", { text: `${c.symbol} (${c.status})` }),
    el("pre", {}, ...c.diff.split("\n").map((l) => el("span", {
      class: l.startsWith("@@") ? "hunk" : l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : "",
      text: l + "\n" }))))));
}

// ---- live refresh: poll while anything is running ------------------------------------------
async function poll() {
  try {
    await loadFunctions();
    if (state.fn) {
      const changed = await loadRuns(false);
      const selRunning = state.selected.some((id) => (runById(id) || {}).status === "running");
      if (selRunning || changed) await refreshTab();
    }
  } catch (e) { console.error(e); }
}

async function init() {
  const info = await api("info");
  $("#store").textContent = info.store;
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("#fn-filter").addEventListener("input", loadFunctions);
  $("#tag-filter").addEventListener("input", () => refreshTab());
  $("#smoothing").addEventListener("input", () => { $("#smoothing-val").textContent = (+$("#smoothing").value).toFixed(2); redrawScalars(); });
  $("#xaxis").addEventListener("change", redrawScalars);
  $("#logscale").addEventListener("change", redrawScalars);
  $("#select-none").addEventListener("click", () => { state.selected = []; renderRuns(); refreshTab(); });
  $("#compare-code").addEventListener("click", compareCode);
  window.addEventListener("resize", redrawScalars);
  const fns = await loadFunctions();
  const wanted = new URLSearchParams(location.search).get("fn");
  if (wanted || fns.length) await selectFunction(wanted || fns[0].fn);
  document.body.dataset.ready = "1";
  setInterval(poll, 2000);
}

init();
