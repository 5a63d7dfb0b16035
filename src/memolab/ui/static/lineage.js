// memolab dashboard: lineage. An evaluation's panel (its arguments, result, the evaluations its
// inputs came from and those that used it, each a link), and the Pipeline tab: the graph of
// functions and evaluations around the selected runs (their inputs and users, transitively), one
// column per function in pipeline order, edges routed apart, a sweep one node per group, code
// changes marked.
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
  const seq = state.evalSeq = (state.evalSeq || 0) + 1;
  const e = await api(`evaluation?id=${id}`);
  if (seq !== state.evalSeq) return;  // another evaluation was clicked meanwhile: its panel, not this one
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
// Drawn so that every edge can be traced at a sweep's scale (issue 54: 26 train -> evaluate edges
// shared one vertical bus): the evaluations of a column are ordered by where their inputs are
// (barycentres, a few sweeps up and down), each sits level with the input it was made from when it
// can, and an edge that passes a column takes a lane of its own in it (one per source and column,
// reserved among the column's boxes), so an edge runs only through the gaps between columns and
// through its lanes: never under a box or a title. Edges leave and enter a box at ports of their
// own along its side, so no two share an end. A sweep with many evaluations of one function is
// drawn one node per group (the charts' grouping, else its categorical argument), with a count;
// a click opens a group.
const NODE_MIN_W = 190, NODE_MAX_W = 330, NODE_H = 44, COL_GAP = 96, ROW_GAP = 14, PAD = 16, LANE_H = 8, TOP = PAD + 22, LOOP = 14;
//: a box's width: as wide as its graph's longest label needs, within NODE_MIN_W..NODE_MAX_W
let nodeW = NODE_MIN_W;
//: evaluations of one function past which a sweep is drawn one node per group
const PIPE_MANY = 12;
// a label cut to what fits in a box (with an ellipsis), measured in the font it is drawn in: an
// edge must not run under a label that spills out of its box
let fitCtx = null;
function textWidth(text, font) {
  if (!fitCtx) fitCtx = document.createElement("canvas").getContext("2d");
  fitCtx.font = font;
  return fitCtx.measureText(String(text)).width;
}
function fitText(text, px, font) {
  text = String(text);
  if (textWidth(text, font) <= px) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) { const m = (lo + hi + 1) >> 1; if (textWidth(text.slice(0, m) + "…", font) <= px) lo = m; else hi = m - 1; }
  return text.slice(0, lo) + "…";
}
const TITLE_FONT = "600 12px system-ui, -apple-system, \"Segoe UI\", sans-serif", SUB_FONT = "10px system-ui, -apple-system, \"Segoe UI\", sans-serif";
const shortTime = (t) => t ? new Date(t * 1000).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }) : "–";

function pipeState() {
  if (!state.pipe) state.pipe = { by: "", open: new Set(), graph: null };
  return state.pipe;
}

function selectedEvaluations() {
  // the selection as the charts draw it: narrowed by the run filter
  const ids = shownIds().map(runById).filter((r) => r && r.stored && r.eval_id).map((r) => r.eval_id);
  return [...new Set([...(state.pipelineFocus || []), ...ids])];
}

async function renderPipeline() {
  const box = $("#pipeline");
  const ids = selectedEvaluations();
  state.pipelineFocus = null;
  if (!ids.length) { pipeState().graph = null; box.replaceChildren(el("p", { class: "muted", text: "Select stored evaluations to see the pipeline they belong to." })); return; }
  pipeState().graph = followSelection(await api(`lineage?evals=${ids.slice(0, MAX_IDS).join(",")}`));
  drawPipelineBox();
}

// the metric the labels show is the one the runs table sorts by: sorting by another draws them again
function pipelineMetricChanged() {
  const ps = pipeState();
  if (state.tab === "pipeline" && ps.graph && ps.metric !== state.primary) drawPipelineBox();
}

// the graph fetched last, drawn again (collapsing or opening a group asks the server nothing)
function drawPipelineBox() {
  const ps = pipeState(), g0 = ps.graph;
  if (!g0) return;
  // a node pressed (a click under way) is not replaced by a live redraw: drawn after the release
  if (pressedIn($("#pipeline"))) { whenReleased("pipeline", drawPipelineBox); return; }
  ps.metric = state.primary;
  const { g, by, groups } = collapseSweep(g0);
  const opts = [["", `automatic${by && !ps.by ? ` (${pipeByText(by)})` : ""}`], ["none", "nothing"],
    ...(grouping() ? [["@group", `the charts' groups (${pipeByText("@group")})`]] : []),
    ...varyingKeys().map((k) => [k, k]), [BY_CODE, "code version"]];
  const sel = el("select", { id: "pipe-by", onchange: () => { ps.by = sel.value; ps.open.clear(); saveUrl(); drawPipelineBox(); } },
    ...opts.map(([v, t]) => el("option", { value: v, text: t })));
  sel.value = opts.some(([v]) => v === ps.by) ? ps.by : "";
  const open = [...ps.open].sort().map((k) => el("button", { type: "button", class: "chip", "data-open": k, title: "draw this group as one node again",
    onclick: () => { ps.open.delete(k); drawPipelineBox(); } }, `${k} ✕`));
  const nodes = g.nodes.filter((n) => !n.cluster).length + g.nodes.filter((n) => n.cluster).reduce((s, n) => s + n.members.length, 0);
  $("#pipeline").replaceChildren(
    el("div", { class: "controls small", id: "pipe-controls" }, el("label", {}, "sweeps: one node per ", sel),
      groups ? el("span", { class: "muted", text: ` ${groups} group node(s); click one to open it ` }) : "",
      ...(open.length ? [el("span", { class: "muted", text: " opened: " }), ...open] : [])),
    drawPipeline(g),
    el("p", { class: "muted small", id: "pipe-summary", text:
      `${nodes} evaluation(s) of ${new Set(g.nodes.map((n) => n.fn)).size} function(s), ${g0.edges.length} edge(s)`
      + (g0.siblings ? ` (${g0.siblings} other evaluation(s) made from the same inputs left out)` : "") + "; "
      + "columns in pipeline order, each ordered to keep edges apart; hover an evaluation to trace its edges, click it for its inputs and users"
      + (g0.truncated ? " (cut: too many to draw)" : "") }));
}

// Follow the selection: the selected evaluations, what they were made from (upstream, transitively)
// and what was made from them (downstream), not the rest of what their inputs fed: with 2 of a
// sweep's runs selected the tab drew all 26 train and 26 evaluate nodes of the sweep's prepare.
function followSelection(g) {
  const sel = g.nodes.filter((n) => n.selected).map((n) => String(n.id));
  if (!sel.length) return g;
  const { up, down } = adjacency(g.edges);
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

function adjacency(edges) {
  const up = new Map(), down = new Map();
  const add = (m, a, b) => { if (!m.has(a)) m.set(a, []); m.get(a).push(b); };
  for (const e of edges) { add(down, String(e.from), String(e.to)); add(up, String(e.to), String(e.from)); }
  return { up, down };
}

// the run of the function on show that stored an evaluation (a map made once per list of runs)
let evalRuns = { runs: null, map: null };
function runOfEval(id) {
  if (evalRuns.runs !== state.runs) evalRuns = { runs: state.runs, map: new Map((state.runs || []).filter((r) => r.stored && r.eval_id).map((r) => [String(r.eval_id), r])) };
  return evalRuns.map.get(String(id));
}

// ---- a sweep, one node per group -------------------------------------------------------------------
function pipeByText(by) { return by === "@group" ? (state.group.by === BY_CODE ? "code version" : state.group.by) : by === BY_CODE ? "code version" : by; }

// what the sweep is collapsed by: the user's choice; automatically the charts' grouping when it is
// on, else the argument that varies with the fewest values, one that is not a number first
// (optimizer before seed: a sweep is read per optimizer)
function pipeCollapseBy() {
  const by = pipeState().by;
  if (by === "none") return null;
  // (a choice this function cannot make, from another function's URL: automatic)
  if (by && (by === BY_CODE || (by === "@group" ? grouping() : varyingKeys().includes(by)))) return by;
  if (grouping()) return "@group";
  const runs = state.runs || [];
  const cands = varyingKeys().map((k) => {
    const vals = runs.map((r) => (r.hparams || {})[k]).filter((v) => v !== undefined);
    return [k, new Set(vals.map((v) => JSON.stringify(v))).size, vals.every((v) => typeof v !== "number")];
  }).filter(([, n]) => n >= 2 && n < runs.length);
  cands.sort((a, b) => (b[2] - a[2]) || (a[1] - b[1]));
  return cands.length ? cands[0][0] : null;
}

function pipeGroupOf(r, by) {
  if (by === "@group") return groupKey(r);
  if (by === BY_CODE) return r.code ? `code ${r.code.slice(0, 7)}` : null;
  const v = (r.hparams || {})[by];
  return v === undefined ? null : `${by}=${fmtArg(v)}`;
}

// The evaluations of the function on show take their run's group; another function's evaluation
// takes the group of the ones on show it was made from or that were made from it, when they are of
// one group (the evaluate made from an adam train; not the prepare that fed every group). A
// function with more than PIPE_MANY evaluations in view is then drawn one node per group and
// function, except the groups the user opened. Edges between two group nodes are drawn once.
function collapseSweep(g) {
  const ps = pipeState();
  const perFn = new Map();
  for (const n of g.nodes) perFn.set(n.fn, (perFn.get(n.fn) || 0) + 1);
  const by = pipeCollapseBy();
  if (!by || ![...perFn.values()].some((c) => c > PIPE_MANY)) return { g, by, groups: 0 };
  const fnOf = new Map(g.nodes.map((n) => [String(n.id), n.fn]));
  const key = new Map();
  for (const n of g.nodes) {
    if (n.fn !== state.fn) continue;
    const r = runOfEval(n.id), k = r ? pipeGroupOf(r, by) : null;
    if (k !== null && k !== undefined) key.set(String(n.id), k);
  }
  const { up, down } = adjacency(g.edges);
  for (const n of g.nodes) {
    if (n.fn === state.fn) continue;
    const ks = new Set();
    let unknown = false;
    for (const adj of [up, down]) {
      const seen = new Set([String(n.id)]), todo = [String(n.id)];
      while (todo.length) for (const y of adj.get(todo.pop()) || []) {
        if (seen.has(y)) continue;
        seen.add(y);
        if (fnOf.get(y) === state.fn) { if (key.has(y)) ks.add(key.get(y)); else unknown = true; } else todo.push(y);
      }
    }
    if (ks.size === 1 && !unknown) key.set(String(n.id), [...ks][0]);
  }
  const members = new Map();
  for (const n of g.nodes) {
    const k = key.get(String(n.id));
    if (k === undefined || ps.open.has(k) || perFn.get(n.fn) <= 1) continue;
    const c = `c:${n.fn}|${k}`;
    if (!members.has(c)) members.set(c, []);
    members.get(c).push(n);
  }
  const into = new Map();
  const nodes = [];
  for (const n of g.nodes) {
    const c = `c:${n.fn}|${key.get(String(n.id))}`;
    const ms = members.get(c);
    if (!ms || ms.length < 2) { nodes.push(n); continue; }
    into.set(String(n.id), c);
    if (ms[0] !== n) continue;
    const codes = new Set(ms.map((m) => m.code).filter(Boolean));
    nodes.push({ id: c, fn: n.fn, cluster: true, key: key.get(String(n.id)), members: ms, codes: codes.size,
      selected: ms.some((m) => m.selected), code_changed: ms.some((m) => m.code_changed), status: ms.every((m) => m.status === "done") ? "done" : "mixed" });
  }
  const to = (id) => into.get(String(id)) || id;
  const seen = new Map(), edges = [];
  for (const e of g.edges) {
    const a = to(e.from), b = to(e.to);
    if (a === b) continue;  // within a group (f(f(x)) of one group)
    const k = `${a}|${b}`;
    if (seen.has(k)) { const x = seen.get(k); x.count++; if (!x.paths.includes(e.path)) x.paths.push(e.path); continue; }
    const x = { ...e, from: a, to: b, count: 1, paths: [e.path] };
    seen.set(k, x);
    edges.push(x);
  }
  for (const x of edges) x.path = x.paths.join(", ");
  const missing = (g.missing || []).map((m) => ({ ...m, to: to(m.to) }));
  return { g: { ...g, nodes, edges, missing }, by, groups: nodes.filter((n) => n.cluster).length };
}

// ---- layout ------------------------------------------------------------------------------------------
// the column of each function: the longest chain of functions feeding it (its depth in the pipeline)
function functionColumns(nodes, edges) {
  const fnOf = new Map(nodes.map((n) => [String(n.id), n.fn]));
  const feeds = new Map();
  for (const e of edges) {
    const a = fnOf.get(String(e.from)), b = fnOf.get(String(e.to));
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

// nodes -> {fns, col, items (per column, top to bottom), y, routes}: items are the nodes and one lane
// per (source, column passed); a route is an edge's chain of item ids from its source to its target
function layoutPipeline(nodes, edges) {
  const depth = functionColumns(nodes, edges);
  const fns = [...new Set(nodes.map((n) => n.fn))].sort((a, b) => depth.get(a) - depth.get(b) || (a < b ? -1 : 1));
  const col = new Map(fns.map((f, i) => [f, i]));
  const byId = new Map(nodes.map((n) => [String(n.id), n]));
  const items = fns.map(() => []), h = new Map(), colOf = new Map();
  for (const n of nodes) { const c = col.get(n.fn); items[c].push(String(n.id)); h.set(String(n.id), NODE_H); colOf.set(String(n.id), c); }
  const routes = [], up = new Map(), down = new Map();
  const link = (a, b) => {
    if (!down.has(a)) down.set(a, []); if (!up.has(b)) up.set(b, []);
    if (!down.get(a).includes(b)) { down.get(a).push(b); up.get(b).push(a); }
  };
  for (const e of edges) {
    const a = String(e.from), b = String(e.to);
    if (!byId.has(a) || !byId.has(b)) continue;
    const ca = colOf.get(a), cb = colOf.get(b), hops = [a];
    for (let c = ca + 1; c < cb; c++) {  // a lane in each column it passes, shared by its source's edges
      const w = `w:${a}@${c}`;
      if (!h.has(w)) { items[c].push(w); h.set(w, LANE_H); colOf.set(w, c); }
      hops.push(w);
    }
    hops.push(b);
    if (cb > ca) for (let i = 1; i < hops.length; i++) link(hops[i - 1], hops[i]);
    routes.push({ e, hops, back: cb < ca, same: cb === ca });
  }
  // order: barycentres of the neighbours in the column before (down the columns), then after (up)
  const idx = new Map();
  const reindex = (c) => items[c].forEach((id, i) => idx.set(id, i));
  items.forEach((_, c) => reindex(c));
  const sortCol = (c, nb) => {
    const bc = (id) => { const ns = nb.get(id) || []; return ns.length ? ns.reduce((s, x) => s + idx.get(x), 0) / ns.length : idx.get(id); };
    const keyed = items[c].map((id) => [id, bc(id), idx.get(id)]);
    keyed.sort((x, y) => (x[1] - y[1]) || (x[2] - y[2]));
    items[c] = keyed.map((k) => k[0]);
    reindex(c);
  };
  for (let pass = 0; pass < 4; pass++) {
    if (pass % 2 === 0) for (let c = 1; c < items.length; c++) sortCol(c, up);
    else for (let c = items.length - 2; c >= 0; c--) sortCol(c, down);
  }
  // heights: level with the evaluations (not lanes) it was made from, else with its lanes, pushed
  // down to keep the gap; then a source (nothing before it) level with what it fed
  const y = new Map();
  const mid = (ids) => ids.reduce((s, x) => s + y.get(x) + h.get(x) / 2, 0) / ids.length;
  const place = (c, want) => {
    let next = TOP;
    for (const id of items[c]) {
      const w = want(id);
      const yy = Math.max(next, w === null ? next : w - h.get(id) / 2);
      y.set(id, yy);
      next = yy + h.get(id) + ROW_GAP;
    }
  };
  for (let c = 0; c < items.length; c++) {
    place(c, (id) => {
      const ns = (up.get(id) || []).filter((x) => y.has(x)), real = ns.filter((x) => !x.startsWith("w:"));
      return real.length ? mid(real) : ns.length ? mid(ns) : null;
    });
  }
  for (let c = items.length - 2; c >= 0; c--) {
    if (items[c].some((id) => (up.get(id) || []).length)) continue;  // only a column of sources moves
    place(c, (id) => { const ns = (down.get(id) || []).filter((x) => y.has(x)); return ns.length ? mid(ns) : null; });
  }
  return { fns, col, colOf, items, y, h, routes, byId };
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
  const titles = g.nodes.map((n) => { const l = n.cluster ? null : pipelineLabel(n); return l ? l.title : ""; });
  nodeW = Math.round(Math.min(NODE_MAX_W, Math.max(NODE_MIN_W, 16 + Math.max(0, ...titles.map((t) => textWidth(t, TITLE_FONT))))));
  const L = layoutPipeline([...g.nodes, ...ghosts], edges);
  const colX = (c) => PAD + c * (nodeW + COL_GAP);
  const bottom = Math.max(TOP + NODE_H, ...[...L.y.entries()].map(([id, v]) => v + L.h.get(id)));
  const backs = L.routes.filter((r) => r.back);
  const W = PAD * 2 + L.fns.length * nodeW + (L.fns.length - 1) * COL_GAP + LOOP;
  const H = bottom + PAD + (backs.length ? 8 + 4 * backs.length : 0);
  // ports: a box's edges leave (right side) and enter (left side) at points of their own, in the
  // order of the other end's height, so that two edges never share an end
  const outs = new Map(), ins = new Map();
  const addPort = (m, id, other) => { if (!m.has(id)) m.set(id, []); if (!m.get(id).includes(other)) m.get(id).push(other); };
  for (const r of L.routes) {
    if (r.back || r.same) { addPort(outs, r.hops[0], "~" + r.hops[r.hops.length - 1]); addPort(ins, r.hops[r.hops.length - 1], "~" + r.hops[0]); continue; }
    for (let i = 1; i < r.hops.length; i++) { addPort(outs, r.hops[i - 1], r.hops[i]); addPort(ins, r.hops[i], r.hops[i - 1]); }
  }
  const yOf = (id) => (id.startsWith("~") ? L.y.get(id.slice(1)) ?? bottom : L.y.get(id));
  for (const m of [outs, ins]) for (const list of m.values()) list.sort((a, b) => yOf(a) - yOf(b));
  const port = (m, id, other) => {
    const list = m.get(id) || [other], k = Math.max(0, list.indexOf(other)), hh = L.h.get(id);
    return L.y.get(id) + (id.startsWith("w:") ? hh / 2 : hh * (k + 1) / (list.length + 1));
  };
  const svg = svgEl("svg", { id: "pipeline-graph", width: String(W), height: String(H), viewBox: `0 0 ${W} ${H}` });
  svg.append(svgEl("defs", {}, svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
    svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a93a6" }))));
  L.fns.forEach((f, i) => svg.append(svgEl("text", { class: "col-title", x: String(colX(i)), y: String(PAD + 8), text: shortFn(f) },
    svgEl("title", { text: f }))));
  const curve = (x1, y1, x2, y2) => `C ${(x1 + x2) / 2} ${y1}, ${(x1 + x2) / 2} ${y2}, ${x2} ${y2}`;
  backs.forEach((r, i) => { r.lane = bottom + 8 + 4 * i; });
  for (const r of L.routes) {
    const { e, hops } = r, a = hops[0], b = hops[hops.length - 1];
    const ca = L.colOf.get(a), cb = L.colOf.get(b);
    const x1 = colX(ca) + nodeW, y1 = port(outs, a, r.back || r.same ? "~" + b : hops[1]);
    const x2 = colX(cb), y2 = port(ins, b, r.back || r.same ? "~" + a : hops[hops.length - 2]);
    let d = `M ${x1} ${y1} `;
    if (r.same) {  // within a column (f(f(x))): out to the right, along the gap, back in from the right
      const xr = x1 + LOOP - 4;
      d += `L ${xr} ${y1} L ${xr} ${y2} L ${x1 + 2} ${y2}`;
    } else if (r.back) {  // to an earlier column (a cycle of functions): under every box
      const xr = x1 + LOOP - 4, xl = x2 - LOOP + 4;
      d += `L ${xr} ${y1} L ${xr} ${r.lane} L ${xl} ${r.lane} L ${xl} ${y2} L ${x2} ${y2}`;
    } else {
      let px = x1, py = y1;
      for (const w of hops.slice(1, -1)) {  // through the lane it has in each column passed
        const c = L.colOf.get(w), wy = L.y.get(w) + LANE_H / 2;
        d += curve(px, py, colX(c), wy) + ` L ${colX(c) + nodeW} ${wy} `;
        px = colX(c) + nodeW; py = wy;
      }
      d += curve(px, py, x2, y2);
    }
    const from = e.by === "gone" ? "an evaluation not stored any more" : String(e.from).startsWith("c:") ? String(e.from).split("|").pop() : `#${e.from}`;
    const dest = String(e.to).startsWith("c:") ? String(e.to).split("|").pop() : `#${e.to}`;
    svg.append(svgEl("path", { class: "edge" + (e.by === "content" ? " content" : e.by === "gone" ? " gone" : ""), d, "data-from": String(e.from), "data-to": String(e.to),
      "marker-end": "url(#arrow)", ...(e.count > 1 ? { "data-count": String(e.count), "stroke-width": String(Math.min(4, 1.4 + Math.log2(e.count) / 2)) } : {}) },
      svgEl("title", { text: `${from} → ${dest} as ${e.path}${e.by === "content" ? " (by content)" : ""}${e.count > 1 ? ` (${e.count} edges)` : ""}` })));
  }
  const at = (id) => `translate(${colX(L.colOf.get(id))},${L.y.get(id)})`;
  for (const x of ghosts) {
    svg.append(svgEl("g", { class: "node ghost", "data-fn": x.fn, "data-gone-for": String(x.to), "data-id": x.id, transform: at(x.id) },
      svgEl("rect", { width: String(nodeW), height: String(NODE_H), rx: "5" }),
      svgEl("text", { x: "8", y: "17", class: "n-title", text: shortFn(x.fn) }),
      svgEl("text", { x: "8", y: "34", class: "lost", text: "not stored any more" }),
      svgEl("title", { text: `${x.fn}: the evaluation #${x.to} took (as ${x.paths.join(", ")}) was cleared or collected` })));
  }
  for (const n of g.nodes) svg.append(n.cluster ? clusterNode(n, at(String(n.id))) : evalNode(n, at(String(n.id)), g));
  traceOnHover(svg);
  return svg;
}

function evalNode(n, transform, g) {
  const lost = (g.missing || []).filter((m) => m.to === n.id);
  const label = pipelineLabel(n), mark = n.code_changed;
  const node = svgEl("g", { class: "node" + (n.selected ? " selected" : "") + (n.code_changed ? " changed" : "") + (n.status !== "done" ? " out" : ""),
    "data-eval": String(n.id), "data-id": String(n.id), "data-fn": n.fn, transform, onclick: () => openEvaluation(n.fn, n.id) },
    svgEl("rect", { width: String(nodeW), height: String(NODE_H), rx: "5" }),
    svgEl("text", { x: "8", y: "17", class: "n-title", text: fitText(label ? label.title : `${shortFn(n.fn)} #${n.id}`, nodeW - 16 - (mark ? 80 : 0), TITLE_FONT) }),
    svgEl("text", { x: "8", y: "34", class: "n-sub", text: fitText(label && label.sub ? label.sub : `${shortTime(n.finished)} · code ${(n.code || "").slice(0, 6)}`, nodeW - 16, SUB_FONT) }),
    svgEl("title", { text: `${n.fn} #${n.id}\n${n.result || ""}${n.code_changed ? "\ncode changed since the function's evaluation before it" : ""}`
      + (lost.length ? "\ninputs not stored any more: " + lost.map((m) => `${m.path} ← ${shortFn(m.function)}`).join(", ") : "") }));
  if (mark) node.append(svgEl("text", { x: String(nodeW - 8), y: "17", class: "mark", "text-anchor": "end", text: "code changed" }));
  return node;
}

// one node for a group's evaluations of one function: its group, how many, the best value of the
// chosen metric among them; a click draws them one by one
function clusterNode(n, transform) {
  const m = state.primary;
  const runs = n.members.map((x) => runOfEval(x.id)).filter(Boolean);
  let best = null;
  if (m) for (const r of runs) { const v = metricValue(r, m); if (typeof v === "number" && better(m, v, best)) best = v; }
  const sub = `${n.members.length} evaluations` + (n.codes > 1 ? ` · ${n.codes} codes` : "") + (best !== null ? ` · ${m} ${fmtNum(best)}` : "");
  const ps = pipeState();
  return svgEl("g", { class: "node cluster" + (n.selected ? " selected" : "") + (n.codes > 1 ? " changed" : ""), "data-id": String(n.id), "data-fn": n.fn,
    "data-group": n.key, "data-count": String(n.members.length), transform, onclick: () => { ps.open.add(n.key); drawPipelineBox(); } },
    // (the stack behind it peeks out above only: its sides are where edges leave and enter)
    svgEl("rect", { class: "stack", x: "4", y: "-4", width: String(nodeW - 4), height: String(NODE_H), rx: "5" }),
    svgEl("rect", { width: String(nodeW), height: String(NODE_H), rx: "5" }),
    svgEl("text", { x: "8", y: "17", class: "n-title", text: fitText(n.key, nodeW - 48, TITLE_FONT) }),
    svgEl("text", { x: String(nodeW - 8), y: "17", class: "count", "text-anchor": "end", text: `×${n.members.length}` }),
    svgEl("text", { x: "8", y: "34", class: "n-sub", text: fitText(sub, nodeW - 16, SUB_FONT) }),
    svgEl("title", { text: `${n.fn}: ${n.members.length} evaluations of ${n.key} (${n.members.map((x) => "#" + x.id).join(" ")})`
      + (best !== null ? `\nbest ${m}: ${fmtNum(best)}` : "") + (n.codes > 1 ? `\n${n.codes} code versions` : "") + "\nclick to draw them one by one" }));
}

// hovering a box brings out its edges and the boxes at their other ends; the rest fades
function traceOnHover(svg) {
  const nodes = [...svg.querySelectorAll("g.node")], paths = [...svg.querySelectorAll("path.edge")];
  for (const g of nodes) {
    const id = g.dataset.id;
    g.addEventListener("mouseenter", () => {
      const near = new Set([id]);
      for (const p of paths) {
        const on = p.dataset.from === id || p.dataset.to === id;
        p.classList.toggle("hi", on);
        if (on) { near.add(p.dataset.from); near.add(p.dataset.to); }
      }
      for (const x of nodes) x.classList.toggle("hi", near.has(x.dataset.id));
      svg.classList.add("tracing");
    });
    g.addEventListener("mouseleave", () => svg.classList.remove("tracing"));
  }
}

// a node's label: its run's name (or the arguments that vary) and the chosen metric's value, for
// the evaluations of the function on show (the others: their id and time, as before)
function pipelineLabel(n) {
  const r = runOfEval(n.id);
  if (!r) return null;
  const name = r.name || argText(Object.fromEntries(varyingKeys().filter((k) => k in (r.hparams || {})).map((k) => [k, r.hparams[k]])));
  const m = state.primary, v = m ? metricValue(r, m) : undefined;
  if (!name && (!m || v === undefined)) return null;  // nothing to add to the function and id
  return { title: name ? `#${n.id} ${name}` : `${shortFn(n.fn)} #${n.id}`,
    sub: m && v !== undefined ? `${m} ${fmtNum(v)}` : null };
}
