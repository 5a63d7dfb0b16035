"""The dashboard on a sweep (30 runs x 8 tags x 2,000 steps, one still running) in headless
Chromium: what a view asks of the server and what it draws are counted, never timed (timings are
in benchmarks/dashboard.py). See test_ui_browser.py for the browser set-up."""
from __future__ import annotations

import math
import os
import re
import shutil
import socket
import time

import pytest

from memolab.store import close_open_stores, get_store
from memolab.tracking import sink as S
from memolab.ui.server import serve_in_thread
from test_ui_browser import chromium, page  # noqa: F401  (fixtures)

FN = "sweep:train"
TAGS = ["lr", "sys/gpu", "train/acc", "train/loss", "val/acc", "val/loss", "x/a", "x/b"]


def build(index, runs=30, steps=2000):
    sk = S.Sink(index)
    ids = []
    for r in range(runs):
        rid = 1000 + r
        ids.append(rid)
        fields = {"fn": FN, "started": 1e9 + r, "pid": os.getpid(), "host": socket.gethostname(),
                  "hparams": {"lr": 10 ** -(1 + r % 5), "width": 32 * (1 + r % 3), "steps": 100000, "seed": r}}
        if r == 0:
            fields["name"] = "baseline"
        sk.q.append((S.START, rid, fields))
        for ti, tag in enumerate(TAGS):
            # val/ tags are logged every 10th step: fewer points than train/
            every = 10 if tag.startswith("val/") else 1
            sk.q.extend((S.SCALAR, rid, tag, s, 1e9 + r + s, (1 + ti + r / 30) * math.exp(-s / 700) + 0.05 * math.sin(s))
                        for s in range(0, steps, every))
        if r != runs - 1:  # the newest one is still running
            sk.q.append((S.END, rid, "done", 1e9 + r + steps, None))
        sk.flush()
    return ids


def series_requests(srv, since=0):
    return [(p, b) for p, b in list(srv.served)[since:] if p.startswith("/api/series")]


def in_view_then_rest(reqs, commas):
    """The tags asked for first (tag=) and those asked for next (every other: skip= the first),
    checking that the two requests name the same runs."""
    from urllib.parse import parse_qs, urlparse

    assert len(reqs) == 2, reqs
    first, second = (parse_qs(urlparse(p).query) for p, _ in reqs)
    assert first["runs"] == second["runs"] and first["runs"][0].count(",") == commas
    assert "skip" not in first and "tag" not in second and sorted(second["skip"]) == sorted(first["tag"])
    return first["tag"], {t for t in TAGS if t not in first["tag"]}


def drawn(pg, before):
    pg.wait_for_function(f"() => +(document.body.dataset.drawn || 0) > {before}", timeout=30000)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sweep's store written once for the module ((store folder, run ids): 480,000 points, some
    10 s under load), closed; each test serves a copy of its own (what a test adds stays in it)."""
    root = tmp_path_factory.mktemp("sweep") / "store"
    ids = build(get_store(root).index)
    close_open_stores(root)
    return root, ids


@pytest.fixture
def sweep(tmp_store, page, built):
    """The sweep written and served: (run ids, server, show), where show(query) opens the page at
    that query and returns it once the first charts are drawn."""
    template, ids = built
    assert not tmp_store.exists()  # opened by nobody yet: the copy is the store it opens
    shutil.copytree(template, tmp_store)
    srv, _ = serve_in_thread(tmp_store)

    def show(query):
        page.goto(srv.link(query))
        page.wait_for_selector("body[data-ready='1']")
        drawn(page, 0)
        return page

    try:
        yield ids, srv, show
    finally:
        srv.shutdown()
        srv.server_close()


def select(pg, ids):
    """Select these runs (as the runs table would) and wait for the charts to be drawn."""
    before = pg.evaluate("() => +document.body.dataset.drawn")
    pg.evaluate("(ids) => setSelection(ids)", [str(i) for i in ids])
    drawn(pg, before)


def drag_zoom(pg, box):
    """Zoom a chart by dragging across 30% to 36% of its plot (``box``: its .u-over)."""
    pg.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 20)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * 0.36, box["y"] + 20, steps=5)
    pg.mouse.up()


def zoom_to_detail(pg, box, card, runs):
    """Zoom the chart of ``card`` once it draws all ``runs`` runs, and wait until it shows a range's
    points. One gesture, never retried: a chart is not drawn again while a pointer is down on it (a
    new plot made between the press and the release took the release without the press, and the zoom
    was lost under load), and a zoomed chart made anew keeps its range (charts.js)."""
    pg.wait_for_function(f"() => {{ const c = document.querySelector(`{card} canvas[data-runs]`); "
                         f"return c && c.dataset.runs.split(',').length === {runs} && "
                         f"(c.dataset.sent || '').split(',').length === {runs}; }}", timeout=30000)
    drag_zoom(pg, box)
    pg.wait_for_selector(f"{card} canvas[data-detail]", timeout=30000)


def test_a_sweep_is_fetched_once_drawn_compactly_and_refreshed_by_its_new_points(sweep):
    ids, srv, show = sweep
    pg = show(f"?fn={FN}")
    # on arrival: the 20 newest runs selected, the tags of the charts in view first, then the others
    # of them, each series sent once; charts out of view are not made until scrolled to
    sel = pg.evaluate("() => state.selected")
    assert sel == [str(i) for i in ids[::-1][:20]]
    pg.wait_for_function("() => state.fetched.size === 20")
    near, rest = in_view_then_rest(series_requests(srv), 19)
    shown = pg.evaluate("""() => Object.entries(state.charts).filter(([t, c]) => {
        const r = c.card.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; }).map(([t]) => t).sort()""")
    assert shown and set(shown) <= set(near) and rest == set(TAGS) - set(near)
    built = pg.evaluate("() => Object.entries(state.charts).filter(([t, c]) => c.u).map(([t]) => t)")
    assert set(built) <= set(near) and set(TAGS) - set(built)
    # every series is held at most 2 points a pixel (2,000 steps, 200 for val/)
    plot_w = pg.evaluate("() => document.querySelector('#charts .plot').clientWidth")
    sent = pg.evaluate("() => [...document.querySelectorAll('#charts canvas[data-sent]')]"
                       ".flatMap(c => c.dataset.sent.split(',').map(Number))")
    assert len(sent) >= 20 and max(sent) <= 2 * plot_w

    # select all: the 10 runs not held yet, in view first then the rest
    n0 = len(srv.served)
    before = pg.evaluate("() => +document.body.dataset.drawn")
    pg.click("#select-all")
    drawn(pg, before)
    pg.wait_for_function("() => state.fetched.size === 30")
    near, rest = in_view_then_rest(series_requests(srv, n0), 9)
    assert set(near) | rest == set(TAGS)
    assert "30 selected" in pg.inner_text("#run-count")
    # 30 runs, 30 styles: 24 colours, then dashes
    styles = pg.evaluate("() => state.selected.map(id => colorOf(id) + JSON.stringify(dashOf(id)))")
    assert len(set(styles)) == 30
    assert len(set(pg.evaluate("() => state.selected.map(colorOf)"))) == 24

    # deselect one run: nothing is fetched, the charts in view drop it
    n0 = len(srv.served)
    before = pg.evaluate("() => +document.body.dataset.drawn")
    gone = str(ids[5])
    pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = w.scrollHeight; }")
    # a real click (press and release): the table is not drawn again while a pointer is down in it
    pg.click(f"#runs tbody tr[data-run='{gone}'] input[type=checkbox]")
    drawn(pg, before)
    assert series_requests(srv, n0) == []
    first = pg.query_selector("#charts canvas[data-tag='lr']")
    assert gone not in first.get_attribute("data-runs").split(",") and len(first.get_attribute("data-runs").split(",")) == 29

    # the legend wraps (never cut after two entries: issue 54) and scrolls past ~3 lines, whatever the number of runs
    heights = pg.eval_on_selector_all("#charts .card .legend", "ls => ls.map(l => l.getBoundingClientRect().height)")
    assert heights and max(heights) <= 52
    assert "+5 more" in pg.inner_text(".card[data-tag='lr'] .legend")

    # the tooltip: run label and value, best first (a loss: lowest first), inside the window even at its corner
    card = pg.query_selector(".card[data-tag='train/loss']")
    card.scroll_into_view_if_needed()
    pg.evaluate("() => window.scrollBy(0, 150)")  # the chart near the bottom of the window
    box = pg.query_selector(".card[data-tag='train/loss'] .u-over").bounding_box()
    pg.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    pg.wait_for_selector(".card[data-tag='train/loss'] .tooltip")
    tip = pg.query_selector(".card[data-tag='train/loss'] .tooltip")
    tb = tip.bounding_box()
    vw, vh = pg.evaluate("() => [document.documentElement.clientWidth, window.innerHeight]")
    assert tb["x"] >= 0 and tb["y"] >= 0 and tb["x"] + tb["width"] <= vw and tb["y"] + tb["height"] <= vh
    vals = [float(v) for v in tip.eval_on_selector_all(".tip-val", "vs => vs.map(v => v.textContent)")]
    assert len(vals) == 20 and vals == sorted(vals)
    assert "lowest first" in tip.inner_text()
    assert "… and 9 more" in tip.inner_text()
    labels = tip.eval_on_selector_all(".tip-label", "ls => ls.map(l => l.textContent)")
    # labels name the run by what differs between runs (not the constant steps=100000)
    assert all("steps=" not in lb and "seed=" in lb for lb in labels if "baseline" not in lb)
    pg.mouse.move(0, 0)

    # idle: the running run writes nothing, so only the heartbeat is asked
    n0 = len(srv.served)
    time.sleep(4.5)
    idle = [p for p, _ in list(srv.served)[n0:]]
    assert idle and all(p == "/api/heartbeat" for p in idle), idle
    assert all(b < 300 for _, b in list(srv.served)[n0:])

    # live: the running run logs 50 more points per tag; the refresh sends those, not the series
    live = ids[-1]
    sk = S.Sink(get_store().index)
    for tag in TAGS:
        start = 2000 if not tag.startswith("val/") else 2000
        sk.q.extend((S.SCALAR, live, tag, s, time.time(), 0.5) for s in range(start, start + 50))
    n0 = len(srv.served)
    sk.flush()
    pg.wait_for_function(f"() => Object.values(state.series).every(per => !per['{live}'] || per['{live}'].step.includes(2049))",
                         timeout=20000)
    reqs = series_requests(srv, n0)
    assert len(reqs) == 1 and f"runs={live}&" in reqs[0][0] and "seen=" in reqs[0][0]
    assert reqs[0][1] < 20_000, reqs  # 400 new points; the full series of that run were far more

    # the runs table's metric columns: the validation loss and accuracy first, then train/, never
    # sys/ unless chosen; HParams fits its box
    heads = pg.eval_on_selector_all("#runs thead th", "ths => ths.map(t => t.dataset.col).filter(c => c.startsWith('⟶'))")
    assert [h.split()[1] for h in heads[:4]] == ["val/loss", "val/acc", "train/acc", "train/loss"] and len(heads) == 6
    assert not any("sys/" in h for h in heads)
    pg.click("#tabs button[data-tab='hparams']")
    pg.wait_for_selector("#hparams tbody tr")
    cols = pg.eval_on_selector_all("#hparams th", "ths => ths.map(t => t.dataset.col)")
    assert [c for c in cols if c in ("lr", "width", "seed", "steps")] == ["lr", "width", "seed"]  # steps is constant
    pg.click("#hp-const")
    pg.wait_for_selector("#hparams th[data-col='steps']")
    steps_col = pg.eval_on_selector_all("#hparams th", "ths => ths.findIndex(t => t.dataset.col === 'steps')")
    shown = pg.eval_on_selector_all(f"#hparams tbody td:nth-child({steps_col + 1})", "ts => ts.map(t => t.textContent)")
    assert set(shown) == {"100000"}  # as written, not 1.000e+5
    assert pg.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    # parallel coordinates: the arguments that vary, then the metrics (the validation loss first, it
    # colours the lines; two more, held-out first); lr spans four decades: a log axis
    assert pg.get_attribute("#parcoords", "data-axes") == "lr|width|seed|⟶ val/loss|⟶ val/acc|⟶ lr"
    assert pg.get_attribute("#parcoords", "data-log") == "lr"
    pg.click("#hparams th[data-col='⟶ train/loss']")  # sorting a metric column picks it
    pg.wait_for_function("() => document.querySelector('#parcoords').dataset.axes.split('|')[3] === '⟶ train/loss'")
    assert pg.errors == []


def test_toggling_runs_of_a_chart_of_many_shows_and_hides_them_in_place(sweep):
    """With more than 10 runs a chart toggles runs with uPlot's setSeries (a redraw), not a new
    chart. What it draws must still be exactly the selected runs: the y range follows the runs
    shown (as a chart built for them alone), the tooltip and the legend list only those; a run it
    does not hold, or 10 runs or fewer (whose bands come back), make a new chart."""
    ids, _, show = sweep
    pg = show(f"?fn={FN}&runs=" + ",".join(map(str, ids[:25])))
    chart = ("() => { const c = state.charts['lr']; return [c.u.scales.y.min, c.u.scales.y.max, "
             "c.u.series.filter((s, i) => i && s.show).length, c.card.querySelector('canvas').dataset.runs]; }")
    pg.evaluate("() => { window.__u = state.charts['lr'].u; }")
    same = "() => state.charts['lr'].u === window.__u"
    lo0, hi0, shown, runs = pg.evaluate(chart)
    assert shown == 25 and runs.split(",") == [str(i) for i in ids[:25]]

    # the 11 lowest runs (values grow with the run): hidden in place, the range shrinks to theirs
    select(pg, ids[:11])
    assert pg.evaluate(same)
    lo, hi, shown, runs = pg.evaluate(chart)
    assert shown == 11 and runs.split(",") == [str(i) for i in ids[:11]]
    assert hi < hi0
    # ... the very range a chart made for these 11 runs alone gets
    pg.evaluate("() => { const c = state.charts['lr']; c.u.destroy(); c.u = null; c.dsig = null; }")
    before = pg.evaluate("() => +document.body.dataset.drawn")
    pg.evaluate("() => redrawScalars()")
    drawn(pg, before)
    assert pg.evaluate(chart)[:3] == [lo, hi, 11]
    pg.evaluate("() => { window.__u = state.charts['lr'].u; }")
    # the tooltip lists the runs shown only
    box = pg.query_selector(".card[data-tag='lr'] .u-over").bounding_box()
    pg.mouse.move(box["x"] + 20, box["y"] + box["height"] / 2)
    pg.wait_for_selector(".card[data-tag='lr'] .tooltip")
    assert len(pg.query_selector_all(".card[data-tag='lr'] .tooltip .tip-val")) == 11
    # a summarised series' value is a bucket's mean: the tooltip says of which steps
    note = pg.inner_text(".card[data-tag='lr'] .tooltip .tip-note")
    assert re.fullmatch(r" ?· mean of steps \d+–\d+", note), note
    pg.mouse.move(0, 0)

    # runs the chart does not hold: a new chart, all shown
    select(pg, ids[:25])
    assert not pg.evaluate(same)
    pg.evaluate("() => { window.__u = state.charts['lr'].u; }")
    lo, hi, shown, runs = pg.evaluate(chart)
    assert (lo, hi, shown) == (lo0, hi0, 25)
    # hide two, show them again: the same chart, back to the range it had
    select(pg, ids[:23])
    assert pg.evaluate(same) and pg.evaluate(chart)[2] == 23
    assert pg.eval_on_selector(".card[data-tag='lr'] .legend", "l => l.children.length") == 23  # all of them, no "+N more"
    select(pg, ids[:25])
    assert pg.evaluate(same)
    assert pg.evaluate(chart) == [lo0, hi0, 25, ",".join(map(str, ids[:25]))]
    # 10 runs: their min/max bands come back, so a new chart of 4 uPlot series a run
    select(pg, ids[:10])
    assert not pg.evaluate(same)
    assert pg.evaluate("() => state.charts['lr'].u.series.length") == 1 + 4 * 10

    # the CSV of a chart whose series are summarised: every point as logged, not the bucket means
    select(pg, ids[:2])
    assert pg.evaluate("() => state.series['lr']['1000'].downsampled")
    with pg.expect_download() as dl:
        pg.click(".card[data-tag='lr'] button.csv")
    lines = open(dl.value.path()).read().splitlines()
    assert lines[0] == "run,id,arguments,step,wall_time,value" and len(lines) == 1 + 2 * 2000
    first = [ln.rsplit(",", 3) for ln in lines[1:] if ln.startswith("1000,")]
    assert [int(st) for _, st, _, _ in first] == list(range(2000))
    assert all(float(v) == math.exp(-int(st) / 700) + 0.05 * math.sin(int(st)) for _, st, _, v in first)
    assert pg.errors == []


def test_a_zoomed_chart_draws_the_points_of_its_range(sweep):
    """A long series is drawn from bucket means; zoomed in (step axis), the chart asks for the points
    of the range it shows and draws those (the tooltip reads them too), its smoothed line going on
    from the summary's without a jump; reset zoom draws the summary again. With more than 10 runs,
    toggling a run keeps the detail."""
    ids, srv, show = sweep
    pg = show(f"?fn={FN}&runs={ids[0]},{ids[1]}")
    card = ".card[data-tag='lr']"
    canvas = f"{card} canvas[data-runs]"
    summary = [int(n) for n in pg.get_attribute(canvas, "data-sent").split(",")]
    assert pg.evaluate("() => state.series['lr']['1000'].downsampled") and max(summary) < 2000
    # the smoothed summary, to compare the detail's smoothed line with
    ov = pg.evaluate("() => { const s = state.charts['lr'].series[0]; return [s.step, s.y]; }")
    box = pg.query_selector(f"{card} .u-over").bounding_box()
    n0 = len(srv.served)
    zoom_to_detail(pg, box, card, 2)
    s0, s1 = map(int, pg.get_attribute(canvas, "data-detail").split("-"))
    assert 400 < s0 < s1 < 900
    req = [p for p, _ in series_requests(srv, n0)]
    assert len(req) == 1 and f"from={s0}&to={s1}" in req[0] and "tag=lr" in req[0]
    # every logged point of the range (fewer than 2 a pixel here), not the summary's few
    assert [int(n) for n in pg.get_attribute(canvas, "data-sent").split(",")] == [s1 - s0 + 1] * 2
    xs = pg.evaluate("() => state.charts['lr'].u.data[0]")
    assert xs == list(range(s0, s1 + 1))
    # the smoothed line goes on from the summary's: at the range's middle, within the noise
    mid = (s0 + s1) // 2
    y_detail = pg.evaluate(f"() => state.charts['lr'].tip[0].y[{mid - s0}]")
    j = max(i for i, st in enumerate(ov[0]) if st <= mid)
    assert abs(y_detail - ov[1][j]) < 0.05, (y_detail, ov[1][j])
    # the tooltip reads the points: values as logged, no "mean of" note
    pg.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
    pg.wait_for_selector(f"{card} .tooltip")
    assert pg.query_selector(f"{card} .tooltip .tip-note") is None
    step = int(pg.inner_text(f"{card} .tooltip b").split()[1].replace(",", ""))
    vals = sorted(float(v) for v in pg.eval_on_selector_all(f"{card} .tooltip .tip-val", "vs => vs.map(v => v.textContent)"))
    want = sorted((1 + r / 30) * math.exp(-step / 700) + 0.05 * math.sin(step) for r in (0, 1))
    assert all(abs(a - b) < 1e-4 * abs(b) for a, b in zip(vals, want, strict=False)), (step, vals, want)
    pg.mouse.move(0, 0)
    # reset zoom: the summary again
    pg.click(f"{card} button.reset")
    pg.wait_for_function(f"() => !document.querySelector(\"{canvas}\").dataset.detail")
    assert [int(n) for n in pg.get_attribute(canvas, "data-sent").split(",")] == summary

    # 12 runs (no bands): zoom, then toggle a run: the chart keeps the points of its range
    select(pg, ids[:12])
    zoom_to_detail(pg, box, card, 12)
    s0, s1 = map(int, pg.get_attribute(canvas, "data-detail").split("-"))
    select(pg, ids[:11])
    assert pg.get_attribute(canvas, "data-detail") == f"{s0}-{s1}"
    assert pg.get_attribute(canvas, "data-sent").split(",") == [str(s1 - s0 + 1)] * 11
    pg.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
    pg.wait_for_selector(f"{card} .tooltip")
    assert len(pg.query_selector_all(f"{card} .tooltip .tip-val")) == 11

    # the chart made anew between a drag's press and release (what a series landing or a new best
    # run does on a live sweep) loses neither the drag nor the zoom: its draw waits for the release,
    # then keeps the range (a plot made under the press took the release without it: no zoom)
    pg.click(f"{card} button.reset")
    pg.wait_for_function(f"() => !document.querySelector(\"{canvas}\").dataset.detail")
    pg.evaluate("() => { state.charts['lr'].u.ctx.canvas.dataset.plot = 'before'; }")
    pg.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 20)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * 0.36, box["y"] + 20, steps=5)
    pg.evaluate("() => { const c = state.charts['lr']; c.sig = c.dsig = c.vsig = null; scheduleDraw(['lr']); }")
    pg.wait_for_function("() => press.pending.has('chart lr')")  # the draw came, and waits
    assert pg.evaluate("() => state.charts['lr'].u.ctx.canvas.dataset.plot") == "before"
    pg.mouse.up()
    pg.wait_for_function("() => state.charts['lr'].u.ctx.canvas.dataset.plot !== 'before'")  # made anew after
    pg.wait_for_selector(f"{card} canvas[data-detail]", timeout=30000)
    z0, z1 = map(int, pg.get_attribute(canvas, "data-detail").split("-"))
    assert 400 < z0 < z1 < 900, (z0, z1)

    # a row clicked while the table is drawn again between the press and the release: still a click
    row = f"#runs tbody tr[data-run='{ids[3]}'] input[type=checkbox]"
    assert str(ids[3]) in pg.evaluate("() => state.selected")
    pg.hover(row)
    pg.mouse.down()
    pg.evaluate("() => renderRuns()")
    pg.wait_for_function("() => press.pending.has('runs')")
    pg.mouse.up()
    pg.wait_for_function(f"() => !state.selected.includes('{ids[3]}')")
    assert pg.errors == []
