"""The runs table of a function with more runs than one screen, in a real headless Chromium (see
test_ui_browser.py): the page asks for the rows the screen shows (not a fixed window), scrolling
brings every other run page by page (sorted by the server), and what it says about all of them (the
best run of a metric, each group's statistics, a selected run beyond the page) is the server's, over
every run, equal to Python's own computation."""
from __future__ import annotations

import math
import urllib.parse

from memolab.store import get_store
from memolab.ui.server import serve_in_thread
from test_ui_browser import chromium, page  # noqa: F401  (fixtures)

N = 600  # ten screens and more: every run past the first is reached by paging
BEST = 234  # the lowest val/loss, far below the first page (the newest runs)
LRS = [0.1, 0.2, 0.3, 0.4]


def loss(r: int) -> float | None:
    if r % 10 == 0:
        return None  # logged no val/loss
    return 0.5 if r == BEST else 1 + (r * 7919 % 601) / 601


def fill() -> None:
    from memolab.tracking.sink import END, SCALAR, START, sink_for

    s = sink_for(get_store().index)
    for r in range(1, N + 1):
        s.q.append((START, r, {"fn": "many:f", "started": float(r), "hparams": {"lr": LRS[r % 4], "seed": r}}))
        if loss(r) is not None:
            s.q.append((SCALAR, r, "val/loss", 0, float(r), loss(r) + 1))  # the final value is the last step's
            s.q.append((SCALAR, r, "val/loss", 1, float(r), loss(r)))
        s.q.append((END, r, "done", float(r) + 1, None))
    s.flush()


# the table is drawn for where it is scrolled to (its top spacer as tall as the rows above the first
# drawn: app.js virtualRows), and every row drawn has come (no page still asked for)
DRAWN = """() => {
  const w = document.querySelector('#runs-wrap'), h = state.rowH || ROW_H;
  const sp = document.querySelector('#runs tbody tr.spacer td');
  return !!sp && Math.abs(parseFloat(sp.style.height) - Math.max(0, Math.floor(w.scrollTop / h) - 10) * h) < 1
    && !document.querySelector('#runs tbody tr.pending') && !!document.querySelector('#runs tbody tr[data-run]');
}"""


def runs_asked(srv) -> list[dict[str, list[str]]]:
    return [urllib.parse.parse_qs(urllib.parse.urlparse(p).query) for p, _ in list(srv.served)
            if urllib.parse.urlparse(p).path == "/api/runs"]


def test_a_long_runs_table_is_paged_to_the_screen_and_scrolls_through_every_run(tmp_store, page):  # noqa: F811
    fill()
    srv, _ = serve_in_thread(tmp_store)
    try:
        pg = page
        pg.goto(srv.link("?fn=many:f"))
        pg.wait_for_selector("body[data-ready='1']")
        assert f"{N} evaluation(s), 20 selected" in pg.inner_text("#run-count")
        # the first load asked for the rows a 1000-px-high screen shows and a margin: not 2,000
        first = runs_asked(srv)
        limits = [int(q["limit"][0]) for q in first if "limit" in q]
        assert limits and all(20 <= n <= 1000 // 20 + 40 for n in limits), limits
        screen = limits[0]
        # the best val/loss of every run (the server's), though its row is not loaded
        values = {r: loss(r) for r in range(1, N + 1) if loss(r) is not None}
        want = min(values, key=lambda r: (values[r], -r))
        assert want == BEST
        pg.wait_for_function("b => state.bestRow === b", arg=str(BEST))
        assert pg.query_selector(f"#runs tbody tr[data-run='{BEST}']") is None

        # scrolling through the table reaches every run, newest first, a page at a time
        seen: list[int] = []
        wrap_h = pg.eval_on_selector("#runs-wrap", "w => w.clientHeight")
        top = 0
        while True:
            pg.eval_on_selector("#runs-wrap", "(w, t) => { w.scrollTop = t; w.dispatchEvent(new Event('scroll')); }", top)
            pg.wait_for_function(DRAWN)
            for i in pg.eval_on_selector_all("#runs tbody tr[data-run]", "rs => rs.map(r => +r.dataset.run)"):
                if not seen or i < seen[-1]:
                    seen.append(i)
            at = pg.eval_on_selector("#runs-wrap", "w => [w.scrollTop, w.scrollHeight - w.clientHeight]")
            if at[0] >= at[1]:
                break
            top = at[0] + wrap_h
        assert seen == list(range(N, 0, -1))
        pages = [q for q in runs_asked(srv) if "limit" in q]
        assert all(int(q["limit"][0]) == screen for q in pages), "a page is a screen, never the whole window"
        assert len(pages) >= N // screen
        # the best run's row, once scrolled to, is marked
        pg.eval_on_selector("#runs-wrap", "(w, i) => { w.scrollTop = i * (state.rowH || ROW_H); }", N - BEST)
        pg.wait_for_selector(f"#runs tbody tr[data-run='{BEST}'].best")

        # sorted by val/loss (the server sorts: lowest first), the best run heads the table
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = 0; }")
        pg.click("#runs thead th[data-col='⟶ val/loss']")
        pg.wait_for_function("b => { const r = document.querySelector('#runs tbody tr[data-run]');"
                             " return r && r.dataset.run === b; }", arg=str(BEST))
        assert any(q.get("sort") == ["m:val/loss"] and int(q["limit"][0]) == screen for q in runs_asked(srv))

        # grouped by lr: each group's count, mean, min and max of val/loss over all the runs
        pg.select_option("#group-by", "lr")
        pg.wait_for_selector("#group-stats:not(.hidden) tbody tr")
        rows = pg.eval_on_selector_all("#group-stats tbody tr",
                                       "rs => rs.map(r => [...r.children].map(td => td.textContent))")
        assert [r[0] for r in rows] == [str(x) for x in LRS]
        for lr, (_, runs, n, mean, lo, hi) in zip(LRS, rows, strict=True):
            members = [r for r in range(1, N + 1) if LRS[r % 4] == lr]
            vals = [values[r] for r in members if r in values]
            assert int(runs) == len(members) and int(n) == len(vals)
            for shown, truth in ((mean, sum(vals) / len(vals)), (lo, min(vals)), (hi, max(vals))):
                assert math.isclose(float(shown), truth, rel_tol=1e-5), (lr, shown, truth)
        best_group = pg.eval_on_selector("#group-stats tbody tr.best", "r => r.dataset.group")
        means = {lr: sum(v for r, v in values.items() if LRS[r % 4] == lr) / sum(1 for r in values if LRS[r % 4] == lr)
                 for lr in LRS}
        assert best_group == str(min(means, key=means.get))

        # a view naming a run far from the first page keeps it selected (asked by id), and draws it
        pg.goto(srv.link(f"?fn=many:f&runs={BEST}"))
        pg.wait_for_selector("body[data-ready='1']")
        assert f"{N} evaluation(s), 1 selected" in pg.inner_text("#run-count")
        pg.wait_for_function("b => state.selected.join() === b", arg=str(BEST))
        pg.wait_for_selector("#charts canvas[data-tag='val/loss']")
        assert pg.errors == []
    finally:
        srv.shutdown()
        srv.server_close()
