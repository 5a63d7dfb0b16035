// memolab dashboard: the scalar charts (loaded before app.js, which holds the state and starts the page).
// The series of a view (/api/series) sized to the charts' pixel width, the tags of the charts in view
// first and the others next, kept per run and tag and fetched again only when they grow; charts drawn
// a task at a time, the ones in view first, the others when scrolled to.
"use strict";

// ---- nothing is drawn again under a pressed pointer ---------------------------------------------------
// A drag-zoom is a press, moves and a release; a click is a press and a release on one element. A
// chart or a table row drawn again in between (the 2 s refresh, a series landing, the runs table
// sorted anew) takes the release on a new element: the zoom or the click was lost (under load, and
// for a user watching a live sweep). So what a pointer is down on is not drawn again until the
// release: ``pressedIn(node)`` says a pointer is down inside it, ``whenReleased(key, f)`` runs ``f``
// once after the release (after the click it makes), the last ``f`` of each ``key``.
const press = { target: null, pending: new Map() };
document.addEventListener("pointerdown", (e) => { press.target = e.target; }, true);
function releasePress() {
  press.target = null;
  if (!press.pending.size) return;
  const todo = [...press.pending.values()];
  press.pending.clear();
  setTimeout(() => { for (const f of todo) f(); }, 0);  // a task later: the click of this release first
}
window.addEventListener("pointerup", releasePress, true);
window.addEventListener("pointercancel", releasePress, true);
window.addEventListener("blur", releasePress);
function pressedIn(node) { return press.target !== null && !!node && node.contains(press.target); }
function whenReleased(key, f) { press.pending.set(key, f); }

// ---- scalars: in view first, then the rest; kept per run and tag, fetched again only when they grow ----
function tagFilter() {
  const src = $("#tag-filter").value.trim();
  if (!src) return () => true;
  try { const re = new RegExp(src); $("#tag-filter").style.borderColor = ""; return (t) => re.test(t); }
  catch (e) { $("#tag-filter").style.borderColor = "red"; return () => true; }
}

const groupOf = (tag) => (tag.includes("/") ? tag.slice(0, tag.indexOf("/")) : "");

// The card width (TensorBoard's setting): the grid has as many columns as cards of at least this
// width fit (CSS: auto-fill, minmax(var(--card-w), 1fr), gap 12px), so a wide screen is filled.
// Kept in the browser, as TensorBoard keeps it.
function cardWidth() {
  const v = +(document.getElementById("card-width")?.value || 400);
  return Number.isFinite(v) && v > 0 ? v : 400;
}
function applyCardWidth() {
  const w = cardWidth();
  document.getElementById("charts").style.setProperty("--card-w", w >= 100000 ? "100%" : w + "px");
}
(function initCardWidth() {  // (app.js, which defines $, is loaded after this file)
  const sel = document.getElementById("card-width");
  if (!sel) return;
  let saved = null;
  try { saved = localStorage.getItem("memolab.cardWidth"); } catch (e) { /* storage off: the default */ }
  if (saved && [...sel.options].some((o) => o.value === saved)) sel.value = saved;
  applyCardWidth();
  sel.addEventListener("change", () => {
    try { localStorage.setItem("memolab.cardWidth", sel.value); } catch (e) { /* storage off: this page only */ }
    applyCardWidth();
    redrawScalars();
  });
})();

// the plot width of one chart of the grid
function chartPx() {
  const W = $("#charts").clientWidth || $("main").clientWidth || 1000;
  const cols = Math.max(1, Math.floor((W + 12) / (Math.min(cardWidth(), W) + 12)));
  return Math.max(200, Math.floor((W - 12 * (cols - 1)) / cols) - 18);
}

// Sections: the user's own tags first (no prefix, then by name), the machine's samples (sys/: cpu,
// memory, never asked for) last and folded until opened.
const SYS_GROUP = "sys";
const sectionRank = (g) => (g === "" ? 0 : g === SYS_GROUP ? 2 : 1);
const foldedOnce = new Set();

// a run whose series are held but may have grown: it was running when they were fetched, or is now
function isStale(id, prefix = "") {
  const now = (state.hb?.running || {})[id];
  return state.fetchedAt[prefix + id] !== now;
}

// ``only``: the tags of the charts in view, asked for first (renderScalars): the runs not held yet
// get those tags' series and are marked as holding them (state.partial); the next call asks for
// everything else of them (skip=), so no series is sent twice.
async function fetchSeries(ids, only = null) {
  const want = Math.ceil(chartPx() / 50) * 50;
  if (want > state.px * 1.25 || !state.px) {  // wider charts (a resize): sized again, smaller ones reuse
    state.px = want; state.series = {}; state.fetched = new Set(); state.partial = {};
  }
  const fresh = ids.filter((id) => !state.fetched.has(id));
  if (only) {
    const todo = fresh.filter((id) => !state.partial[id]);
    for (let i = 0; i < todo.length; i += 200) {
      const part = todo.slice(i, i + 200);
      const at = Object.fromEntries(part.map((id) => [id, (state.hb?.running || {})[id]]));
      mergeSeries(await api(`series?runs=${part.join(",")}&px=${state.px}` + only.map((t) => "&tag=" + encodeURIComponent(t)).join("")));
      for (const id of part) { state.partial[id] = only; state.fetchedAt[id] = at[id]; }
    }
    return todo.length > 0;
  }
  const grown = ids.filter((id) => state.fetched.has(id) && isStale(id));
  if (!fresh.length && !grown.length) return false;
  const hb = state.hb?.running || {};
  // runs holding the tags in view already: the rest of their tags, in one request per such set
  const bySkip = new Map();
  for (const id of fresh) {
    const key = state.partial[id] ? JSON.stringify(state.partial[id]) : "";
    if (!bySkip.has(key)) bySkip.set(key, []);
    bySkip.get(key).push(id);
  }
  const batches = [...bySkip.entries()].map(([k, v]) => [k ? JSON.parse(k) : null, v]);
  if (grown.length) batches.push([null, grown]);
  for (const [skip, all] of batches) for (let i = 0; i < all.length; i += 200) {  // a long URL is split, never refused
    const part = all.slice(i, i + 200);
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
    mergeSeries(await api(`series?runs=${part.join(",")}&px=${state.px}` + (Object.keys(seen).length ? "&seen=" + encodeURIComponent(JSON.stringify(seen)) : "")
      + (skip || []).map((t) => "&skip=" + encodeURIComponent(t)).join("")));
    // (a partly held run that grew meanwhile: its tags in view are brought up to date by the next poll)
    for (const id of part) { state.fetched.add(id); delete state.partial[id]; if (!skip) state.fetchedAt[id] = at[id]; }
    // a live series that grew far past the chart's width is fetched whole (summarised) next time
    for (const per of Object.values(state.series)) for (const id of part) if (per[id] && per[id].step.length > 4 * state.px) state.fetched.delete(id);
  }
  return true;
}

function mergeSeries(got) {
  for (const [tag, per] of Object.entries(got)) {
    const dst = state.series[tag] || (state.series[tag] = {});
    for (const [id, d] of Object.entries(per)) dst[id] = d.append && dst[id] ? appendSeries(dst[id], d) : d;
  }
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

// The charts in view first: when runs not held yet bring charts that are out of view, their cards
// are laid out (each tag a run has is named by its metrics in the runs table), the tags of the
// cards in view are fetched and drawn, then everything else (one request more, no series twice).
// A sweep of 20 tags shows 4-8 charts in a window: its first draw waits for a quarter of the data.
async function renderScalars(ids) {
  const first = tagsInViewFirst(ids);
  if (first) {
    await fetchSeries(ids, first.near);
    state.restComing = true;
    layoutScalars(ids, [...new Set([...first.planned, ...scalarTags(ids)])].sort(), first.near);
  }
  try {
    await fetchSeries(ids);
  } finally {
    state.restComing = false;
  }
  layoutScalars(ids, scalarTags(ids));
}

function tagsInViewFirst(ids) {
  const fresh = ids.filter((id) => !state.fetched.has(id) && !state.partial[id]);
  if (!fresh.length || $("#tab-scalars").classList.contains("hidden")) return null;
  const keep = tagFilter();
  const planned = new Set(scalarTags(ids));
  for (const id of fresh) for (const t of Object.keys(runById(id)?.metrics || {})) if (keep(t)) planned.add(t);
  if (planned.size < 2) return null;
  const tags = [...planned].sort();
  layoutScalars(ids, tags, []);
  const near = tags.filter((t) => { const c = state.charts[t]; return c && !c.card.closest("details:not([open])") && nearViewNow(c.card); });
  return near.length && near.length < tags.length ? { planned: tags, near } : null;
}

// the group sections and cards of these tags (made once, reused); ``draw``: the tags to draw (all)
function layoutScalars(ids, tags, draw = null) {
  const box = $("#charts");
  const hint = $("#charts-empty");
  if (hint) {  // an empty tab says what to log to fill it
    hint.classList.toggle("hidden", tags.length > 0 || !ids.length);
    hint.textContent = Object.keys(state.series).length && !tags.length && $("#tag-filter").value
      ? `No tag matches ${$("#tag-filter").value}.`
      : "No scalars in these runs: log them with memolab.log.scalar(\"loss\", value) (or SummaryWriter.add_scalar) inside the memoized function.";
  }
  const groups = new Map();
  for (const tag of tags) { const g = groupOf(tag); if (!groups.has(g)) groups.set(g, []); groups.get(g).push(tag); }
  const sections = [];
  const live = new Set(tags);
  for (const [g, gtags] of [...groups.entries()].sort((a, b) => sectionRank(a[0]) - sectionRank(b[0]) || (a[0] < b[0] ? -1 : 1))) {
    let sec = box.querySelector(`details.group[data-group="${CSS.escape(g)}"]`);
    if (!sec) {
      if (g === SYS_GROUP && !foldedOnce.has(g)) { foldedOnce.add(g); state.collapsed.add(g); }
      sec = el("details", { class: "group" + (g === SYS_GROUP ? " sys" : ""), "data-group": g }, el("summary", {}), el("div", { class: "grid" }));
      sec.open = !state.collapsed.has(g);
      sec.addEventListener("toggle", () => {
        if (sec.open) { state.collapsed.delete(g); redrawScalars(); } else state.collapsed.add(g);
      });
    }
    sec.querySelector("summary").textContent = `${g || "(no prefix)"}  ·  ${gtags.length} chart${gtags.length === 1 ? "" : "s"}`
      + (g === SYS_GROUP ? "  ·  the machine's samples (cpu, memory), not the runs' results" : "");
    const grid = sec.querySelector(".grid");
    const cards = gtags.map((tag) => state.charts[tag]?.card || scalarCard(tag));
    if (cards.length !== grid.children.length || cards.some((c, i) => grid.children[i] !== c)) grid.replaceChildren(...cards);
    sections.push(sec);
  }
  if (sections.length !== box.children.length || sections.some((s, i) => box.children[i] !== s)) box.replaceChildren(...sections);
  for (const tag of Object.keys(state.charts)) if (!live.has(tag)) { state.charts[tag].u?.destroy(); delete state.charts[tag]; }
  scheduleDraw(draw || tags);
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
// the times the queue ran dry (a view's charts in view drawn, not while the rest of its tags is
// being fetched), body[data-dirty] is how many charts wait to be scrolled to.
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
// within the observer's margin of the window now (a forced layout: once per new card)
function nearViewNow(card) {
  const r = card.getBoundingClientRect();
  return r.bottom > -200 && r.top < window.innerHeight + 200;
}
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
  const shown = shownIds();
  while (drawQueue.length && performance.now() - t0 < 80) {
    const tag = drawQueue.shift(), c = state.charts[tag];
    // a card just made has no word from the observer yet (it reports after the next frame): its
    // place on the page says, else the 20 charts of a sweep are all made before the first paint
    if (c && c.inView === undefined) c.inView = nearViewNow(c.card);
    if (c && c.inView === false) { c.dirty = true; continue; }
    if (c && !state.series[tag]) { c.dirty = true; continue; }  // a card laid out ahead of its series
    if (c && c.u && pressedIn(c.card)) { whenReleased("chart " + tag, () => scheduleDraw([tag])); continue; }
    if (c) c.dirty = false;
    drawScalarCard(tag, shown);
  }
  if (drawQueue.length) { drawTimer = setTimeout(drainDraws, 0); return; }
  document.body.dataset.dirty = String(Object.values(state.charts).filter((c) => c.dirty).length);
  // a view fetched in two steps (the charts in view, then the rest) is counted once, when the
  // second is drawn too: tests and benchmarks read it as "the view is drawn"
  if (!state.restComing) document.body.dataset.drawn = String(++state.drawSeq);
  // timings read by benchmarks/dashboard.py, inside the page: the first chart drawn, and idle (every
  // chart in view drawn, nothing asked of the server any more)
  if (!state.firstDrawn && Object.values(state.charts).some((c) => c.u)) { state.firstDrawn = true; performance.mark("memolab:first-draw"); }
  if (state.firstDrawn && !state.idleMarked) requestAnimationFrame(() => setTimeout(markIdle, 0));
}
function markIdle() {
  if (state.idleMarked) return;
  if (drawQueue.length || refreshing || state.inflight) { setTimeout(markIdle, 20); return; }  // looked at again
  state.idleMarked = true;
  performance.mark("memolab:idle");
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
    return { id, src: d, color: colorOf(id), dash: dashOf(id), label: runLabel(runById(id)) || id, x: xs, raw: d.value,
      y: smooth(d.value, w), n: d.n, lo: d.min, hi: d.max, step: d.step, wall: d.wall, downsampled: !!d.downsampled };
  });
}

function alpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}

// a value as drawn: a log axis has no place for zero or less
const plotted = (logY) => (v) => (v === null || v === undefined ? v : logY && !(v > 0) ? null : v);

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
  const grouped = grouping();
  // what decides the best run and the end-of-line marks: the value shown, the directions, statuses
  const msig = [state.stat, lowerIsBetter(tag), grouped && JSON.stringify(state.group)];
  // nothing new for this chart (a run toggled elsewhere, a poll with no new points): nothing to do
  const dsig = JSON.stringify([ids.map((id) => [id, per[id]?.n, per[id]?.step.length, runLabel(runById(id)), colorOf(id), runById(id)?.status,
    metricValue(runById(id) || {}, tag)]), logY, xmode, $("#smoothing").value, width, msig]);
  if (c.u && c.dsig === dsig) return;
  c.dsig = dsig;
  const vsig = JSON.stringify([logY, xmode, $("#smoothing").value, width, msig]);
  if (c.u && c.vsig === vsig && !grouped && showInPlace(c, per, ids)) { c.best = bestOf(tag, c.series.map((s) => s.id)); finishCard(c, tag); c.u.redraw(false); return; }
  const series = grouped ? groupSeriesFor(tag, ids) : seriesFor(tag, ids);
  c.best = grouped ? bestGroup(tag, series) : bestOf(tag, series.map((s) => s.id));
  c.grouped = grouped;
  // few runs: the smoothed line, the raw one faint behind it and the min/max band; many runs: the
  // smoothed line only (the raw value is in the tooltip), else 50 runs are 200 series to draw.
  // Groups: each group's mean, and its band (min-max or +-std), whatever their number.
  const bandsOn = grouped || series.length <= MAX_BANDS;
  const pos = plotted(logY);
  const rawOn = bandsOn && !grouped;
  const tables = series.map((s) => [s.x, s.y.map(pos), ...(rawOn ? [s.raw.map(pos)] : []), ...(s.lo && bandsOn ? [s.lo.map(pos), s.hi.map(pos)] : [])]);
  const data = tables.length ? uPlot.join(tables) : [[]];
  const opts = [{}];
  const bands = [];
  let k = 1;
  for (const s of series) {
    const few = s.x.length <= 2;  // a single point (add_hparams' final metric) needs a marker, not a line
    // many runs: 1 px lines (stroking is most of a redraw: toggling one run of 50 on 20 charts
    // took ~200 ms with 2 px lines, ~110 ms with 1 px; 50 thick lines are a blur anyway)
    const top = s.id === c.best;  // the best run (or group) of this metric: drawn thicker, a star at its end
    opts.push({ label: s.label, stroke: s.color, width: (bandsOn ? 2 : 1) + (top ? 1.5 : 0), spanGaps: grouped, ...(s.dash ? { dash: s.dash } : {}),
      ...(few ? { points: { show: true, size: 8, fill: s.color } } : {}) });
    k += 1;
    if (rawOn) {
      opts.push({ label: s.label + " (raw)", stroke: alpha(s.color, 0.3), width: 1, points: { show: false } });
      k += 1;
    }
    if (s.lo && bandsOn) {
      opts.push({ label: "min", stroke: "transparent", points: { show: false } });
      opts.push({ label: "max", stroke: "transparent", points: { show: false } });
      bands.push({ series: [k + 1, k], fill: alpha(s.color, grouped ? 0.18 : 0.12) });
      k += 2;
    }
  }
  const sig = JSON.stringify([series.map((s) => [s.id, s.label, s.color, s.dash, !!s.lo]), bandsOn, logY, xmode, c.best]);
  if (c.u && c.sig === sig) {
    c.u.setData(data, !c.zoomed);  // live updates keep a zoomed view as it is
    if (c.u.width !== width) c.u.setSize({ width, height: 240 });
  } else {
    // a zoomed chart made anew (a run's line added, the best run changed) keeps its step range
    const keep = c.u && c.zoomed && c.xmode === xmode ? { min: c.u.scales.x.min, max: c.u.scales.x.max } : null;
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
        draw: [(u) => drawMarks(u, tag)],
        setCursor: [(u) => showTooltip(u, tag)],
        setSelect: [(u) => { if (u.select.width > 0) c.zoomed = true; }],
        setScale: [(u, key) => { if (key === "x") zoomedTo(tag); }],
      },
    }, data, (plot.replaceChildren(), plot));
    c.u.over.addEventListener("mouseleave", () => hideTooltip(tag));
    c.u.over.addEventListener("dblclick", () => resetZoom(tag));
    c.sig = c.fullSig = sig;
    c.xmode = xmode;
    if (keep && Number.isFinite(keep.min) && Number.isFinite(keep.max)) { c.zoomed = true; c.u.setScale("x", keep); }
  }
  c.all = series;  // what the uPlot instance holds, shown or not (showInPlace)
  for (const s of series) s.shown = true;
  c.vsig = vsig;
  c.series = series;
  c.bandsOn = bandsOn;
  c.rawOn = rawOn;
  c.detail = c.tip = null;  // drawn from the summaries again: a zoomed view asks for its points anew
  finishCard(c, tag);
  if (c.zoomed) zoomedTo(tag);
}

// Runs toggled on a chart of many (no bands): the runs it already holds are shown or hidden with
// uPlot's setSeries (the y range follows the runs shown) instead of the chart being made again.
// A new uPlot costs its DOM, the smoothing and joining of every series and a first draw; hiding one
// of 50 runs costs one redraw. Anything else (a run it does not hold, new points, another label or
// colour, 10 runs or fewer, whose bands come back): false, and the chart is made again.
function showInPlace(c, per, ids) {
  if (!c.all || c.bandsOn) return false;
  const want = ids.filter((id) => per[id] && per[id].n > 0);
  if (want.length <= MAX_BANDS) return false;
  const held = new Map(c.all.map((s) => [s.id, s]));
  for (const id of want) {
    const s = held.get(id);
    // only runs being shown are asked for a colour: asking for a hidden run's would give it one
    if (!s || s.src !== per[id] || s.label !== (runLabel(runById(id)) || id) || s.color !== colorOf(id) || s.dash !== dashOf(id)) return false;
  }
  const show = new Set(want);
  c.u.batch(() => c.all.forEach((s, i) => {
    if (s.shown !== show.has(s.id)) { s.shown = !s.shown; c.u.setSeries(i + 1, { show: s.shown }); }
  }));
  c.series = c.all.filter((s) => s.shown);
  if (c.detail) c.tip = c.detail.all.filter((_, i) => c.all[i].shown);
  // the data path (setData on an unchanged list of runs) only applies to a chart showing all it holds
  c.sig = c.series.length === c.all.length ? c.fullSig : null;
  return true;
}

// the card's legend and the canvas's data-* attributes (what the tests read) for the runs shown
function finishCard(c, tag) {
  const card = c.card, series = c.series;
  const canvas = c.u.ctx.canvas;
  canvas.dataset.tag = tag;
  canvas.dataset.runs = series.map((s) => s.id).join(",");
  canvas.dataset.points = series.map((s) => s.n).join(",");
  canvas.dataset.sent = (c.detail ? c.tip : series).map((s) => s.x.length).join(",");  // points drawn: at most ~2 per pixel
  if (!c.detail) delete canvas.dataset.detail;
  card._u = c.u;
  canvas.dataset.best = c.best || "";
  // the runs whose line ends in a cross (failed, interrupted, lost: drawMarks)
  canvas.dataset.ended = c.grouped ? "" : series.filter((s) => ["failed", "interrupted", "lost"].includes(runById(s.id)?.status)).map((s) => s.id).join(",");
  canvas.dataset.grouped = c.grouped ? "1" : "";
  // wrapped lines (scrolled past three), the best first; the values are in the tooltip
  const LEGEND = 24;
  const order = [...series].sort((a, b) => (b.id === c.best) - (a.id === c.best));
  const ended = (s) => { const st = runById(s.id)?.status; return ["failed", "interrupted", "lost"].includes(st) ? `, ${st}` : ""; };
  const what = (s) => s.group ? `${s.label}  (mean${state.group.band === "std" ? " ± std" : state.group.band === "minmax" ? ", min–max" : ""})`
    : `${s.label}  (${s.n} pts${s.downsampled ? ", downsampled" : ""}, last ${fmtNum(s.raw[s.raw.length - 1])}${ended(s)})`;
  canvas.dataset.mixed = series.filter((s) => s.codes > 1).map((s) => s.id).join(",");  // groups spanning code versions
  card.querySelector(".legend").replaceChildren(...order.slice(0, LEGEND).map((s) => el("span", { title: s.label, class: (s.id === c.best ? "best" : "") + (s.codes > 1 ? " mixed" : "") },
    el("span", { class: "swatch", style: `background:${s.color}` }), (s.id === c.best ? "★ " : "") + what(s))),
  ...(series.length > LEGEND ? [el("span", { class: "muted", text: `+${series.length - LEGEND} more: hover for values` })] : []));
}

// Marks at the end of lines: a star on the best run's (or group's), a cross on a failed,
// interrupted or lost run's (where it stopped), drawn over the plot after each redraw.
function drawMarks(u, tag) {
  const c = state.charts[tag];
  if (!c || !c.series) return;
  const g = u.ctx, dpr = window.devicePixelRatio || 1;
  const idx = new Map(c.all.map((s, i) => [s.id, i]));
  const tip = c.tip || c.detail?.all;
  g.save();
  for (const s of c.series) {
    const st = c.grouped ? null : runById(s.id)?.status;
    const bad = st === "failed" || st === "interrupted" || st === "lost";
    if (!bad && s.id !== c.best) continue;
    const src = (tip && tip[idx.get(s.id)]) || s;
    let j = src.y.length - 1;
    while (j >= 0 && (src.y[j] === null || src.y[j] === undefined)) j--;
    if (j < 0) continue;
    const x = u.valToPos(src.x[j], "x", true), y = u.valToPos(src.y[j], "y", true);
    if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
    const r = 5 * dpr;
    g.lineWidth = 2 * dpr;
    if (bad) {  // ✕ where it stopped
      g.strokeStyle = st === "lost" ? "#7a8294" : "#c62828";
      g.beginPath(); g.moveTo(x - r, y - r); g.lineTo(x + r, y + r); g.moveTo(x + r, y - r); g.lineTo(x - r, y + r); g.stroke();
    }
    if (s.id === c.best) {  // ★ at the best one's end
      g.fillStyle = s.color; g.strokeStyle = "#fff"; g.lineWidth = 1 * dpr;
      g.beginPath();
      for (let k = 0; k < 10; k++) {
        const a = -Math.PI / 2 + k * Math.PI / 5, rr = (k % 2 ? 0.45 : 1) * 7 * dpr;
        g.lineTo(x + rr * Math.cos(a), y + rr * Math.sin(a));
      }
      g.closePath(); g.fill(); g.stroke();
    }
  }
  g.restore();
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
  clearTimeout(c.detailTimer);
  c.detailSeq = (c.detailSeq || 0) + 1;  // a detail still in flight is dropped
  if (c.detail) {  // drawn from the zoomed range's points: the summaries come back
    // (a chart of many runs is made anew too: toggling runs in place would keep the detail)
    c.dsig = c.sig = c.vsig = null;
    drawScalarCard(tag, shownIds());
  } else c.u.setData(c.u.data, true);
}

// ---- a zoomed chart's detail -------------------------------------------------------------------
// A long series is drawn from a summary (bucket means, about one a pixel for the whole run): a
// zoom would only magnify it. Zoomed (step axis), a chart asks for the points of the step range
// it shows, sized to its width as a whole series is, and draws them until the zoom is reset or the
// chart is drawn again (then it asks again). Smoothing keeps its reach in steps: the weight is
// scaled by the ratio of the point spacings, and the average goes on from the summary's smoothed
// value at the range's start, so the line does not jump when the points arrive.
function zoomedTo(tag) {
  const c = state.charts[tag];
  if (!c || !c.u || !c.zoomed || c.grouped || $("#xaxis").value !== "step" || !c.all || !c.all.some((s) => s.downsampled)) return;
  const s0 = Math.floor(c.u.scales.x.min), s1 = Math.ceil(c.u.scales.x.max);
  if (!Number.isFinite(s0) || !Number.isFinite(s1) || (c.detail && c.detail.s0 === s0 && c.detail.s1 === s1)) return;
  clearTimeout(c.detailTimer);
  c.detailTimer = setTimeout(() => fetchDetail(tag, s0, s1), 60);
}

async function fetchDetail(tag, s0, s1) {
  const c = state.charts[tag];
  if (!c || !c.u || !c.zoomed) return;
  const u = c.u, all = c.all, seq = (c.detailSeq = (c.detailSeq || 0) + 1);
  let got;
  try {
    got = await api(`series?runs=${all.map((s) => s.id).join(",")}&px=${state.px}&tag=${encodeURIComponent(tag)}&from=${s0}&to=${s1}`);
  } catch (e) {
    console.error(e);
    return;
  }
  if (seq !== c.detailSeq || c.u !== u || c.all !== all || !c.zoomed) return;  // superseded meanwhile
  // a pointer down on the chart (a new drag may be starting): asked again after the release
  if (pressedIn(c.card)) { whenReleased("detail " + tag, () => zoomedTo(tag)); return; }
  const per = got[tag] || {};
  if (!Object.keys(per).length) return;  // no point in the range: the summary stays
  const w = parseFloat($("#smoothing").value), pos = plotted($("#logscale").checked);
  const detail = all.map((s) => {
    const d = per[s.id] || { step: [], wall: [], value: [] };
    return { ...s, x: d.step, step: d.step, wall: d.wall, raw: d.value, y: smoothFrom(s, d, w, s0),
      lo: d.min || d.value, hi: d.max || d.value, downsampled: !!d.downsampled };
  });
  const tables = detail.map((s, i) => [s.x, s.y.map(pos), ...(c.rawOn ? [s.raw.map(pos)] : []),
    ...(all[i].lo && c.bandsOn ? [s.lo.map(pos), s.hi.map(pos)] : [])]);
  const lo = u.scales.x.min, hi = u.scales.x.max;
  c.detail = { s0, s1, all: detail };
  c.tip = detail.filter((_, i) => all[i].shown);
  u.setData(uPlot.join(tables), false);
  u.setScale("x", { min: lo, max: hi });  // the same range; y fitted to the points in it
  const canvas = u.ctx.canvas;
  canvas.dataset.detail = `${s0}-${s1}`;
  canvas.dataset.sent = c.tip.map((s) => s.x.length).join(",");
}

// the smoothed line of a zoomed range's points d, going on from summary s's (see above)
function smoothFrom(s, d, w, s0) {
  if (!(w > 0) || !d.step.length) return d.value.slice();
  const gap = (a) => (a.length > 1 ? (a[a.length - 1] - a[0]) / (a.length - 1) : 0);
  const gs = gap(s.step), gd = gap(d.step);
  const wd = gs > 0 && gd > 0 ? Math.pow(w, gd / gs) : w;
  let j = nearest(s.step, s0);
  if (j >= 0 && s.step[j] > s0) j -= 1;
  let last = j >= 0 && s.y[j] !== null && s.y[j] !== undefined ? s.y[j] : null;
  if (last === null) return smooth(d.value, wd);
  return d.value.map((v) => (v === null ? null : (last = last * wd + (1 - wd) * v)));
}

//: tooltip rows shown (best values first); the rest are counted
const TIP_ROWS = 20;

// A crosshair tooltip: every run's (or group's) value at the cursor's x, sorted the way the metric
// is better (lowest first for a loss), inside the window. The best run of the chart is always
// listed, marked with a star, even when more runs are near the cursor than rows are shown.
function showTooltip(u, tag) {
  const c = state.charts[tag];
  const idx = u.cursor.idx;
  if (idx === null || idx === undefined || !c || !c.series) { hideTooltip(tag); return; }
  const x = u.data[0][idx];
  const xmode = $("#xaxis").value;
  const found = [];
  const tol = ((u.scales.x.max ?? 0) - (u.scales.x.min ?? 0)) / 40;
  for (const s of c.tip || c.series) {
    // the run's point nearest to the cursor's x (its steps need not be the other runs' steps),
    // if it has one near there: a run that ended earlier is not listed at the end of another
    const j = nearest(s.x, x);
    if (j >= 0 && Math.abs(s.x[j] - x) <= tol) found.push([s.raw[j], s.y[j], s, j]);
  }
  const low = lowerIsBetter(tag);
  const none = low ? Infinity : -Infinity;
  found.sort((a, b) => (low ? 1 : -1) * ((a[0] ?? none) - (b[0] ?? none)));
  let shown = found.slice(0, TIP_ROWS);
  const best = found.find((f) => f[2].id === c.best);
  if (best && !shown.includes(best)) shown = [...shown.slice(0, TIP_ROWS - 1), best];  // never hidden
  const band = (s, j) => {
    if (!s.group) return ` (smoothed ${fmtNum(s.y[j])})`;
    const a = s.agg;
    if (!a || j >= a.count.length) return "";
    const spread = state.group.band === "std" ? ` ± ${fmtNum(a.sd[j])}` : ` [${fmtNum(a.min[j])}, ${fmtNum(a.max[j])}]`;
    return `${spread} · ${a.count[j]} of ${s.members.length} run${s.members.length === 1 ? "" : "s"}`;
  };
  const rows = shown.map(([v, sm, s, j]) => el("div", { class: "tip-row" + (s.id === c.best ? " best" : "") },
    el("span", { class: "swatch", style: `background:${s.color}` }), el("b", { class: "tip-val", text: fmtNum(v) }),
    el("span", { class: "tip-label", text: (s.id === c.best ? "★ " : "") + s.label }), el("span", { class: "muted", text: band(s, j) })));
  if (found.length > shown.length) rows.push(el("div", { class: "muted", text: `… and ${found.length - shown.length} more` }));
  let tip = c.card.querySelector(".tooltip");
  if (!tip) { tip = el("div", { class: "tooltip" }); c.card.querySelector(".plot").append(tip); }
  const xl = xmode === "wall" ? new Date(x * 1000).toLocaleString() : `${xmode === "step" ? "step" : "t"} ${fmtNum(x)}${xmode === "relative" ? " s" : ""}`;
  const notes = new Set(shown.map(([, , s, j]) => bucketNote(s, j)).filter((n) => n));
  const note = notes.size === 1 ? [...notes][0] : notes.size ? "values are bucket means (summarised series)" : "";
  const order = `${low ? "lowest" : "highest"} first`;
  tip.replaceChildren(el("b", { text: xl }), ...(note ? [el("span", { class: "muted tip-note", text: ` · ${note}` })] : []),
    el("span", { class: "muted tip-order", text: ` · ${order}` }), ...rows);
  // fixed to the window and kept inside it: right of the cursor, else left; below, else above
  const box = u.over.getBoundingClientRect();
  const cx = box.left + u.cursor.left, cy = box.top + u.cursor.top;
  const w = tip.offsetWidth, h = tip.offsetHeight, W = document.documentElement.clientWidth, H = window.innerHeight;
  let left = cx + 14 + w <= W - 4 ? cx + 14 : cx - 14 - w;
  let top = cy + 10 + h <= H - 4 ? cy + 10 : cy - 10 - h;
  tip.style.left = Math.max(4, Math.min(left, W - w - 4)) + "px";
  tip.style.top = Math.max(4, Math.min(top, H - h - 4)) + "px";
}

// A summarised series' point is a bucket's mean, not a logged value: the tooltip says which steps
// it stands for (its min and max are the band, with 10 runs or fewer). The last point is exact.
function bucketNote(s, j) {
  if (!s.downsampled || j >= s.step.length - 1) return "";
  const a = s.step[j], b = s.step[j + 1] - 1;
  return b > a ? `mean of steps ${a}–${b}` : "";
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

async function downloadCsv(tag) {
  const c = state.charts[tag];
  if (!c) return;
  // every point as logged, read for the download: the chart holds bucket means, not logged values
  const ids = seriesFor(tag, shownIds()).map((s) => s.id);
  let got;
  try {
    got = await api(`points?runs=${ids.join(",")}&tag=${encodeURIComponent(tag)}`);
  } catch (e) {
    c.card.querySelector(".legend").replaceChildren(el("span", { class: "error", text: `CSV: ${e.message}` }));
    return;
  }
  const q = (s) => `"${String(s).replace(/"/g, '""')}"`;
  const lines = ["run,id,arguments,step,wall_time,value"];
  for (const id of ids) {
    const d = got[id];
    if (!d) continue;
    const r = runById(id) || { id, hparams: {} };
    d.step.forEach((st, i) => lines.push([id, q(idText(r)), q(argText(r.hparams)), st, d.wall[i], d.value[i]].join(",")));
  }
  const a = el("a", { href: URL.createObjectURL(new Blob([lines.join("\n") + "\n"], { type: "text/csv" })),
    download: `${tag.replace(/[^A-Za-z0-9._-]+/g, "_")}.csv` });
  document.body.append(a);
  a.click();
  a.remove();
}

