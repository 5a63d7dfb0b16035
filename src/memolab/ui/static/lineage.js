// memolab dashboard: lineage. An evaluation's panel (its arguments, result, the evaluations its
// inputs came from and those that used it, each a link), and the Pipeline tab: the graph of
// functions and evaluations around the selected runs (their inputs and users, transitively), one
// column per function in pipeline order, evaluations newest first, code changes marked.
// Loaded before app.js (state, api, el, ... are its globals, resolved when these functions run).
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs = {}, ...kids) => {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
// `prepare` for `pkg.data:prepare`, `Trainer.fit` for a method, a nested function by its own name
const shortFn = (fn) => fn.split(":").pop().split("<locals>.").pop();

// ---- the evaluation panel ---------------------------------------------------------------------
function evalLink(fn, id, text) {
  if (id === null || id === undefined) return el("span", { class: "muted", text: `${text || shortFn(fn)} (not stored any more)` });
  return el("a", { href: "#", class: "lineage-link", "data-fn": fn, "data-eval": String(id), title: `${fn} #${id}`,
    onclick: (ev) => { ev.preventDefault(); openEvaluation(fn, id); } }, text || `${shortFn(fn)} #${id}`);
}

async function showEvaluation(id) {
  const box = $("#eval-panel");
  const e = await api(`evaluation?id=${id}`);
  state.panelEval = e.id;
  const rows = [["function", e.fn], ["status", e.status], ["finished", fmtTime(e.finished)], ["took", fmtDur(e.duration)],
    ["hits", String(e.hits ?? 0)], ["code", (e.code || "").slice(0, 12)], ["result", e.result ?? "–"]];
  const args = Object.entries(e.arguments || {});
  const inputs = e.inputs.map((i) => el("li", { "data-path": i.path }, el("code", { text: i.path }), " ← ",
    i.store ? el("span", { class: "muted", text: `${shortFn(i.function)} (another store)` }) : evalLink(i.function, i.evaluation),
    i.by === "content" ? el("span", { class: "muted small", text: " (by content)" }) : ""));
  const users = e.used_by.map((u) => el("li", {}, evalLink(u.function, u.evaluation), el("span", { class: "muted", text: ` as ${u.path}` })));
  box.replaceChildren(
    el("div", { class: "panel-head" }, el("h3", { text: `evaluation #${e.id} · ${shortFn(e.fn)}` }),
      el("button", { type: "button", class: "linkish", title: "close", onclick: closeEvaluation }, "✕")),
    el("table", { class: "kv" }, ...rows.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: String(v), title: String(v) })))),
    args.length ? el("div", { class: "small" }, el("b", { text: "arguments " }), args.map(([k, v]) => `${k}=${v}`).join(", ")) : "",
    el("h4", { text: "inputs" }), inputs.length ? el("ul", { id: "eval-inputs" }, ...inputs) : el("p", { class: "muted", id: "eval-inputs", text: "none from other evaluations" }),
    el("h4", { text: "used by" }), users.length ? el("ul", { id: "eval-users" }, ...users) : el("p", { class: "muted", id: "eval-users", text: "no evaluation used it yet" }),
    el("button", { type: "button", class: "linkish", onclick: () => { state.pipelineFocus = [e.id]; showTab("pipeline"); } }, "show its pipeline ⟶"));
  box.dataset.eval = String(e.id);
  box.classList.remove("hidden");
}

function closeEvaluation() {
  state.panelEval = null;
  $("#eval-panel").classList.add("hidden");
}

// go to an evaluation: its function, its run selected, its panel open
async function openEvaluation(fn, id) {
  if (state.fn !== fn) await selectFunction(fn, true);
  const run = state.runs.find((r) => r.eval_id === id && r.stored);
  if (run && typeof run.id === "number") setSelection([String(run.id)]);
  await showEvaluation(id);
}

// ---- the pipeline: a layered graph of evaluations, one column per function ---------------------
const NODE_W = 190, NODE_H = 44, COL_GAP = 70, ROW_GAP = 14, PAD = 16;
const shortTime = (t) => t ? new Date(t * 1000).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }) : "–";

function selectedEvaluations() {
  // the selection as the charts draw it: narrowed by the run filter
  const ids = shownIds().map(runById).filter((r) => r && r.stored && r.eval_id).map((r) => r.eval_id);
  return [...new Set([...(state.pipelineFocus || []), ...ids])];
}

async function renderPipeline() {
  const box = $("#pipeline");
  const ids = selectedEvaluations();
  state.pipelineFocus = null;
  if (!ids.length) { box.replaceChildren(el("p", { class: "muted", text: "Select stored evaluations to see the pipeline they belong to." })); return; }
  const g = followSelection(await api(`lineage?evals=${ids.slice(0, MAX_IDS).join(",")}`));
  box.replaceChildren(drawPipeline(g), el("p", { class: "muted small", text:
    `${g.nodes.length} evaluation(s) of ${new Set(g.nodes.map((n) => n.fn)).size} function(s), ${g.edges.length} edge(s)`
    + (g.siblings ? ` (${g.siblings} other evaluation(s) made from the same inputs left out)` : "") + "; "
    + "columns in pipeline order, newest first; click an evaluation for its inputs and users" + (g.truncated ? " (cut: too many to draw)" : "") }));
}

// Follow the selection: the selected evaluations, what they were made from (upstream, transitively)
// and what was made from them (downstream), not the rest of what their inputs fed: with 2 of a
// sweep's runs selected the tab drew all 26 train and 26 evaluate nodes of the sweep's prepare.
function followSelection(g) {
  const sel = g.nodes.filter((n) => n.selected).map((n) => String(n.id));
  if (!sel.length) return g;
  const up = new Map(), down = new Map();
  const add = (m, a, b) => { if (!m.has(a)) m.set(a, []); m.get(a).push(b); };
  for (const e of g.edges) { add(down, String(e.from), String(e.to)); add(up, String(e.to), String(e.from)); }
  const keep = new Set(sel);
  for (const adj of [up, down]) {
    const todo = [...sel];
    while (todo.length) for (const y of adj.get(todo.pop()) || []) if (!keep.has(y)) { keep.add(y); todo.push(y); }
  }
  const nodes = g.nodes.filter((n) => keep.has(String(n.id)));
  return { ...g, nodes, siblings: g.nodes.length - nodes.length,
    edges: g.edges.filter((e) => keep.has(String(e.from)) && keep.has(String(e.to))),
    missing: (g.missing || []).filter((m) => keep.has(String(m.to))) };
}

// a node's label: its run's name (or the arguments that vary) and the chosen metric's value, for
// the evaluations of the function on show (the others: their id and time, as before)
function pipelineLabel(n) {
  const r = (state.runs || []).find((x) => x.stored && String(x.eval_id) === String(n.id));
  if (!r) return null;
  const name = r.name || argText(Object.fromEntries(varyingKeys().filter((k) => k in (r.hparams || {})).map((k) => [k, r.hparams[k]])));
  const m = state.primary, v = m ? metricValue(r, m) : undefined;
  if (!name && (!m || v === undefined)) return null;  // nothing to add to the function and id
  return { title: name ? `#${n.id} ${name}`.slice(0, 30) : `${shortFn(n.fn)} #${n.id}`,
    sub: m && v !== undefined ? `${m} ${fmtNum(v)}`.slice(0, 32) : null };
}

// the column of each function: the longest chain of functions feeding it (its depth in the pipeline)
function functionColumns(nodes, edges) {
  const fnOf = new Map(nodes.map((n) => [n.id, n.fn]));
  const feeds = new Map();
  for (const e of edges) {
    const a = fnOf.get(e.from), b = fnOf.get(e.to);
    if (a && b && a !== b) { if (!feeds.has(b)) feeds.set(b, new Set()); feeds.get(b).add(a); }
  }
  const depth = new Map();
  const visit = (fn, stack) => {
    if (depth.has(fn)) return depth.get(fn);
    if (stack.has(fn)) return 0;  // a cycle of functions (f(g(f(x)))): cut it
    stack.add(fn);
    let d = 0;
    for (const up of feeds.get(fn) || []) d = Math.max(d, visit(up, stack) + 1);
    stack.delete(fn);
    depth.set(fn, d);
    return d;
  };
  for (const n of nodes) visit(n.fn, new Set());
  return depth;
}

function drawPipeline(g) {
  // an input no longer stored (cleared, collected) is drawn as a dashed ghost of its function,
  // one per function and evaluation that lost it
  const ghosts = [];
  const seenGhost = new Set();
  for (const m of g.missing || []) {
    const k = `${m.function}|${m.to}`;
    if (seenGhost.has(k)) { ghosts.find((x) => x.key === k).paths.push(m.path); continue; }
    seenGhost.add(k);
    ghosts.push({ key: k, id: `gone-${ghosts.length}`, fn: m.function, to: m.to, paths: [m.path], ghost: true });
  }
  const edges = [...g.edges, ...ghosts.map((x) => ({ from: x.id, to: x.to, path: x.paths.join(", "), by: "gone" }))];
  const depth = functionColumns([...g.nodes, ...ghosts], edges);
  const fns = [...new Set([...g.nodes, ...ghosts].map((n) => n.fn))].sort((a, b) => depth.get(a) - depth.get(b) || (a < b ? -1 : 1));
  // one column per function (two functions at one depth side by side); nodes newest first (server order)
  const col = new Map(fns.map((f, i) => [f, i]));
  const pos = new Map(), rowOf = new Map();
  for (const n of [...g.nodes, ...ghosts]) {
    const c = col.get(n.fn), r = rowOf.get(c) || 0;
    rowOf.set(c, r + 1);
    pos.set(n.id, { x: PAD + c * (NODE_W + COL_GAP), y: PAD + 22 + r * (NODE_H + ROW_GAP) });
  }
  const W = PAD * 2 + fns.length * NODE_W + (fns.length - 1) * COL_GAP;
  const H = PAD * 2 + 22 + Math.max(1, ...rowOf.values()) * (NODE_H + ROW_GAP);
  const svg = svgEl("svg", { id: "pipeline-graph", width: String(W), height: String(H), viewBox: `0 0 ${W} ${H}` });
  svg.append(svgEl("defs", {}, svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
    svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a93a6" }))));
  fns.forEach((f, i) => svg.append(svgEl("text", { class: "col-title", x: String(PAD + i * (NODE_W + COL_GAP)), y: String(PAD + 8), text: shortFn(f) },
    svgEl("title", { text: f }))));
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    let d;
    if (x2 - x1 > COL_GAP + 1 || x2 <= x1) {
      // past a column between them (or back to an earlier one): along the gap above the rows, never
      // under another evaluation's box (it would look like the edge went through it)
      // (lanes a few pixels apart by target, so that two such edges do not draw one line)
      const lane = Math.min(a.y, b.y) - ROW_GAP / 2 + ((Number(String(e.to).replace(/\D/g, "")) % 3) - 1) * 3, h = COL_GAP / 2;
      d = `M ${x1} ${y1} L ${x1 + h - 6} ${y1} Q ${x1 + h} ${y1} ${x1 + h} ${y1 - 6} L ${x1 + h} ${lane + 6} Q ${x1 + h} ${lane} ${x1 + h + 6} ${lane} `
        + `L ${x2 - h - 6} ${lane} Q ${x2 - h} ${lane} ${x2 - h} ${lane + 6} L ${x2 - h} ${y2 - 6} Q ${x2 - h} ${y2} ${x2 - h + 6} ${y2} L ${x2} ${y2}`;
    } else {
      d = `M ${x1} ${y1} C ${(x1 + x2) / 2} ${y1}, ${(x1 + x2) / 2} ${y2}, ${x2} ${y2}`;
    }
    const from = e.by === "gone" ? "an evaluation not stored any more" : `#${e.from}`;
    svg.append(svgEl("path", { class: "edge" + (e.by === "content" ? " content" : e.by === "gone" ? " gone" : ""), d, "data-from": String(e.from), "data-to": String(e.to),
      "marker-end": "url(#arrow)" }, svgEl("title", { text: `${from} → #${e.to} as ${e.path}${e.by === "content" ? " (by content)" : ""}` })));
  }
  for (const x of ghosts) {
    const p = pos.get(x.id);
    svg.append(svgEl("g", { class: "node ghost", "data-fn": x.fn, "data-gone-for": String(x.to), transform: `translate(${p.x},${p.y})` },
      svgEl("rect", { width: String(NODE_W), height: String(NODE_H), rx: "5" }),
      svgEl("text", { x: "8", y: "17", class: "n-title", text: shortFn(x.fn) }),
      svgEl("text", { x: "8", y: "34", class: "lost", text: "not stored any more" }),
      svgEl("title", { text: `${x.fn}: the evaluation #${x.to} took (as ${x.paths.join(", ")}) was cleared or collected` })));
  }
  for (const n of g.nodes) {
    const p = pos.get(n.id);
    const lost = (g.missing || []).filter((m) => m.to === n.id);
    const label = pipelineLabel(n);
    const node = svgEl("g", { class: "node" + (n.selected ? " selected" : "") + (n.code_changed ? " changed" : "") + (n.status !== "done" ? " out" : ""),
      "data-eval": String(n.id), "data-fn": n.fn, transform: `translate(${p.x},${p.y})`, onclick: () => openEvaluation(n.fn, n.id) },
      svgEl("rect", { width: String(NODE_W), height: String(NODE_H), rx: "5" }),
      svgEl("text", { x: "8", y: "17", class: "n-title", text: label ? label.title : `${shortFn(n.fn)} #${n.id}` }),
      svgEl("text", { x: "8", y: "34", class: "n-sub", text: label && label.sub ? label.sub : `${shortTime(n.finished)} · code ${(n.code || "").slice(0, 6)}` }),
      svgEl("title", { text: `${n.fn} #${n.id}\n${n.result || ""}${n.code_changed ? "\ncode changed since the function's evaluation before it" : ""}`
        + (lost.length ? "\ninputs not stored any more: " + lost.map((m) => `${m.path} ← ${shortFn(m.function)}`).join(", ") : "") }));
    if (n.code_changed) node.append(svgEl("text", { x: String(NODE_W - 8), y: "17", class: "mark", "text-anchor": "end", text: "code changed" }));
    svg.append(node);
  }
  return svg;
}
