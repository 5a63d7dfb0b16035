"""The dashboard's lineage in a real headless Chromium (issue 39): an evaluation's panel with links
to its inputs and users, and the Pipeline tab's graph of functions and evaluations (one column per
function in pipeline order, newest first, code changes marked, inputs gone shown as such).

Driven as tests/test_ui_browser.py does (Debian's /usr/bin/chromium through Playwright, the
dashboard's access token in the URL it is opened with).
"""
from __future__ import annotations

import importlib
import json
import sys
import urllib.request

import pytest

from memolab.store import get_store
from memolab.ui.server import serve_in_thread
from test_ui_browser import SHOTS, chromium, page  # noqa: F401  (fixtures: Chromium as test_ui_browser drives it)

PIPE = '''
import numpy as np
from memolab import memo


@memo
def prepare(n):
    x = np.arange(n, dtype=np.float64)
    return {"X": x, "y": x % 2}


@memo
def train(ds, lr=0.1):
    return {"w": np.full(4, float((ds["X"] * ds["y"]).sum()) * lr)}


@memo
def evaluate(model, ds):
    return {"score": float(model["w"].sum() / (1 + ds["y"].sum()))}


def run(n=500):
    ds = prepare(n)
    return evaluate(train(ds), ds)
'''


@pytest.fixture
def pipeline(tmp_store, tmp_path, monkeypatch):
    """Two versions of a three-step pipeline (prepare edited in between), served on 127.0.0.1:
    {function: [ids, oldest first]}."""
    mods = tmp_path / "mods"
    mods.mkdir()
    monkeypatch.syspath_prepend(str(mods))
    path = mods / "lineagejob.py"
    path.write_text(PIPE)
    import lineagejob

    lineagejob.run()
    path.write_text(PIPE.replace("x = np.arange(n, dtype=np.float64)", "x = np.arange(n, dtype=np.float64) + 1"))
    for pyc in mods.rglob("*.pyc"):
        pyc.unlink()
    lineagejob = importlib.reload(lineagejob)
    lineagejob.run()
    index = get_store().index
    ids = {f: sorted(e["id"] for e in index.evaluations(f"lineagejob:{f}")) for f in ("prepare", "train", "evaluate")}
    srv, _ = serve_in_thread(tmp_store)
    yield srv, ids
    srv.shutdown()
    srv.server_close()
    sys.modules.pop("lineagejob", None)


def boxes(pg):
    """eval id -> (x, y, classes) of every evaluation node drawn."""
    return {int(n.get_attribute("data-eval")): (n.bounding_box()["x"], n.bounding_box()["y"], n.get_attribute("class"))
            for n in pg.query_selector_all("#pipeline-graph g.node[data-eval]")}


def test_the_pipeline_view_draws_the_graph_newest_first_with_code_changes(pipeline, page):
    srv, ids = pipeline
    pg = page
    pg.goto(srv.link("?fn=lineagejob:evaluate&tab=pipeline"))
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_selector("#pipeline-graph g.node[data-eval]")
    got = boxes(pg)
    assert sorted(got) == sorted(ids["prepare"] + ids["train"] + ids["evaluate"])
    (p1, p2), (t1, t2), (e1, e2) = ids["prepare"], ids["train"], ids["evaluate"]
    # columns in pipeline order: prepare, then train, then evaluate
    assert got[p1][0] == got[p2][0] < got[t1][0] == got[t2][0] < got[e1][0] == got[e2][0]
    # newest first in every column
    assert got[p2][1] < got[p1][1] and got[t2][1] < got[t1][1] and got[e2][1] < got[e1][1]
    # prepare's code changed between its two evaluations; train's and evaluate's did not
    assert "changed" in got[p2][2] and "changed" not in got[p1][2]
    assert not any("changed" in got[i][2] for i in (t1, t2, e1, e2))
    assert "code changed" in pg.text_content(f"#pipeline-graph g.node[data-eval='{p2}']")
    # the selected runs' evaluations are marked selected; every edge is drawn between its nodes
    assert all("selected" in got[i][2] for i in (e1, e2))
    pairs = sorted((int(e.get_attribute("data-from")), int(e.get_attribute("data-to")))
                   for e in pg.query_selector_all("#pipeline-graph path.edge"))
    assert pairs == sorted([(p1, t1), (p1, e1), (t1, e1), (p2, t2), (p2, e2), (t2, e2)])
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / "lineage_pipeline.png"), full_page=True)
    assert not pg.errors, pg.errors
    assert all(u.startswith(srv.base) for u in pg.requests), [u for u in pg.requests if not u.startswith(srv.base)]


def test_an_evaluations_panel_links_to_its_inputs_and_users(pipeline, page):
    srv, ids = pipeline
    pg = page
    (_, p2), (_, t2), (_, e2) = ids["prepare"], ids["train"], ids["evaluate"]
    pg.goto(srv.link("?fn=lineagejob:evaluate"))
    pg.wait_for_selector("body[data-ready='1']")
    # a real click (press and release): the table is not drawn again while a pointer is down in it
    pg.click(f"#runs tbody tr[data-eval='{e2}'] a.eval-open")
    pg.wait_for_selector(f"#eval-panel[data-eval='{e2}']")
    links = {a.get_attribute("data-fn").split(":")[-1]: int(a.get_attribute("data-eval"))
             for a in pg.query_selector_all("#eval-inputs a.lineage-link")}
    assert links == {"prepare": p2, "train": t2}
    assert "ds" in pg.inner_text("#eval-inputs") and "model" in pg.inner_text("#eval-inputs")
    # the row was not toggled by the link
    assert pg.query_selector(f"#runs tbody tr[data-eval='{e2}'].selected") is not None
    # follow the input to train: its function, its run and its panel, which links back to evaluate
    pg.click(f"#eval-inputs a.lineage-link[data-eval='{t2}']")
    pg.wait_for_selector(f"#eval-panel[data-eval='{t2}']")
    assert pg.inner_text("#fn-title") == "lineagejob:train"
    assert [int(a.get_attribute("data-eval")) for a in pg.query_selector_all("#eval-users a.lineage-link")] == [e2]
    assert [int(a.get_attribute("data-eval")) for a in pg.query_selector_all("#eval-inputs a.lineage-link")] == [p2]
    sel = [r.get_attribute("data-eval") for r in pg.query_selector_all("#runs tbody tr.selected")]
    assert sel == [str(t2)]
    # its pipeline: train #t2 with what it came from and what used it
    pg.click("#eval-panel button:has-text('show its pipeline')")
    pg.wait_for_selector(f"#pipeline-graph g.node[data-eval='{t2}'].selected")
    assert sorted(boxes(pg)) == sorted([p2, t2, e2])
    # a node opens its evaluation's panel
    pg.click(f"#pipeline-graph g.node[data-eval='{p2}']")
    pg.wait_for_selector(f"#eval-panel[data-eval='{p2}']")
    assert sorted(int(a.get_attribute("data-eval")) for a in pg.query_selector_all("#eval-users a.lineage-link")) == [t2, e2]
    assert not pg.errors, pg.errors


def test_inputs_no_longer_stored_are_drawn_as_gone(pipeline, page):
    srv, ids = pipeline
    get_store().index.clear("lineagejob:train")
    pg = page
    pg.goto(srv.link("?fn=lineagejob:evaluate&tab=pipeline"))
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_selector("#pipeline-graph g.node.ghost")
    ghosts = pg.query_selector_all("#pipeline-graph g.node.ghost")
    assert sorted(int(g.get_attribute("data-gone-for")) for g in ghosts) == sorted(ids["evaluate"])
    assert all("not stored any more" in g.text_content() for g in ghosts)
    assert sorted(boxes(pg)) == sorted(ids["prepare"] + ids["evaluate"])
    pg.click(f"#runs tbody tr[data-eval='{ids['evaluate'][1]}'] a.eval-open")
    pg.wait_for_selector("#eval-panel:not(.hidden)")
    assert "train (not stored any more)" in pg.inner_text("#eval-inputs")
    assert not pg.errors, pg.errors


def test_the_lineage_api_needs_the_token_and_checks_its_ids(pipeline):
    srv, ids = pipeline
    with urllib.request.urlopen(srv.link(f"api/lineage?evals={ids['train'][0]}")) as r:
        g = json.loads(r.read())
    assert {n["id"] for n in g["nodes"]} == {ids["prepare"][0], ids["train"][0], ids["evaluate"][0]}
    for bad in ("api/lineage?evals=0", "api/lineage?evals=abc", "api/evaluation?id=99999"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(srv.link(bad))
        assert e.value.code in (400, 404)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(srv.base + f"api/evaluation?id={ids['train'][0]}")
    assert e.value.code == 401


def test_the_pipeline_follows_the_selection_and_labels_nodes_with_their_run(pipeline, page):
    """A sweep on one prepared dataset (issue 54): with one train run selected the tab drew every
    train and evaluate node the dataset fed, labelled `train #48`. It draws the selected one, what it
    was made from and what was made from it, labelled with the run's varying arguments."""
    from memolab.tracking import query

    srv, ids = pipeline
    lm = sys.modules["lineagejob"]
    ds = lm.prepare(500)
    for lr in (0.2, 0.3):
        lm.evaluate(lm.train(ds, lr), ds)
    index = get_store().index
    runs = {r["hparams"]["lr"]: r for r in query.runs(index, "lineagejob:train") if r["hparams"].get("lr") in (0.2, 0.3)}
    mine = runs[0.2]
    pg = page
    pg.goto(srv.link(f"?fn=lineagejob:train&tab=pipeline&runs={mine['id']}"))
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_selector(f"#pipeline-graph g.node[data-eval='{mine['eval_id']}']")
    got = boxes(pg)
    evals = {f: sorted(e["id"] for e in index.evaluations(f"lineagejob:{f}")) for f in ("prepare", "evaluate")}
    mine_eval = [e for e in evals["evaluate"] if e not in ids["evaluate"]]
    # the selected train, the prepare it was made from, the evaluate made from it: not its sibling
    assert runs[0.3]["eval_id"] not in got and mine["eval_id"] in got
    assert len(got) == 3 and ids["prepare"][-1] in got and len([e for e in got if e in mine_eval]) == 1
    assert "other evaluation(s) made from the same inputs left out" in pg.inner_text("#pipeline")
    title = pg.text_content(f"#pipeline-graph g.node[data-eval='{mine['eval_id']}'] .n-title")
    assert title == f"#{mine['eval_id']} lr=0.2"
    assert not pg.errors, pg.errors
