"""Dashboard features in a real headless Chromium (see test_ui_browser.py for the set-up):
uPlot charts (markers for one point, zoom and reset, crosshair tooltip, tag groups, log ticks,
CSV), histogram views, safe markdown, grouping by tag, one id scheme, URL state, landing page."""
from __future__ import annotations

import importlib
import sys

import pytest

import memolab
from memolab.store import get_store
from memolab.tracking import query
from memolab.ui.server import serve_in_thread
from test_ui_browser import SHOTS, chromium, page, run_ids, select_runs, wait_points  # noqa: F401  (fixtures)

JOB = '''
import numpy as np
import memolab
from memolab import memo


@memo
def fit(lr, fail=False):
    rng = np.random.default_rng(int(lr * 1000))
    for step in range(40):
        memolab.log.scalar("train/loss", 0.94 - step * 0.019 + lr, step)   # inside 0.2 .. 0.95
        memolab.log.scalar("train/acc", 0.2 + step * 0.01, step)
        if step % 10 == 0:
            memolab.log.scalar("val/loss", 0.9 - step * 0.01, step)
    memolab.log.scalar("score", lr * 3, 39)  # one point, like add_hparams' final metric
    for k in range(3):
        memolab.log.histogram("w", rng.normal(k * lr * 20, 1.0, size=500), step=k * 10)
    for k in range(40):
        memolab.log.histogram("many", rng.normal(0, 1 + k / 10, size=200), step=k * 100, bins=20)
    memolab.log.text("report", "| metric | value |\\n|---|---|\\n| loss | 0.5 |\\n\\n**done** VERSION"
                     "<script>window.__pwned = 1</script><img src=x onerror=\\"window.__pwned = 2\\">", step=39)
    if fail:
        raise ValueError("diverged at step 40")
    return {"fc1.weight": np.zeros((64, 32), np.float32), "fc1.bias": np.zeros(64, np.float32)}
'''


@pytest.fixture
def lab(tmp_store, tmp_path, monkeypatch):
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    monkeypatch.syspath_prepend(str(mod_dir))
    path = mod_dir / "featjob.py"
    path.write_text(JOB.replace("VERSION", "v1"))
    import featjob

    featjob.fit(0.01)
    featjob.fit(0.02)
    with pytest.raises(ValueError):
        featjob.fit(0.03, fail=True)
    path.write_text(JOB.replace("VERSION", "v2"))  # the same arguments, other code
    for pyc in mod_dir.rglob("*.pyc"):
        pyc.unlink()
    featjob = importlib.reload(featjob)
    featjob.fit(0.01)
    memolab.log.scalar("outside", 1.0, step=0)  # a process run: logs outside any memoized call
    from memolab.tracking import runs as _runs

    _runs.current().sink.flush()
    srv, _ = serve_in_thread(tmp_store)
    runs = {}
    for r in query.runs(get_store().index, featjob.fit.symbol):
        runs[(r["hparams"]["lr"], r["status"], r["code"])] = r
    yield srv, featjob, runs
    srv.shutdown()
    srv.server_close()
    sys.modules.pop("featjob", None)


def by(runs, lr, status="done"):
    rs = sorted((r for (rlr, s, _), r in runs.items() if rlr == lr and s == status), key=lambda r: r["started"])
    return rs


def test_charts_tooltips_zoom_groups_markers_and_csv(lab, page):
    srv, featjob, runs = lab
    pg = page
    pg.goto(srv.url)
    pg.wait_for_selector("body[data-ready='1']")
    # the landing page opens on the memoized function, not on the script's process run
    assert pg.inner_text("#fn-title") == featjob.fit.symbol
    assert pg.query_selector("#functions li[data-fn^='<process:']") is None
    assert pg.query_selector("#scripts li[data-fn^='<process:']") is not None

    (old,), (new,) = by(runs, 0.01)[:1], by(runs, 0.01)[1:]
    (b,) = by(runs, 0.02)
    (failed,) = by(runs, 0.03, "failed")
    # one id scheme: the evaluation id the CLI takes
    ids_shown = pg.eval_on_selector_all("#runs tbody tr td.id", "tds => tds.map(t => t.textContent)")
    assert f"#{old['eval_id']}" in ids_shown and f"#{new['eval_id']}" in ids_shown
    row = pg.inner_text(f"#runs tbody tr[data-run='{new['id']}']")
    assert "{'fc1.weight': ndarray(float32, 64×32), 'fc1.bias': ndarray(float32, 64)}" in row and "code changed" in row
    assert "ValueError: diverged at step 40" in pg.inner_text(f"#runs tbody tr[data-run='{failed['id']}']")
    heads = pg.inner_text("#runs thead")
    assert "⟶ train/loss" in heads and "⟶ score" in heads

    pg.click("#select-none")
    select_runs(pg, [old["id"], new["id"]])
    wait_points(pg, "train/loss", "40,40")
    # tag groups by prefix, collapsible
    groups = pg.eval_on_selector_all("#charts details.group", "ds => ds.map(d => d.dataset.group)")
    assert groups == ["", "train", "val"]
    # two evaluations that differ only in code: the legend tells them apart
    legend = pg.inner_text(".card[data-tag='train/loss'] .legend")
    assert f"#{old['eval_id']}" in legend and f"code {old['code'][:8]}" in legend and f"code {new['code'][:8]}" in legend

    # a one-point series draws a marker, not an empty frame
    wait_points(pg, "score", "1,1")
    from test_ui_browser import colored_pixels

    assert colored_pixels(pg, "score", "#1f77b4") + colored_pixels(pg, "score", "#d62728") > 20  # same value: one hides the other

    # crosshair tooltip: every run's value at that step, with its name
    pg.query_selector(".card[data-tag='train/loss']").scroll_into_view_if_needed()  # (legends wrap: cards are taller)
    box = pg.query_selector(".card[data-tag='train/loss'] .u-over").bounding_box()
    pg.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    pg.wait_for_selector(".card[data-tag='train/loss'] .tooltip")
    tip = pg.inner_text(".card[data-tag='train/loss'] .tooltip")
    assert tip.startswith("step ") and tip.count(f"#{old['eval_id']}") == 1 and tip.count(f"#{new['eval_id']}") == 1
    assert "mean of" not in tip  # points as logged (a summarised series says so: test_ui_browser_sweep)

    # zoom by dragging, then reset
    xr = ("() => { const u = document.querySelector(\".card[data-tag='train/loss']\")._u; "
          "return [u.scales.x.min, u.scales.x.max]; }")
    full = pg.evaluate(xr)
    pg.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + 20)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 20, steps=5)
    pg.mouse.up()
    zoomed = pg.evaluate(xr)
    assert zoomed[0] > full[0] and zoomed[1] < full[1]
    pg.click(".card[data-tag='train/loss'] button.reset")
    assert pg.evaluate(xr) == full
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.4)
    pg.wait_for_selector(".card[data-tag='train/loss'] .tooltip")
    pg.screenshot(path=str(SHOTS / "scalars_tooltip.png"))

    # log y: values in 0.2 .. 0.95 get ticks inside the decade, not one "1e0"
    pg.check("#logscale")
    pg.wait_for_function("() => document.querySelector(\".card[data-tag='train/loss']\")._u.scales.y.distr === 3")
    labels = pg.evaluate("() => document.querySelector(\".card[data-tag='train/loss']\")._u.axes[1]._values"
                         ".filter(v => v !== '' && v !== null)")
    assert len(labels) >= 4 and "1e0" not in labels, labels
    pg.uncheck("#logscale")

    # wall-time axis: the last label fits inside the chart (it was clipped)
    pg.select_option("#xaxis", "wall")
    pg.wait_for_function("() => document.querySelector(\".card[data-tag='train/loss']\")._u.scales.x.time === true")
    overflow = pg.evaluate("""() => {
        const u = document.querySelector(".card[data-tag='train/loss']")._u, a = u.axes[0];
        u.ctx.font = a.font[0];
        let worst = -Infinity;
        a._splits.forEach((s, i) => {
            const label = a._values[i];
            if (label === null || label === undefined || label === "") return;
            const w = Math.max(...String(label).split("\\n").map(t => u.ctx.measureText(t).width));
            worst = Math.max(worst, u.valToPos(s, "x", true) + w / 2 - u.ctx.canvas.width);
        });
        return worst;
    }""")
    assert overflow <= 0, overflow
    pg.select_option("#xaxis", "step")

    # collapse a group: its charts go, the others stay
    pg.click("#charts details.group[data-group='train'] > summary")
    assert not pg.eval_on_selector("#charts details.group[data-group='train']", "d => d.open")

    # CSV of a chart: every run's points
    with pg.expect_download() as dl:
        pg.click(".card[data-tag='val/loss'] button.csv")
    lines = open(dl.value.path()).read().splitlines()
    assert lines[0] == "run,id,arguments,step,wall_time,value" and len(lines) == 1 + 2 * 4
    assert all(ln.split(",")[0] in (str(old["id"]), str(new["id"])) for ln in lines[1:])
    assert pg.errors == []


def test_histograms_text_images_diff_and_url_state(lab, page):
    srv, featjob, runs = lab
    pg = page
    (old,), (new,) = by(runs, 0.01)[:1], by(runs, 0.01)[1:]
    (b,) = by(runs, 0.02)
    pg.goto(srv.link(f"?fn={featjob.fit.symbol}&runs={new['id']},{b['id']}&tab=histograms"))
    pg.wait_for_selector("body[data-ready='1']")
    # the view came back from the URL
    assert pg.get_attribute("#tabs button.active", "data-tab") == "histograms"
    assert sorted(run_ids(pg)) and len(pg.query_selector_all("#runs tbody tr.selected")) == 2
    pg.wait_for_selector("#histograms canvas[data-steps='3']")
    ranges = pg.eval_on_selector_all("#histograms canvas[data-tag='w']", "cs => cs.map(c => c.dataset.range)")
    assert len(ranges) == 2 and len(set(ranges)) == 1  # one x-range for every run
    # step labels: whole ("step 3900", not "tep 3900"), inside the canvas, never overlapping
    canvas = pg.query_selector("#histograms canvas[data-tag='many']")
    import json

    labels = json.loads(canvas.get_attribute("data-labels"))
    width = canvas.evaluate("c => c.clientWidth")
    assert labels[0][0] == "step 0" and 5 <= len(labels) < 40
    assert all(t.startswith("step ") and x >= 0 and x + w <= width for t, x, y, w in labels)
    assert all(b[2] - a[2] >= 13 for a, b in zip(labels, labels[1:], strict=False))
    # titles are cut with an ellipsis (full text on hover), never broken inside a word
    style = canvas.evaluate("c => { const s = getComputedStyle(c.closest('.card').querySelector('h3'));"
                            " return [s.whiteSpace, s.textOverflow]; }")
    assert style == ["nowrap", "ellipsis"]
    pg.screenshot(path=str(SHOTS / "histograms.png"), full_page=True)
    pg.select_option("#hist-mode", "distribution")
    pg.wait_for_selector("#histograms canvas[data-mode='distribution']")
    pg.screenshot(path=str(SHOTS / "distributions.png"), full_page=True)

    # text: markdown tables render, logged script never runs
    pg.click("#tabs button[data-tab='text']")
    pg.wait_for_selector("#texts .md table")
    assert pg.evaluate("() => window.__pwned") is None
    assert pg.query_selector("#texts script") is None and pg.query_selector("#texts img") is None
    assert "<script>window.__pwned = 1</script>" in pg.inner_text("#texts")  # shown as text, never parsed
    # grouped by tag across runs: one section for the tag, one cell per run
    assert len(pg.query_selector_all("#texts section.tag-group")) == 1
    assert len(pg.query_selector_all("#texts section.tag-group .cell")) == 2
    assert "done v2" in pg.inner_text("#texts")
    pg.screenshot(path=str(SHOTS / "text_markdown.png"), full_page=True)

    # the URL follows the view, the tag filter too, and a reload restores it
    assert "tab=text" in pg.url and f"runs={new['id']}%2C{b['id']}" in pg.url
    pg.click("#tabs button[data-tab='scalars']")
    pg.fill("#tag-filter", "^val/")
    pg.wait_for_function("() => location.search.includes('tags=%5Eval%2F')")
    pg.reload()
    pg.wait_for_selector("body[data-ready='1']")
    assert pg.input_value("#tag-filter") == "^val/"
    pg.wait_for_function("() => [...document.querySelectorAll('#charts .card')].map(c => c.dataset.tag).join() === 'val/loss'")
    assert len(pg.query_selector_all("#runs tbody tr.selected")) == 2
    # final-metric columns sort the runs
    pg.click("#runs th[data-col='⟶ score']")
    pg.wait_for_function("() => [...document.querySelectorAll('#runs tbody tr td.num')].length > 0")
    col = pg.eval_on_selector_all("#runs thead th", "ths => ths.findIndex(t => t.dataset.col === '⟶ score')")
    scores = pg.eval_on_selector_all(f"#runs tbody tr td:nth-child({col + 1})", "tds => tds.map(t => parseFloat(t.textContent))")
    assert scores == sorted(scores) and len(scores) == 4
    pg.click("#tabs button[data-tab='text']")

    # code diff: older -> newer whatever the click order
    pg.click("#select-none")
    select_runs(pg, [new["id"], old["id"]])  # newer first
    pg.click("#compare-code")
    pg.wait_for_selector("#diff pre")
    head = pg.inner_text("#diff .diff-head")
    assert head.index(f"#{old['eval_id']}") < head.index(f"#{new['eval_id']}") and "older" in head and "newer" in head
    assert '-    memolab.log.text("report"' not in pg.inner_text("#diff") or "v1" in pg.inner_text("#diff")
    pg.screenshot(path=str(SHOTS / "code_diff.png"), full_page=True)
    assert pg.errors == []


def test_token_flow_in_the_browser(tmp_store, page):
    """Bound beyond loopback: the printed URL's token opens the page, a cookie carries it after."""
    get_store()
    srv, _ = serve_in_thread(tmp_store, host="0.0.0.0")
    try:
        port = srv.server_address[1]
        pg = page
        assert pg.request.get(f"http://127.0.0.1:{port}/").status == 401
        pg.goto(f"http://127.0.0.1:{port}/?token={srv.token}")
        pg.wait_for_selector("body[data-ready='1']")  # every API call after the first carried the cookie
        pg.reload()
        pg.wait_for_selector("body[data-ready='1']")
        assert "token=" not in pg.url and pg.errors == []
    finally:
        srv.shutdown()
        srv.server_close()
