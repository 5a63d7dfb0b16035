"""The dashboard as a daily sweep tool (issue 54), in headless Chromium at 1280 and 1920 px, on a
24-run sweep (3 optimizers x 4 learning rates x 2 seeds of train, prepare -> train -> evaluate, one
code edit after 20 runs: tests/sweep24.py). See test_ui_browser.py for the browser set-up."""
from __future__ import annotations

import pytest

import sweep24
from memolab.store import get_store
from memolab.ui.server import serve_in_thread
from test_ui_browser import chromium, page  # noqa: F401  (fixtures)

WIDTHS = (1280, 1920)


@pytest.fixture
def daily(tmp_store, page):  # noqa: F811
    """The sweep written and served: (runs, open(query, width)), which opens the page at that
    query and width and returns it once its charts are drawn."""
    runs = sweep24.build(get_store().index)
    srv, _ = serve_in_thread(tmp_store)

    def open_(query="", width=1920):
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(srv.link(query))
        page.wait_for_selector("body[data-ready='1']")
        page.wait_for_function("() => +(document.body.dataset.drawn || 0) > 0", timeout=30000)
        return page

    try:
        yield runs, open_
    finally:
        srv.shutdown()
        srv.server_close()


LAYOUT = """() => {
  const secs = [...document.querySelectorAll('#charts details.group')];
  const grid = document.querySelector('#charts details.group[open] .grid');
  const cols = getComputedStyle(grid).gridTemplateColumns.split(' ').length;
  const card = grid.querySelector('.card').getBoundingClientRect();
  const canvas = grid.querySelector('.card canvas'), why = document.querySelector('#run-why');
  return { fn: state.fn, sections: secs.map((d) => [d.dataset.group, d.open]), cols,
           gridW: grid.getBoundingClientRect().width, cardW: card.width,
           canvasW: canvas ? canvas.getBoundingClientRect().width : 0,
           why: why.classList.contains('hidden') ? '' : why.textContent,
           count: document.querySelector('#run-count').textContent };
}"""

LEGEND = """(tag) => {
  const lg = document.querySelector(`#charts .card[data-tag='${tag}'] .legend`);
  const box = lg.getBoundingClientRect();
  const items = [...lg.children];
  // every entry within the legend's box and within its card: none cut off, none hidden past its edge
  return { texts: items.map((s) => s.textContent), allIn: items.every((s) => {
    const r = s.getBoundingClientRect();
    return r.height > 0 && r.right <= box.right + 1 && r.bottom <= box.bottom + 1 + lg.scrollHeight - lg.clientHeight; }),
    fits: lg.scrollWidth <= lg.clientWidth + 1 };
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_fills_the_width_opens_on_the_curves_and_folds_sys(daily, width):
    runs, open_ = daily
    pg = open_("", width)  # no function asked for: the one whose runs logged scalars most recently
    got = pg.evaluate(LAYOUT)
    # evaluate started last (and is first alphabetically) but logged no scalar: train's curves open
    assert got["fn"] == sweep24.TRAIN
    # the user's own sections first, the machine's samples last and folded
    assert got["sections"] == [["train", True], ["val", True], ["sys", False]]
    main_w = width - 240 - 32  # the sidebar and main's padding
    assert got["gridW"] >= main_w - 40
    # as many columns as 400 px cards fit (1280: 2, 1920: 4): the width is used, not 2 fixed columns
    assert got["cols"] == (main_w + 12) // 412
    assert got["cardW"] * got["cols"] + 12 * (got["cols"] - 1) >= got["gridW"] - 2
    assert got["canvasW"] >= got["cardW"] - 40  # each chart is drawn as wide as its card
    # why 20 of the 24 runs are selected
    assert got["count"].startswith("24 evaluation(s), 20 selected")
    assert "the 20 newest of 24 runs, selected on arrival" in got["why"]
    pg.click("#select-all")
    pg.wait_for_function("() => document.querySelector('#run-why').classList.contains('hidden')")
    # a wider card: fewer columns, charts redrawn as wide
    before = pg.evaluate("() => +document.body.dataset.drawn")
    pg.select_option("#card-width", "560")
    pg.wait_for_function(f"() => +document.body.dataset.drawn > {before}")
    got = pg.evaluate(LAYOUT)
    assert got["cols"] == max(1, (main_w + 12) // 572) and got["canvasW"] >= got["cardW"] - 40
    # opening sys shows its charts
    pg.click("#charts details.group[data-group='sys'] > summary")
    pg.wait_for_selector("#charts .card[data-tag='sys/cpu'] canvas[data-runs]")
    assert not pg.errors


@pytest.mark.parametrize("width", WIDTHS)
def test_a_legend_wraps_instead_of_cutting_groups_off(daily, width):
    runs, open_ = daily
    pg = open_(f"?fn={sweep24.TRAIN}&group=optimizer", width)
    pg.wait_for_function("() => document.querySelector(\"#charts canvas[data-tag='val/loss']\")?.dataset.grouped === '1'")
    got = pg.evaluate(LEGEND, "val/loss")
    for opt in sweep24.OPTIMIZERS:  # every group visible, sgd too
        assert any(f"optimizer={opt}" in t for t in got["texts"]), got["texts"]
    assert got["allIn"] and got["fits"]
    # ungrouped, 20 runs: all 20 listed (wrapped, scrolled past three lines), none cut at the card's edge
    pg.evaluate("() => { state.group.on = false; redrawScalars(); }")
    pg.wait_for_function("() => document.querySelector(\"#charts canvas[data-tag='val/loss']\")?.dataset.grouped === ''")
    got = pg.evaluate(LEGEND, "val/loss")
    assert len(got["texts"]) == 20 and got["fits"]
    assert not pg.errors


@pytest.mark.parametrize("width", WIDTHS)
def test_the_varying_arguments_are_sortable_columns_and_the_constant_ones_folded(daily, width):
    runs, open_ = daily
    pg = open_(f"?fn={sweep24.TRAIN}", width)
    heads = pg.eval_on_selector_all("#runs thead th", "ths => ths.map(t => t.dataset.col)")
    assert heads[3:7] == ["lr", "optimizer", "seed", "other arguments"]
    # in view, not cut off behind four constant tensor summaries
    right = pg.eval_on_selector("#runs-wrap", "w => w.getBoundingClientRect().right")
    for k in ("lr", "optimizer", "seed"):
        assert pg.eval_on_selector(f"#runs th[data-col='{k}']", "t => t.getBoundingClientRect().right") <= right
    cells = "(k) => [...document.querySelectorAll(`#runs tbody tr[data-run] td[data-arg='${k}']`)].map(t => t.textContent)"
    # sorted by a column: ascending, then descending
    pg.click("#runs th[data-col='lr']")
    lrs = [float(x) for x in pg.evaluate(cells, "lr")]
    assert lrs == sorted(lrs) and len(set(lrs)) == 4
    pg.click("#runs th[data-col='lr']")
    lrs = [float(x) for x in pg.evaluate(cells, "lr")]
    assert lrs == sorted(lrs, reverse=True)
    pg.click("#runs th[data-col='optimizer']")
    opts = pg.evaluate(cells, "optimizer")
    assert opts == sorted(opts) and opts[0] == "adam"
    # the constants folded into one cell (its tooltip has them all), unfolded on demand
    row = "#runs tbody tr[data-run] td.args"
    assert pg.inner_text(row) == "5 constant"
    assert "batch=64" in pg.get_attribute(row, "title") and "lr=" in pg.get_attribute(row, "title")
    pg.click("#runs th[data-col='other arguments'] .fold")
    pg.wait_for_function("() => document.querySelector('#runs tbody tr[data-run] td.args').textContent.startsWith('batch=64')")
    assert "lr=" not in pg.inner_text(row)  # (in its own column)
    assert not pg.errors


def legend_of(pg, tag):
    return pg.eval_on_selector_all(f"#charts .card[data-tag='{tag}'] .legend > span",
                                   "ss => ss.map(s => s.title || s.textContent)")


def test_groups_know_their_code_versions(daily):
    """After one code edit (runs 120-123: GELU for ReLU), grouping by optimizer averaged runs of two
    codes into one group silently: such a group is marked; the code version is a group-by key, a
    split of every group, and a filter."""
    runs, open_ = daily
    pg = open_(f"?fn={sweep24.TRAIN}&group=optimizer")
    before = pg.evaluate("() => +document.body.dataset.drawn")
    pg.click("#select-all")
    pg.wait_for_function(f"() => +document.body.dataset.drawn > {before} && "
                         "document.querySelector(\"#charts canvas[data-tag='val/loss']\").dataset.runs.split(',').length === 3")
    relu, gelu = sweep24.CODE_RELU[:7], sweep24.CODE_GELU[:7]
    assert pg.get_attribute("#charts canvas[data-tag='val/loss']", "data-mixed") == "g:optimizer=sgd"
    sgd = [t for t in legend_of(pg, "val/loss") if t.startswith("optimizer=sgd")]
    assert sgd == [f"optimizer=sgd (8 runs) ⚠ 2 code versions: {relu}×4, {gelu}×4"]
    marked = pg.eval_on_selector("#charts .card[data-tag='val/loss'] .legend .mixed", "s => s.textContent")
    assert marked.startswith("optimizer=sgd")

    def regroup(js, want):
        pg.evaluate(js)
        pg.wait_for_function("(want) => { const c = document.querySelector(\"#charts canvas[data-tag='val/loss']\");"
                             " return c && c.dataset.runs === want; }", arg=want)

    # a group that spans code versions split by version (the others keep their names): none spans two
    pg.check("#group-code")
    regroup("() => 0", ",".join(["g:optimizer=adam", "g:optimizer=rmsprop", f"g:optimizer=sgd · code {relu}",
                                 f"g:optimizer=sgd · code {gelu}"]))
    assert pg.get_attribute("#charts canvas[data-tag='val/loss']", "data-mixed") == ""
    assert "gcode=1" in pg.url
    # the code version as the group-by key
    assert pg.eval_on_selector("#group-by option[value='@code']", "o => o.textContent") == "code version"
    pg.select_option("#group-by", "@code")
    regroup("() => 0", f"g:code {relu},g:code {gelu}")
    assert sorted(legend_of(pg, "val/loss")) == [f"code {relu} (20 runs)", f"code {gelu} (4 runs)"]
    # and as a filter
    pg.fill("#run-filter", f"code:{gelu}")
    pg.wait_for_function("() => document.querySelectorAll('#runs tbody tr[data-run]').length === 4")
    assert sorted(pg.eval_on_selector_all("#runs tbody tr[data-run]", "rs => rs.map(r => +r.dataset.run)")) == runs["train"][20:]
    assert pg.inner_text("#run-count").startswith("4 of 24 evaluation(s)")
    regroup("() => 0", f"g:code {gelu}")
    assert not pg.errors


@pytest.mark.parametrize("width", WIDTHS)
def test_hparams_several_metric_axes_scatter_on_lr_labels_whole_and_24_colours_apart(daily, width):
    runs, open_ = daily
    pg = open_(f"?fn={sweep24.TRAIN}&tab=hparams", width)
    pg.wait_for_selector("#parcoords:not(.hidden)")
    pg.wait_for_function("() => document.querySelector('#parcoords').dataset.clipped !== undefined")
    axes = pg.get_attribute("#parcoords", "data-axes").split("|")
    # the varying arguments, then the validation loss (it colours the lines) and two more metrics
    assert axes == ["lr", "optimizer", "seed", "⟶ val/loss", "⟶ val/acc", "⟶ train/loss"]
    assert pg.get_attribute("#parcoords", "data-clipped") == "0"  # `rmsprop` whole, not `sprop`
    # the scatter's x: the varying numeric argument with the most values, not the first one
    assert pg.input_value("#scatter-x") == "lr" and pg.input_value("#scatter-y") == "val/loss"
    # 24 runs selected: 24 colours, no two alike
    pg.evaluate("(ids) => setSelection(ids)", [str(i) for i in runs["train"]])
    colours = pg.evaluate("() => state.selected.map((id) => colorOf(id))")
    assert len(set(colours)) == 24

    def lab(h):  # CIE L*a*b* (D65) of an sRGB colour
        rgb = [int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        xyz = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b,
               (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)
        fx, fy, fz = [c ** (1 / 3) if c > 0.008856 else 7.787 * c + 16 / 116 for c in xyz]
        return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)

    import itertools
    import math

    closest = min(math.dist(lab(a), lab(b)) for a, b in itertools.combinations(colours, 2))
    assert closest > 25, closest  # (the old palette's 24: 4.6, similar blues)
    assert not pg.errors
