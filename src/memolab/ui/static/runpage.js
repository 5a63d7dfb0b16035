// memolab dashboard: a run's page (loaded before app.js; state, api, el, fmt* are its globals).
//
// What `memolab show RUN` says, in the page: status, arguments (typed summaries), the result's
// summary, final metrics, what it logged, its notes and tags (editable here: /api/annotate), its
// parent and child runs, and a failed or interrupted run's error, traceback and the tail of its
// output. Opened by the ⋯ of a row (or ?run=ID in the URL); the tabs come back with "back".
"use strict";

async function openRunPage(id) {
  state.page = String(id);
  saveUrl();
  const page = $("#run-page");
  let d;
  try {
    d = await api(`run?id=${encodeURIComponent(id)}`);
  } catch (e) {
    if (state.page !== String(id)) return;
    page.replaceChildren(el("p", { class: "error", text: `run ${id}: ${e.message}` }), backButton());
    showPage(true);
    return;
  }
  if (state.page !== String(id)) return;  // another page was opened meanwhile
  state.pageData = d;
  renderRunPage(d);
  showPage(true);
}

function closeRunPage(save = true) {
  state.page = null;
  state.pageData = null;
  showPage(false);
  if (save) saveUrl();
}

function showPage(on) {
  $("#run-page").classList.toggle("hidden", !on);
  for (const e of document.querySelectorAll("#tabs, main > section.tab")) e.classList.toggle("page-hidden", on);
  $("#empty").classList.toggle("page-hidden", on);
  document.body.dataset.page = on ? state.page : "";
}

function backButton() {
  return el("button", { type: "button", class: "back", onclick: () => closeRunPage() }, "← back to the charts");
}

function renderRunPage(d) {
  const r = runById(d.id) || d;
  const fields = [
    ["status", d.status + (d.error ? ` — ${d.error}` : "")],
    ["id", `${idText({ ...d, id: d.id })}  (run ${d.id})`],
    ["function", fnLabel(currentEntry() || { fn: d.fn }) === d.fn || !d.script ? d.fn : `${fnLabel(currentEntry())}  (${d.fn})`],
    ["evaluation", d.evaluation ? `#${d.evaluation.id}: ${d.evaluation.hits} hit(s), ${d.size === null || d.size === undefined ? "size unknown" : fmtBytes(d.size)}` : "none stored"],
    ["started", fmtTime(d.started)], ["took", fmtDur(d.duration)],
    ["code", (d.code || "–").slice(0, 16)], ["host", `${d.host || "–"}, pid ${d.pid || "–"}`],
    ...(d.script ? [["script", d.script]] : []),
    ["result", (d.evaluation && d.evaluation.result) || d.result || "–"],
  ];
  const dl = el("table", { class: "fields" }, ...fields.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: String(v) }))));
  if (d.parent) {
    dl.append(el("tr", {}, el("th", { text: "parent run" }), el("td", {}, el("a", { href: "#", text: runShort(d.parent),
      onclick: (ev) => { ev.preventDefault(); openRunPage(String(d.parent)); } }))));
  }
  if (d.children.length) {
    dl.append(el("tr", {}, el("th", { text: "child runs" }), el("td", {}, ...d.children.map((ch) => el("a", { href: "#",
      class: "child", text: `${ch.name || runShort(ch.id)} (${ch.status})`, onclick: (ev) => { ev.preventDefault(); openRunPage(String(ch.id)); } })))));
  }
  const args = Object.entries(d.hparams || {});
  const argTable = el("table", { class: "args" }, ...args.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: fmtArg(v) }))));
  const metrics = Object.entries(d.metrics || {}).sort(([a], [b]) => (isSysTag(a) - isSysTag(b)) || (a < b ? -1 : 1));
  const metricTable = el("table", { class: "args" }, ...metrics.map(([k, v]) => el("tr", {}, el("th", { text: k }),
    el("td", { class: "num", text: fmtNum(v) + (state.best && state.best[k] === String(d.id) ? "  ★ best" : "") }))));
  const logged = Object.entries(d.logged || {}).filter(([, ts]) => ts.length).map(([kind, ts]) => `${kind}: ${ts.length} tag${ts.length === 1 ? "" : "s"}`);
  const sections = [
    el("div", { class: "page-head" }, backButton(), el("h2", {},
      el("span", { class: "status " + d.status, text: d.status }), " ", d.label || d.name || runShort(d.id))),
    el("div", { class: "page-grid" },
      el("div", { class: "card" }, el("h3", { text: "Run" }), dl),
      el("div", { class: "card" }, el("h3", { text: "Tags and notes" }), tagsEditor(d), notesEditor(d))),
    el("div", { class: "page-grid" },
      el("div", { class: "card" }, el("h3", { text: `Arguments (${args.length})` }),
        args.length ? argTable : el("p", { class: "muted", text: "none" })),
      el("div", { class: "card" }, el("h3", { text: "Final metrics" }),
        metrics.length ? metricTable : el("p", { class: "muted", text: "No scalars logged: memolab.log.scalar(\"loss\", value) inside the function." }),
        el("p", { class: "muted small", text: logged.length ? `logged: ${logged.join(", ")}` : "nothing logged" }))),
  ];
  if (d.traceback || d.output || (d.status !== "done" && d.status !== "running")) {
    sections.push(el("div", { class: "card failure" }, el("h3", { text: d.status === "interrupted" ? "Interrupted" : d.status === "lost" ? "Lost" : "Failure" }),
      ...(d.error ? [el("p", { class: "error", text: d.error })] : []),
      ...(d.status === "lost" ? [el("p", { class: "muted", text: "Its process died without ending it (killed, out of memory, the machine went down): nothing more was recorded." })] : []),
      ...(d.traceback ? [el("h4", { text: "traceback" }), el("pre", { class: "traceback", text: d.traceback })] : []),
      ...(d.output ? [el("h4", { text: "output (its last lines)" }), el("pre", { class: "output", text: d.output })] : [])));
  }
  if (d.lineage) sections.push(lineageCard(d));
  $("#run-page").replaceChildren(...sections);
}

// What its evaluation was made from and what was made from it (store/edges.py, as `memolab show`
// and the Pipeline tab): each a link to that evaluation (lineage.js), and its whole pipeline.
function lineageCard(d) {
  const { inputs, used_by: users } = d.lineage;
  const from = inputs.map((i) => el("li", { "data-path": i.path }, el("code", { text: i.path }), " ← ",
    i.store ? el("span", { class: "muted", text: `${shortFn(i.function)} (another store)` }) : evalLink(i.function, i.evaluation),
    i.by === "content" ? el("span", { class: "muted small", text: " (by content)" }) : ""));
  const to = users.map((u) => el("li", {}, evalLink(u.function, u.evaluation), el("span", { class: "muted", text: ` as ${u.path}` })));
  return el("div", { class: "card lineage", id: "run-lineage" }, el("h3", { text: `Lineage of evaluation #${d.evaluation.id}` }),
    el("h4", { text: "made from" }), from.length ? el("ul", { class: "inputs" }, ...from) : el("p", { class: "muted inputs", text: "no other evaluation" }),
    el("h4", { text: "used by" }), to.length ? el("ul", { class: "users" }, ...to) : el("p", { class: "muted users", text: "no evaluation used it yet" }),
    el("button", { type: "button", class: "linkish show-pipeline", onclick: () => { state.pipelineFocus = [d.evaluation.id]; closeRunPage(false); showTab("pipeline"); } },
      "show its pipeline ⟶"));
}

// tags: chips with a × each, and a box to add one (Enter)
function tagsEditor(d) {
  const target = d.evaluation ? { evaluation: d.evaluation.id } : { run: d.id };
  const own = new Set(d.evaluation ? d.evaluation.run_tags : d.run_tags);
  const box = el("div", { class: "tags-edit" });
  for (const t of d.run_tags || []) {
    const mine = own.has(t);
    box.append(el("span", { class: "chip", "data-tag": t }, t, el("button", { type: "button", class: "x", title: "remove this tag",
      onclick: () => annotate({ ...(mine ? target : { run: d.id }), kind: "tag", op: "remove", text: t }) }, "×")));
  }
  const input = el("input", { type: "text", class: "tag-input", placeholder: "add a tag (Enter)", maxlength: "64" });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && input.value.trim()) annotate({ ...target, kind: "tag", op: "add", text: input.value.trim() });
  });
  box.append(input);
  const where = d.evaluation ? `on evaluation #${d.evaluation.id} (every run that produced it shows them)` : "on this run";
  return el("div", {}, box, el("p", { class: "muted small", text: `Tags and notes added here go ${where}; filter runs by a tag with tag:NAME.` }));
}

function notesEditor(d) {
  const target = d.evaluation ? { evaluation: d.evaluation.id } : { run: d.id };
  const list = el("div", { class: "notes" }, ...(d.notes || []).map((n) => el("div", { class: "note", "data-note": String(n.id) },
    el("div", { class: "note-head muted small" }, `${fmtTime(n.time)} · ${n.source || "?"} `,
      el("button", { type: "button", class: "linkish", onclick: () => annotate({ ...target, kind: "note", op: "remove", note_id: n.id }) }, "delete")),
    markdown(n.text))));
  const text = el("textarea", { class: "note-input", rows: "2", placeholder: "add a note (markdown; Ctrl+Enter)" });
  const add = () => { if (text.value.trim()) annotate({ ...target, kind: "note", op: "add", text: text.value }); };
  text.addEventListener("keydown", (ev) => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) add(); });
  return el("div", {}, list, text, el("button", { type: "button", class: "add-note", onclick: add }, "add note"),
    el("span", { class: "error small note-error" }));
}

async function annotate(body) {
  try {
    await api("annotate", body);
  } catch (e) {
    const err = document.querySelector("#run-page .note-error");
    if (err) err.textContent = e.message;
    return;
  }
  await loadRuns(false);  // the table's chips and the filter see it at once
  if (state.page) await openRunPage(state.page);
}
