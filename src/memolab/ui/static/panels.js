// memolab dashboard: histograms, images, text and the code diff (loaded before app.js, which holds
// the state and starts the page; HParams are in hpviz.js).
"use strict";

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
  if (!sections.length && ids.length) box.append(emptyHint("histogram"));
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
  if (!sections.length && ids.length) box.append(emptyHint(kind));
}

// an empty tab says what to log to fill it
const LOG_HINTS = {
  histogram: 'No histograms in these runs: memolab.log.histogram("fc1.weight", tensor) (or SummaryWriter.add_histogram) logs one.',
  image: 'No images in these runs: memolab.log.image("samples", array_HWC) or memolab.log.figure("confusion", fig) logs one.',
  text: 'No text in these runs: memolab.log.text("notes", "markdown text") (or SummaryWriter.add_text) logs some.',
};
function emptyHint(kind) { return el("p", { class: "muted empty-hint", "data-kind": kind, text: LOG_HINTS[kind] }); }

// ---- HParams: hpviz.js

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

