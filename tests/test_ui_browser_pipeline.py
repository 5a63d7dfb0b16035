"""The Pipeline and HParams tabs at a sweep's scale (issue 54), in headless Chromium (driven as
tests/test_ui_browser.py does): prepare -> 24 train (3 optimizers x 4 learning rates x 2 seeds,
each logging val/loss) -> 24 evaluate, real evaluations of real @memo functions. Edges are routed
so that none runs under a box or a title and no two from different evaluations share a stretch;
a sweep is drawn one node per group, each opened by a click; a node's label carries the chosen
metric; the HParams view's metrics and columns are the user's pick, kept through a live redraw and
in the URL. One browser and one store for the file (built once: about 50 evaluations)."""
from __future__ import annotations

import importlib
import math
import sys

import pytest

import memolab
from memolab.store import get_store
from memolab.ui.server import serve_in_thread
from test_ui_browser import ARGS, CHROMIUM, SHOTS, sync_api

SWEEP = '''
import numpy as np
import memolab
from memolab import memo

K = {"adam": 1.0, "rmsprop": 0.8, "sgd": 0.5}


def curve(lr, optimizer, seed, s):
    return 2.3 * float(np.exp(-K[optimizer] * (1 + 3 * lr) * s / 8)) + 0.05 + 0.01 * seed


@memo
def prepare(n):
    x = np.arange(n, dtype=np.float64)
    return {"X": x, "y": x % 2}


@memo
def train(ds, lr, optimizer, seed):
    for s in range(12):
        memolab.log.scalar("val/loss", curve(lr, optimizer, seed, s), s)
        memolab.log.scalar("val/acc", 1 - curve(lr, optimizer, seed, s) / 2.5, s)
        memolab.log.scalar("train/loss", 0.9 * curve(lr, optimizer, seed, s), s)
    return {"w": np.full(4, curve(lr, optimizer, seed, 11))}


@memo
def evaluate(model, ds):
    return {"score": float(model["w"].sum())}


def run(lrs=(0.1, 0.03, 0.01, 0.003)):
    ds = prepare(500)
    for optimizer in ("adam", "rmsprop", "sgd"):
        for lr in lrs:
            for seed in (0, 1):
                evaluate(train(ds, lr, optimizer, seed), ds)
'''
TRAIN = "pipesweep:train"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep's store (built once for the file) and its module."""
    root = tmp_path_factory.mktemp("pipesweep")
    (root / "mods").mkdir()
    (root / "mods" / "pipesweep.py").write_text(SWEEP)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root / "mods"))
        mp.setenv("MEMOLAB_STORE", str(root / "store"))
        old = memolab.settings.config.settings()
        memolab.configure(store=str(root / "store"))
        try:
            mod = importlib.import_module("pipesweep")
            mod.run()
            yield root / "store", mod
        finally:
            memolab.configure(store=old.store)
            sys.modules.pop("pipesweep", None)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def dash(sweep, browser, monkeypatch):
    """(page, server, module): the sweep served, a fresh page (its errors collected)."""
    store, mod = sweep
    monkeypatch.setenv("MEMOLAB_STORE", str(store))
    memolab.configure(store=str(store))
    srv, _ = serve_in_thread(store)
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    try:
        yield pg, srv, mod
    finally:
        pg.close()
        srv.shutdown()
        srv.server_close()


def open_pipeline(pg, srv, query=""):
    pg.goto(srv.link(f"?fn={TRAIN}&tab=pipeline{query}"))
    pg.wait_for_selector("body[data-ready='1']")
    pg.click("#select-all")
    pg.wait_for_function("() => document.querySelectorAll('#runs tbody tr.selected').length === 24")
    # drawn for the 24 (not for the 20 selected on arrival): 1 prepare, 24 train, 24 evaluate
    pg.wait_for_function("() => document.querySelector('#pipe-summary')?.textContent"
                         ".startsWith('49 evaluation(s) of 3 function(s), 72 edge(s)')")


def shot(pg, name, top, bottom):
    """A screenshot of the page from the top of one element to the bottom of another."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    a, b = pg.locator(top).bounding_box(), pg.locator(bottom).bounding_box()
    pg.screenshot(path=str(SHOTS / name), full_page=True,
                  clip={"x": a["x"], "y": a["y"], "width": max(a["width"], b["width"]), "height": b["y"] + b["height"] - a["y"]})


# every edge sampled along its path (2 px apart) against every box and title it does not end at
GEOMETRY = """() => {
  const svg = document.querySelector('#pipeline-graph');
  const base = svg.getBoundingClientRect();
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return [r.left - base.left, r.top - base.top, r.right - base.left, r.bottom - base.top];
  };
  const nodes = [...svg.querySelectorAll('g.node')].map((g) => [g.dataset.id, box(g.querySelector('rect:not(.stack)'))]);
  const titles = [...svg.querySelectorAll('text.col-title')].map(box);
  const inside = (p, [l, t, r, b], m) => p.x > l + m && p.x < r - m && p.y > t + m && p.y < b - m;
  const out = { edges: 0, underBox: [], underTitle: 0, shared: 0, samples: {} };
  const cells = new Map();  // 2 px cells -> the sources of the edges through them
  const paths = [...svg.querySelectorAll('path.edge')].map((p) => {
    const len = p.getTotalLength(), pts = [];
    for (let s = 0; s <= len; s += 2) pts.push(p.getPointAtLength(s));
    return { from: p.dataset.from, to: p.dataset.to, pts };
  });
  for (const { from, to, pts } of paths) {
    out.edges++;
    out.samples[from + '>' + to] = pts.map((q) => [Math.round(q.x), Math.round(q.y)]);
    for (const q of pts) {
      for (const [id, b] of nodes) if (id !== from && id !== to && inside(q, b, 0.5)) out.underBox.push([from, to, id]);
      for (const [id, b] of nodes) if ((id === from || id === to) && inside(q, b, 2)) out.underBox.push([from, to, 'own ' + id]);
      if (titles.some((b) => inside(q, b, -2))) out.underTitle++;
      const k = Math.round(q.x / 2) + ',' + Math.round(q.y / 2);
      if (!cells.has(k)) cells.set(k, new Set());
      cells.get(k).add(from);
    }
  }
  // the longest stretch an edge runs along an edge of another source (a crossing: a few px)
  let worst = 0;
  for (const { from, pts } of paths) {
    let run = 0;
    for (const q of pts) {
      const k = Math.round(q.x / 2) + ',' + Math.round(q.y / 2);
      const srcs = cells.get(k);
      run = srcs && [...srcs].some((x) => x !== from) ? run + 2 : 0;
      worst = Math.max(worst, run);
    }
  }
  out.shared = worst;
  // every label within its box (a label spilling out would lie under the edges)
  out.spill = [...svg.querySelectorAll('g.node text')].filter((t) => {
    const r = t.getBoundingClientRect(), b = t.closest('g.node').querySelector('rect:not(.stack)').getBoundingClientRect();
    return r.right > b.right + 0.5 || r.left < b.left - 0.5;
  }).map((t) => t.textContent);
  return out;
}"""


def test_every_edge_of_a_sweep_can_be_traced(dash):
    pg, srv, mod = dash
    open_pipeline(pg, srv)
    assert pg.input_value("#pipe-by") == ""  # automatic: 24 train runs, drawn per optimizer
    pg.select_option("#pipe-by", "none")
    pg.wait_for_function("() => document.querySelectorAll('#pipeline-graph g.node[data-eval]').length === 49")
    got = pg.evaluate(GEOMETRY)
    shot(pg, "pipeline_sweep.png", "#pipeline", "#pipeline")
    # prepare -> train, prepare -> evaluate, train -> evaluate: 72 edges
    assert got["edges"] == 72
    assert got["underBox"] == [] and got["underTitle"] == 0 and got["spill"] == []
    assert got["shared"] <= 16, got["shared"]  # crossings only: no bus, no stretch shared by two sources
    # each train sits level with the evaluate made from it: their edge is straight
    straight = 0
    for k, pts in got["samples"].items():
        a, b = k.split(">")
        fa = pg.get_attribute(f"#pipeline-graph g.node[data-eval='{a}']", "data-fn")
        if fa.endswith(":train") and max(y for _, y in pts) - min(y for _, y in pts) <= 16:
            straight += 1
    assert straight == 24
    # hovering an evaluation brings out its edges only
    tr = pg.eval_on_selector_all("#pipeline-graph g.node[data-fn$=':train']", "gs => gs.map(g => g.dataset.id)")[5]
    pg.hover(f"#pipeline-graph g.node[data-id='{tr}']")
    pg.wait_for_selector("#pipeline-graph.tracing")
    hi = pg.eval_on_selector_all("#pipeline-graph path.edge.hi", "ps => ps.map(p => [p.dataset.from, p.dataset.to])")
    assert len(hi) == 2 and all(tr in pair for pair in hi)
    # a click whose press and release straddle a live redraw (another evaluation stored: the graph
    # is asked for again) is not lost: the node pressed is drawn again after the release
    b = pg.query_selector(f"#pipeline-graph g.node[data-id='{tr}'] rect").bounding_box()
    pg.mouse.move(b["x"] + 20, b["y"] + 20)
    pg.mouse.down()
    with pg.expect_response(lambda r: "/api/lineage" in r.url, timeout=30000):
        mod.prepare(502)
    pg.mouse.up()
    pg.wait_for_selector(f"#eval-panel[data-eval='{tr}']")
    assert not pg.errors, pg.errors


def cluster_nodes(pg):
    """{(function, group): count} of the group nodes drawn."""
    return {(g.get_attribute("data-fn").split(":")[-1], g.get_attribute("data-group")): int(g.get_attribute("data-count"))
            for g in pg.query_selector_all("#pipeline-graph g.node.cluster")}


def number_after(text, metric):
    return float(text.split(metric + " ", 1)[1].split()[0])


def test_a_sweep_is_one_node_per_group_opened_by_a_click_and_labelled_with_the_metric(dash):
    from memolab.tracking import query

    pg, srv, mod = dash
    runs = {r["eval_id"]: r["hparams"] for r in query.runs(get_store().index, TRAIN)}
    final = {e: mod.curve(h["lr"], h["optimizer"], h["seed"], 11) for e, h in runs.items()}
    open_pipeline(pg, srv)
    opts = ("adam", "rmsprop", "sgd")
    assert cluster_nodes(pg) == {(f, f"optimizer={o}"): 8 for f in ("train", "evaluate") for o in opts}
    assert "automatic (optimizer)" in pg.inner_text("#pipe-by")
    shot(pg, "pipeline_sweep_groups.png", "#pipeline", "#pipeline")
    # the edges between groups drawn once, with their count: prepare feeds every group (it is not
    # collapsed: it fed all three), each train group feeds its evaluate group
    counts = sorted(int(p.get_attribute("data-count") or 1) for p in pg.query_selector_all("#pipeline-graph path.edge"))
    assert counts == [8] * 9
    # a group's node: its count and the best value of the chosen metric (the runs table's: val/loss)
    for o in opts:
        sub = pg.text_content(f"#pipeline-graph g.node.cluster[data-fn$=':train'][data-group='optimizer={o}'] .n-sub")
        best = min(v for e, v in final.items() if runs[e]["optimizer"] == o)
        assert sub.startswith("8 evaluations · val/loss "), sub
        assert math.isclose(number_after(sub, "val/loss"), best, rel_tol=1e-4), sub
    # a click opens a group: adam's trains and evaluates one by one, the others still one node each
    pg.click("#pipeline-graph g.node.cluster[data-fn$=':train'][data-group='optimizer=adam']")
    pg.wait_for_selector("#pipe-controls button[data-open='optimizer=adam']")
    assert cluster_nodes(pg) == {(f, f"optimizer={o}"): 8 for f in ("train", "evaluate") for o in ("rmsprop", "sgd")}
    adam = sorted(e for e, h in runs.items() if h["optimizer"] == "adam")
    nodes = {int(g.get_attribute("data-eval")): g
             for g in pg.query_selector_all("#pipeline-graph g.node[data-fn$=':train'][data-eval]")}
    assert sorted(nodes) == adam
    # each labelled with its run's varying arguments and its own value of the metric
    for e in adam:
        h = runs[e]
        assert nodes[e].query_selector(".n-title").text_content().startswith(f"#{e} lr={h['lr']:g}, optimizer=adam")
        sub = nodes[e].query_selector(".n-sub").text_content()
        assert math.isclose(number_after(sub, "val/loss"), final[e], rel_tol=1e-4), sub
    # another metric chosen in the runs table (sorted by it): the labels show it
    pg.click("#runs th[data-col$='val/acc']")
    first = adam[0]
    sel = f"#pipeline-graph g.node[data-eval='{first}'] .n-sub"
    pg.wait_for_function("(s) => document.querySelector(s)?.textContent.startsWith('val/acc ')", arg=sel)
    assert math.isclose(number_after(pg.text_content(sel), "val/acc"), 1 - final[first] / 2.5, rel_tol=1e-4)
    # closed again from its chip; then one node per seed
    pg.click("#pipe-controls button[data-open='optimizer=adam']")
    pg.wait_for_function("() => document.querySelectorAll('#pipeline-graph g.node.cluster').length === 6")
    pg.select_option("#pipe-by", "seed")
    pg.wait_for_function("() => document.querySelectorAll('#pipeline-graph g.node.cluster').length === 4")
    assert cluster_nodes(pg) == {(f, f"seed={s}"): 12 for f in ("train", "evaluate") for s in (0, 1)}
    assert "pby=seed" in pg.url
    assert not pg.errors, pg.errors


def test_the_hparams_metrics_and_columns_are_the_users_pick_kept_live_and_in_the_url(dash):
    pg, srv, mod = dash
    pg.goto(srv.link(f"?fn={TRAIN}&tab=hparams"))
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_selector("#parcoords:not(.hidden)")
    axes = "() => document.querySelector('#parcoords').dataset.axes"
    heads = "() => [...document.querySelectorAll('#hparams thead th')].map((t) => t.dataset.col)"
    assert pg.evaluate(axes) == "lr|optimizer|seed|⟶ val/loss|⟶ val/acc|⟶ train/loss"  # automatic
    pg.click("#hp-pick > summary")
    # the lines coloured by train/loss, val/acc no axis; seed neither a column nor an axis; no
    # train/loss column in the table (it stays an axis)
    pg.check("#hp-pick-list input[data-colour='train/loss']")
    pg.wait_for_function(f"() => ({axes})() === 'lr|optimizer|seed|⟶ train/loss|⟶ val/loss|⟶ val/acc'")
    pg.uncheck("#hp-pick-list input[data-axis='val/acc']")
    pg.wait_for_function(f"() => ({axes})() === 'lr|optimizer|seed|⟶ train/loss|⟶ val/loss'")
    pg.uncheck("#hp-pick-list input[data-col='seed']")
    pg.uncheck("#hp-pick-list input[data-col='train/loss']")
    want_axes = "lr|optimizer|⟶ train/loss|⟶ val/loss"
    pg.wait_for_function(f"() => ({axes})() === '{want_axes}' && !({heads})().includes('⟶ train/loss')")
    want_heads = pg.evaluate(heads)
    assert "seed" not in want_heads and "⟶ val/acc" in want_heads and "lr" in want_heads
    assert pg.input_value("#scatter-y") == "train/loss"  # the scatter's metric: the colouring one
    shot(pg, "hparams_pick.png", "#hp-pick", "#parcoords")
    assert "hpm=train%2Floss&hpm=val%2Floss" in pg.url and "hph=seed" in pg.url and "hph=train%2Floss" in pg.url
    # a live redraw (another evaluation stored: the page asks again and draws anew) keeps the pick
    before = int(pg.get_attribute("#parcoords", "data-drawn"))
    mod.prepare(501)
    pg.wait_for_function(f"() => +document.querySelector('#parcoords').dataset.drawn > {before}", timeout=30000)
    assert pg.evaluate(axes) == want_axes and pg.evaluate(heads) == want_heads
    assert not pg.is_checked("#hp-pick-list input[data-axis='val/acc']")
    assert pg.is_checked("#hp-pick-list input[data-colour='train/loss']")
    # and so does a reload of the URL
    pg.goto(pg.url)
    pg.wait_for_selector("#parcoords:not(.hidden)")
    pg.wait_for_function(f"() => ({axes})() === '{want_axes}'")
    assert pg.evaluate(heads) == want_heads
    # "automatic" drops the pick
    pg.click("#hp-pick > summary")
    pg.click("#hp-pick-reset")
    pg.wait_for_function(f"() => ({axes})() === 'lr|optimizer|seed|⟶ val/loss|⟶ val/acc|⟶ train/loss'")
    assert "hpm=" not in pg.url and "hph=" not in pg.url
    assert not pg.errors, pg.errors
