"""Reading a sweep in the dashboard (issue 40), in a real headless Chromium (see test_ui_browser.py):
groups drawn as a mean with a band, the best run (loss-like metrics lowest), the filter on the
charts, the view in the URL, a run's page (failure, notes and tags, lineage) and HParams
(parallel coordinates with brushing, a log axis, a scatter).

A 6 lr x 4 seed sweep of a real memoized function, plus one run that fails at step 50. Its curves
cross: a large lr starts worst and ends best, so the best run is near the bottom of an early
tooltip, which must still show it."""
from __future__ import annotations

import math
import sys
import urllib.parse

import pytest

from memolab.store import get_store
from memolab.tracking import query
from memolab.ui.server import serve_in_thread
from test_ui_browser import chromium, page  # noqa: F401  (fixtures)

LRS = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]

JOB = '''
import math
import memolab
from memolab import memo


def curve(lr, seed, step):
    return (1 + 0.05 * seed) * math.exp(-step * lr * 0.05) + 0.1 + 3 * lr * math.exp(-step / 20)


@memo
def prepare(n):
    return list(range(n))


@memo
def fit(lr, seed, data, fail=False):
    for step in range(0, 200, 2):
        loss = curve(lr, seed, step)
        memolab.log.scalar("train/loss", loss, step)
        if step % 10 == 0:
            memolab.log.scalar("val/loss", loss + 0.05, step)
            memolab.log.scalar("val/acc", 1 - loss / 4, step)
        if fail and step == 50:
            print("about to diverge")
            raise FloatingPointError("loss is nan at step 50")
    return {"loss": loss, "n": len(data)}
'''


def curve(lr, seed, step):
    return (1 + 0.05 * seed) * math.exp(-step * lr * 0.05) + 0.1 + 3 * lr * math.exp(-step / 20)


@pytest.fixture
def sweep(tmp_store, tmp_path, monkeypatch):
    mods = tmp_path / "mods"
    mods.mkdir()
    monkeypatch.syspath_prepend(str(mods))
    (mods / "viewjob.py").write_text(JOB)
    import viewjob

    data = viewjob.prepare(10)
    for lr in LRS:
        for seed in range(4):
            viewjob.fit(lr, seed, data)
    with pytest.raises(FloatingPointError):
        viewjob.fit(0.3, 9, data, fail=True)
    srv, _ = serve_in_thread(tmp_store)
    runs = query.runs(get_store().index, viewjob.fit.symbol)
    by = {(r["hparams"]["lr"], r["hparams"]["seed"]): r for r in runs}
    yield srv, viewjob, by
    srv.shutdown()
    srv.server_close()
    sys.modules.pop("viewjob", None)


def opened(pg, srv, query_):
    pg.goto(srv.link(query_))
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_function("() => +(document.body.dataset.drawn || 0) > 0")


def chart(pg, tag):
    return pg.query_selector(f"#charts canvas[data-tag='{tag}']")


def wait_chart(pg, tag, js):
    """Wait until the chart of ``tag`` satisfies ``js`` (a predicate of its canvas ``c``)."""
    pg.wait_for_function(f"() => {{ const c = document.querySelector(`#charts canvas[data-tag='{tag}']`); return c && ({js}); }}",
                         timeout=20000)


def test_best_run_groups_filter_and_the_view_in_the_url(sweep, page):
    srv, job, by = sweep
    pg = page
    fn = job.fit.symbol
    best = str(by[(0.3, 0)]["id"])
    failed = str(by[(0.3, 9)]["id"])
    every = [str(r["id"]) for r in by.values()]
    opened(pg, srv, f"?fn={fn}&runs=" + ",".join(every))

    # the best run: val/loss is the first metric column (lower is better), its best row starred
    heads = pg.eval_on_selector_all("#runs thead th", "ths => ths.map(t => t.dataset.col).filter(c => c.startsWith('⟶'))")
    assert heads[0] == "⟶ val/loss" and "⟶ val/acc" in heads
    assert pg.get_attribute("#runs th[data-col='⟶ val/loss'] .dir", "data-dir") == "min"
    assert pg.get_attribute("#runs th[data-col='⟶ val/acc'] .dir", "data-dir") == "max"
    assert pg.eval_on_selector_all("#runs tbody tr.best", "rs => rs.map(r => r.dataset.run)") == [best]
    assert pg.inner_text(f"#runs tbody tr[data-run='{best}'] td.id").startswith("#")  # the id alone; the star is drawn
    wait_chart(pg, "val/loss", f"c.dataset.best === '{best}'")
    # the failed run's line ends in a cross
    wait_chart(pg, "train/loss", f"c.dataset.ended === '{failed}'")
    # a column's direction can be turned: the best of val/acc becomes its lowest
    pg.click("#runs th[data-col='⟶ val/acc'] .dir")
    pg.wait_for_selector("#runs th[data-col='⟶ val/acc'] .dir[data-dir='min']")
    assert "dirs=val%2Facc%3Amin" in pg.url
    worst = max(by.values(), key=lambda r: r["metrics"]["val/loss"])  # the lowest accuracy
    wait_chart(pg, "val/acc", f"c.dataset.best === '{worst['id']}'")
    pg.click("#runs th[data-col='⟶ val/acc'] .dir")
    pg.wait_for_selector("#runs th[data-col='⟶ val/acc'] .dir[data-dir='max']")

    # the tooltip at step ~4, where the best run (a large lr) is among the worst: 25 runs, 20 rows,
    # lowest first, and the best one listed all the same, starred
    card = pg.query_selector(".card[data-tag='train/loss']")
    card.scroll_into_view_if_needed()
    box = pg.query_selector(".card[data-tag='train/loss'] .u-over").bounding_box()
    pg.mouse.move(box["x"] + box["width"] * 0.02, box["y"] + box["height"] / 2)
    pg.wait_for_selector(".card[data-tag='train/loss'] .tooltip .tip-row")
    tip = pg.query_selector(".card[data-tag='train/loss'] .tooltip")
    rows = tip.query_selector_all(".tip-row")
    assert len(rows) == 20 and "… and 5 more" in tip.inner_text() and "lowest first" in tip.inner_text()
    starred = tip.query_selector_all(".tip-row.best")
    assert len(starred) == 1 and starred[0].inner_text().count("★") == 1 and "lr=0.3" in starred[0].inner_text()
    vals = [float(v) for v in tip.eval_on_selector_all(".tip-row:not(.best) .tip-val", "vs => vs.map(v => v.textContent)")]
    assert vals == sorted(vals)
    pg.mouse.move(0, 0)

    # groups: by lr, each group's mean with its min-max band; the failed run's line ends at step 50,
    # so the lr=0.3 group has 5 runs until then and 4 after (no extrapolation)
    pg.select_option("#group-by", "lr")
    wait_chart(pg, "val/loss", "c.dataset.grouped === '1' && c.dataset.runs.split(',').length === 6")
    assert "group=lr" in pg.url
    agg = pg.evaluate("""() => { const s = state.charts['val/loss'].series.find(s => s.id === 'g:lr=0.3');
        const i = s.agg.x.indexOf(190), j = s.agg.x.indexOf(40);
        return [s.members.length, s.agg.count[i], s.agg.raw[i], s.agg.min[i], s.agg.max[i], s.agg.count[j],
                s.lo[i] !== null]; }""")
    at190 = [curve(0.3, seed, 190) + 0.05 for seed in range(4)]
    assert agg[0] == 5 and agg[1] == 4 and agg[5] == 5 and agg[6]
    assert agg[2] == pytest.approx(sum(at190) / 4) and agg[3] == pytest.approx(min(at190)) and agg[4] == pytest.approx(max(at190))
    legend = pg.inner_text(".card[data-tag='val/loss'] .legend")
    assert "★ lr=0.3 (5 runs)" in legend and "(mean, min–max)" in legend  # the best group first
    pg.select_option("#group-band", "std")
    wait_chart(pg, "val/loss", "document.querySelector(\".card[data-tag='val/loss'] .legend\").textContent.includes('± std')")
    # grouped lines off and on again: each run's own
    pg.uncheck("#group-on")
    wait_chart(pg, "val/loss", "c.dataset.grouped === '' && c.dataset.runs.split(',').length === 25")
    pg.check("#group-on")
    wait_chart(pg, "val/loss", "c.dataset.grouped === '1'")
    # by a name pattern: the part of each run's label a regex matches (its capture group)
    pg.select_option("#group-by", "pattern")
    pg.fill("#group-pattern", r"seed=(\d+)")
    wait_chart(pg, "val/loss", "c.dataset.runs.split(',').sort().join() === 'g:0,g:1,g:2,g:3,g:9'")
    pg.select_option("#group-by", "")
    wait_chart(pg, "val/loss", "c.dataset.grouped === ''")

    # the filter narrows the charts, not only the table
    pg.fill("#run-filter", "lr=0.1")
    wait_chart(pg, "val/loss", "c.dataset.runs.split(',').length === 4")
    assert "(4 pass the filter)" in pg.inner_text("#run-count")
    # smoothing, x axis, log y and grouping in the URL: a reload (or a shared link) shows the same view
    pg.fill("#smoothing", "0.3")
    pg.dispatch_event("#smoothing", "input")
    pg.select_option("#xaxis", "relative")
    pg.check("#logscale")
    pg.select_option("#group-by", "seed")
    wait_chart(pg, "val/loss", "c.dataset.grouped === '1' && c.dataset.runs.split(',').length === 4")
    q = urllib.parse.parse_qs(urllib.parse.urlparse(pg.url).query)
    assert q["q"] == ["lr=0.1"] and q["smooth"] == ["0.30"] and q["x"] == ["relative"] and q["logy"] == ["1"]
    assert q["group"] == ["seed"] and len(q["runs"][0].split(",")) == 25
    shared = pg.url
    pg.goto("about:blank")
    opened(pg, srv, "?" + urllib.parse.urlparse(shared).query)
    assert pg.input_value("#run-filter") == "lr=0.1" and pg.input_value("#smoothing") == "0.3"
    assert pg.input_value("#xaxis") == "relative" and pg.is_checked("#logscale") and pg.input_value("#group-by") == "seed"
    wait_chart(pg, "val/loss", "c.dataset.grouped === '1' && c.dataset.runs.split(',').length === 4")
    assert pg.errors == []


def test_a_runs_page_its_notes_and_tags_and_its_lineage(sweep, page):
    srv, job, by = sweep
    pg = page
    fn = job.fit.symbol
    failed, done = by[(0.3, 9)], by[(0.01, 2)]
    opened(pg, srv, f"?fn={fn}")
    # a failed run: its error, traceback and the tail of what it printed
    pg.eval_on_selector("#runs-wrap", "(w, id) => document.querySelector(`#runs tbody tr[data-run='${id}']`).scrollIntoView()",
                        str(failed["id"]))
    # a real click on the button: the table is drawn again when the scroll's frame or the runs'
    # statistics land, but not while a pointer is down in it, so a press and its release are on
    # one button (they straddled a redraw once in a full run, and the click was lost)
    pg.click(f"#runs tbody tr[data-run='{failed['id']}'] .open-run")
    pg.wait_for_selector(f"body[data-page='{failed['id']}']")
    text = pg.inner_text("#run-page")
    assert "FloatingPointError: loss is nan at step 50" in text and "about to diverge" in text
    assert "Traceback" in pg.inner_text("#run-page pre.traceback") and "lr" in text and "0.3" in text
    assert pg.is_hidden("#tabs") and f"run={failed['id']}" in pg.url
    assert pg.query_selector("#run-lineage") is None  # it stored nothing
    pg.click("#run-page button.back")
    pg.wait_for_selector("#tabs", state="visible")
    assert "run=" not in pg.url

    # a stored run: its lineage (its data came from prepare), a tag and a note written from the page
    pg.evaluate("(id) => openRunPage(id)", str(done["id"]))
    pg.wait_for_selector(f"body[data-page='{done['id']}'] #run-lineage")
    made_from = pg.inner_text("#run-lineage .inputs")
    prep = get_store().index.evaluations(job.prepare.symbol)[0]["id"]
    assert "data" in made_from and f"prepare #{prep}" in made_from
    assert pg.get_attribute("#run-lineage .inputs a.lineage-link", "data-eval") == str(prep)
    pg.fill("#run-page .tag-input", "baseline")
    pg.press("#run-page .tag-input", "Enter")
    pg.wait_for_selector("#run-page .chip[data-tag='baseline']")
    pg.fill("#run-page .note-input", "**lr 0.01** looks *stable*")
    pg.click("#run-page .add-note")
    pg.wait_for_selector("#run-page .note strong")
    assert "looks stable" in pg.inner_text("#run-page .note")
    # stored in the index: the CLI and the API see them
    row = next(r for r in query.runs(get_store().index, fn) if r["id"] == done["id"])
    assert row["run_tags"] == ["baseline"] and row["notes"][0]["text"] == "**lr 0.01** looks *stable*"
    # a reload reopens the page; the table shows the tag and filters by it
    pg.reload()
    pg.wait_for_selector(f"body[data-page='{done['id']}'] .chip[data-tag='baseline']")
    pg.click("#run-page button.back")
    pg.fill("#run-filter", "tag:baseline")
    pg.wait_for_function("() => document.querySelector('#run-count').textContent.startsWith('1 of 25')")
    assert "baseline" in pg.inner_text(f"#runs tbody tr[data-run='{done['id']}']")
    # removing the tag from the page
    pg.evaluate("(id) => openRunPage(id)", str(done["id"]))
    pg.click("#run-page .chip[data-tag='baseline'] .x")
    pg.wait_for_function("() => !document.querySelector(\"#run-page .chip[data-tag='baseline']\")")
    # the lineage links to the Pipeline tab around its evaluation
    pg.click("#run-lineage .show-pipeline")
    pg.wait_for_selector("#tab-pipeline:not(.hidden)")
    assert pg.is_hidden("#run-page") and pg.errors == []


def test_hparams_parallel_coordinates_brushing_log_axis_and_scatter(sweep, page):
    srv, job, by = sweep
    pg = page
    fn = job.fit.symbol
    best = by[(0.3, 0)]
    opened(pg, srv, f"?fn={fn}&tab=hparams")
    pg.wait_for_function("() => document.querySelector('#parcoords').dataset.axes")
    axes = pg.get_attribute("#parcoords", "data-axes").split("|")
    assert axes[0] == "lr" and "seed" in axes and [a for a in axes if a.startswith("⟶")][0] == "⟶ val/loss"
    assert pg.get_attribute("#parcoords", "data-log") == "lr"  # 0.001 .. 0.3: a log axis
    # the scatter: lr (log) against val/loss, the best run starred
    pg.wait_for_selector("#scatter-box:not(.hidden)")
    assert pg.get_attribute("#scatter", "data-points") == "25" and pg.get_attribute("#scatter", "data-log") == "x"
    assert pg.get_attribute("#scatter", "data-best") == str(best["id"])
    pg.select_option("#scatter-x", "seed")
    pg.wait_for_function("() => document.querySelector('#scatter').dataset.log === ''")
    # brushing the top of the lr axis (0.1 and 0.3, on the log scale) keeps those runs, selects them
    geo = pg.evaluate("() => { const g = state.hpGeo; return [g.x(0), g.y(1), g.y(0.7)]; }")
    box = pg.query_selector("#parcoords").bounding_box()
    pg.mouse.move(box["x"] + geo[0], box["y"] + geo[1] - 3)  # from just above the top (clamped to it)
    pg.mouse.down()
    pg.mouse.move(box["x"] + geo[0], box["y"] + geo[2], steps=5)
    pg.mouse.up()
    want = sorted(str(r["id"]) for (lr, _), r in by.items() if lr >= 0.1)
    pg.wait_for_function("() => document.querySelector('#parcoords').dataset.brushed")
    assert sorted(pg.get_attribute("#parcoords", "data-brushed").split(",")) == want
    assert sorted(pg.evaluate("() => state.selected")) == want
    assert len(pg.query_selector_all("#hparams tbody tr[data-run]")) == len(want)
    assert f"{len(want)} of 25 runs" in pg.inner_text("#hp-brush-info")
    pg.click("#hp-brush-clear")
    pg.wait_for_function("() => !document.querySelector('#parcoords').dataset.brushed")
    assert len(pg.query_selector_all("#hparams tbody tr[data-run]")) == 25 and pg.errors == []
