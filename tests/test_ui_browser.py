"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright).

Needs: `apt-get install chromium` and `pip install playwright` (no `playwright install`:
we point it at the system browser). `make test` installs both; under CI a missing
browser is a failure, not a skip. Screenshots land in build/screenshots/ (set
MEMOLAB_SCREENSHOTS=docs/screenshots to refresh the committed ones).
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from pathlib import Path

import pytest

import memolab
from conftest import require, require_tool
from memolab.store import get_store
from memolab.ui.server import serve_in_thread

CHROMIUM = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
# CI must prove the dashboard works: a missing browser or Playwright fails there, never passes as a skip
sync_api = require("playwright.sync_api")
require_tool("chromium", CHROMIUM)

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / os.environ.get("MEMOLAB_SCREENSHOTS", "build/screenshots")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]

JOB = '''
import numpy as np
import memolab
from memolab import memo


@memo
def train(lr, width=32):
    rng = np.random.default_rng(int(lr * 1000))
    loss = 2.0
    for step in range(60):
        loss *= 1 - lr * 0.5
        memolab.log.scalar("loss", loss + rng.normal(0, 0.02), step)
        memolab.log.scalar("acc", 1 - loss / 2, step)
    for k in range(5):
        memolab.log.histogram("weights", rng.normal(k * lr * 5, 1.0, size=2000), step=k * 10)
    for k in range(3):
        img = np.zeros((16, 16, 3), dtype=np.uint8)
        img[:, : 5 * (k + 1), 0] = 255
        img[k * 5 : k * 5 + 4, :, 2] = 200
        memolab.log.image("samples", img, step=k * 20)
    memolab.log.text("notes", f"lr={lr}: finished with loss {loss:.3f} (VERSION)", step=59)
    return round(loss, 4)
'''


@pytest.fixture
def dashboard(tmp_store, tmp_path, monkeypatch):
    """Two code versions of dashjob.train (three evaluations), served on 127.0.0.1."""
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    monkeypatch.syspath_prepend(str(mod_dir))
    path = mod_dir / "dashjob.py"
    path.write_text(JOB.replace("(VERSION)", "(v1)"))
    import dashjob

    dashjob.train(0.05)
    dashjob.train(0.2)
    path.write_text(JOB.replace("(VERSION)", "(v2)").replace("loss *= 1 - lr * 0.5", "loss *= 1 - lr * 0.4"))
    for pyc in mod_dir.rglob("*.pyc"):
        pyc.unlink()
    dashjob = importlib.reload(dashjob)
    dashjob.train(0.1)
    srv, _ = serve_in_thread(tmp_store)
    yield srv, dashjob
    srv.shutdown()
    srv.server_close()
    sys.modules.pop("dashjob", None)


@pytest.fixture(scope="module")
def chromium():
    """One Chromium (and one Playwright driver) for the tests of a file: a launch per test cost about
    2 s of a loaded machine each, some thirty times a run. Each test's page is in a browser context
    of its own (``page``): no cookie, storage or cache of another test's page is seen."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.errors = errors
    pg.requests = []  # every URL the page asked for: the dashboard must work offline (no CDN)
    pg.on("request", lambda r: pg.requests.append(r.url))
    yield pg
    context.close()


def run_ids(pg):
    return [r.get_attribute("data-run") for r in pg.query_selector_all("#runs tbody tr[data-run]")]


def select_runs(pg, ids):
    """Make these runs selected too (a click toggles: one already selected is left as it is)."""
    pg.wait_for_selector("body[data-ready='1']")  # after the selection on arrival
    for i in ids:
        row = f"#runs tbody tr[data-run='{i}']"
        pg.wait_for_selector(row)
        if "selected" not in (pg.get_attribute(row, "class") or ""):
            pg.click(row)
            pg.wait_for_selector(row + ".selected")


def wait_points(pg, tag, expected):
    pg.wait_for_function(
        "([tag, want]) => { const c = document.querySelector(`#charts canvas[data-tag='${tag}']`);"
        " return c && c.dataset.points === want; }", arg=[tag, expected], timeout=20000)


def colored_pixels(pg, tag, hex_color):
    """How many pixels of the chart are (close to) a run's colour: proof that the line was drawn."""
    return pg.evaluate(
        """([tag, hex]) => {
            const c = document.querySelector(`#charts canvas[data-tag='${tag}']`);
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            const want = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
            let n = 0;
            for (let i = 0; i < d.length; i += 4)
                if (d[i + 3] > 200
                    && Math.abs(d[i] - want[0]) + Math.abs(d[i + 1] - want[1]) + Math.abs(d[i + 2] - want[2]) < 30) n++;
            return n;
        }""", [tag, hex_color])


def test_dashboard_charts_overlay_and_tabs(dashboard, page):
    srv, dashjob = dashboard
    pg = page
    pg.goto(srv.url)
    pg.wait_for_selector("body[data-ready='1']")
    pg.click(f"#functions li[data-fn='{dashjob.train.symbol}']")
    pg.wait_for_selector("#runs tbody tr[data-run]")
    ids = run_ids(pg)
    assert len(ids) == 3
    # on arrival the function's newest runs are selected; start from none
    assert len(pg.query_selector_all("#runs tbody tr.selected")) == 3
    pg.click("#select-none")
    pg.wait_for_function("() => document.querySelectorAll('#runs tbody tr.selected').length === 0")
    index = get_store().index
    from memolab.tracking import query

    by_lr = {r["hparams"]["lr"]: str(r["id"]) for r in query.runs(index, dashjob.train.symbol)}

    # one evaluation: its chart has exactly the 60 logged points
    select_runs(pg, [by_lr[0.05]])
    wait_points(pg, "loss", "60")
    # a second one is overlaid on the same chart with its own colour and a legend entry
    select_runs(pg, [by_lr[0.2]])
    wait_points(pg, "loss", "60,60")
    canvas = pg.query_selector("#charts canvas[data-tag='loss']")
    assert canvas.get_attribute("data-runs") == f"{by_lr[0.05]},{by_lr[0.2]}"
    assert colored_pixels(pg, "loss", "#1f77b4") > 100 and colored_pixels(pg, "loss", "#d62728") > 100
    legend = pg.inner_text(".card[data-tag='loss'] .legend")
    assert "lr=0.05" in legend and "lr=0.2" in legend and "60 pts" in legend
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / "scalars_overlay.png"), full_page=True)

    # the controls redraw without errors; the regex filter hides tags
    pg.fill("#smoothing", "0.9")
    pg.dispatch_event("#smoothing", "input")
    pg.check("#logscale")
    pg.select_option("#xaxis", "relative")
    pg.fill("#tag-filter", "^acc$")
    pg.wait_for_function("() => document.querySelectorAll('#charts .card').length === 1")
    assert pg.get_attribute("#charts .card", "data-tag") == "acc"
    pg.fill("#tag-filter", "")
    pg.wait_for_function("() => document.querySelectorAll('#charts .card').length === 2")

    pg.click("#tabs button[data-tab='histograms']")
    pg.wait_for_selector("#histograms canvas[data-steps='5']")
    assert len(pg.query_selector_all("#histograms canvas")) == 2
    pg.screenshot(path=str(SHOTS / "histograms.png"), full_page=True)

    pg.click("#tabs button[data-tab='images']")
    pg.wait_for_selector("#images .card img")
    first = pg.query_selector("#images .card")
    src_last = first.query_selector("img").get_attribute("src")
    slider = first.query_selector("input.step-slider")
    slider.fill("0")
    slider.dispatch_event("input")
    assert first.query_selector("img").get_attribute("src") != src_last
    assert "step 0 (1/3)" in first.inner_text()
    pg.screenshot(path=str(SHOTS / "images.png"), full_page=True)

    pg.click("#tabs button[data-tab='text']")
    pg.wait_for_selector("#texts .md p")
    assert "finished with loss" in pg.inner_text("#texts")

    pg.click("#tabs button[data-tab='hparams']")
    pg.wait_for_selector("#hparams tbody tr")
    lr_col = pg.eval_on_selector_all("#hparams th", "ths => ths.findIndex(t => t.dataset.col === 'lr')")
    column = ("(col) => [...document.querySelectorAll(`#hparams tbody tr td:nth-child(${col})`)]"
              ".map(t => t.textContent).join(' ')")
    pg.click("#hparams th[data-col='lr']")  # the table is re-fetched and re-drawn asynchronously: wait for it
    pg.wait_for_function(f"() => ({column})({lr_col + 1}) === '0.05 0.1 0.2'", timeout=10000)
    pg.click("#hparams th[data-col='lr']")
    pg.wait_for_function(f"() => ({column})({lr_col + 1}) === '0.2 0.1 0.05'", timeout=10000)
    assert "⟶ loss" in pg.inner_text("#hparams thead")
    pg.screenshot(path=str(SHOTS / "hparams.png"), full_page=True)

    # code diff between a v1 and the v2 evaluation
    pg.click("#select-none")
    pg.click("#tabs button[data-tab='scalars']")
    select_runs(pg, [by_lr[0.05], by_lr[0.1]])
    pg.click("#compare-code")
    pg.wait_for_selector("#diff pre")
    diff = pg.inner_text("#diff")
    assert "-        loss *= 1 - lr * 0.5" in diff and "+        loss *= 1 - lr * 0.4" in diff
    pg.screenshot(path=str(SHOTS / "code_diff.png"), full_page=True)
    assert pg.errors == []
    outside = [u for u in pg.requests if not (u.startswith(srv.base) or u.startswith("data:"))]
    assert outside == [] and any(u.endswith("/static/app.js") for u in pg.requests)


def test_running_evaluation_updates_live(tmp_store, page):
    from memolab import memo

    release = threading.Event()
    progress = []

    @memo(ignore=["release", "progress"])  # test plumbing, not content (and a lock cannot be hashed)
    def slow_training(n, release, progress):
        for i in range(n):
            memolab.log.scalar("loss", 1.0 / (i + 1), i)
            progress.append(i)
            time.sleep(0.02)
            if i == 9:
                release.wait(60)  # hold here until the browser has shown the first 10 points
        return n

    t = threading.Thread(target=slow_training, args=(30, release, progress), daemon=True)
    t.start()
    srv, _ = serve_in_thread(tmp_store)
    try:
        pg = page
        while len(progress) < 10:
            time.sleep(0.05)
        pg.goto(srv.link("?fn=" + slow_training.symbol))
        pg.wait_for_selector("#runs tbody tr[data-run] .status.running", timeout=20000)
        select_runs(pg, run_ids(pg))
        wait_points(pg, "loss", "10")  # the background flush already wrote them while the function runs
        # the banner is drawn by its own poll: wait for it rather than race it
        pg.wait_for_function("() => document.querySelector('#live').textContent.includes('running')", timeout=20000)
        assert "running" in pg.inner_text("#live")
        pg.screenshot(path=str(SHOTS / "live_running.png"), full_page=True)
        release.set()
        t.join(30)
        wait_points(pg, "loss", "30")  # polling picks up the rest and the final status without a reload
        pg.wait_for_selector("#runs tbody tr[data-run] .status.done", timeout=20000)
        assert pg.errors == []
    finally:
        release.set()
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_runs_tables_last_value_keeps_up_with_its_live_chart(tmp_store, page, width):
    """A run logs one point at a time while the page polls: each time its chart shows the new point,
    the runs table's last value is that point (it lagged until the 30 s look: 0.0714 beside 0.0625)."""
    from memolab import memo

    gate = threading.Semaphore(0)
    logged = []

    @memo(ignore=["gate", "logged"])  # test plumbing, not content
    def ticking(n, gate, logged):
        for i in range(n):
            if i >= 3:
                gate.acquire(timeout=60)  # one more point per release
            memolab.log.scalar("loss", 1.0 / (i + 1), i)
            memolab.log.flush()  # written now: the page's next heartbeat sees it
            logged.append(i)
        return n

    t = threading.Thread(target=ticking, args=(6, gate, logged), daemon=True)
    t.start()
    srv, _ = serve_in_thread(tmp_store)
    read = """(id) => {
        const canvas = document.querySelector("#charts canvas[data-tag='loss']");
        const s = (state.series.loss || {})[id];
        const col = state.cols.findIndex(([, k]) => k === "m:loss");
        const row = document.querySelector(`#runs tbody tr[data-run='${id}']`);
        return { points: canvas && canvas.dataset.points, chart: s ? fmtNum(s.value[s.value.length - 1]) : null,
                 table: row && col >= 0 ? row.children[col].textContent : null };
    }"""
    try:
        pg = page
        pg.set_viewport_size({"width": width, "height": 1000})
        while len(logged) < 3:
            time.sleep(0.02)
        pg.goto(srv.link("?fn=" + ticking.symbol))
        pg.wait_for_selector("#runs tbody tr[data-run] .status.running", timeout=20000)
        (run,) = run_ids(pg)
        select_runs(pg, [run])
        wait_points(pg, "loss", "3")
        for k in (4, 5):
            gate.release()
            while len(logged) < k:
                time.sleep(0.02)
            wait_points(pg, "loss", str(k))  # the chart drew the new point ...
            got = pg.evaluate(read, run)
            assert got == {"points": str(k), "chart": f"{1.0 / k:.6g}", "table": got["chart"]}, got  # ... the table too
        assert pg.errors == []
    finally:
        for _ in range(6):
            gate.release()
        t.join(30)
        srv.shutdown()
        srv.server_close()


def test_a_long_runs_table_is_virtual_filtered_and_selected_in_bulk(tmp_store, page):
    """2,000 runs: the newest 20 are selected on arrival, only the rows in view are in the DOM
    (scrolling brings the others), a filter by argument, status or regex narrows the table, and
    select all / none act on what the filter shows."""
    from memolab.tracking.sink import END, START, sink_for

    s = sink_for(get_store().index)
    for r in range(1, 2001):
        s.q.append((START, r, {"fn": "many:f", "started": float(r), "hparams": {"i": r, "opt": "adam" if r % 2 else "sgd"}}))
        s.q.append((END, r, "failed" if r % 100 == 0 else "done", float(r) + 1, None))
    s.flush()
    srv, _ = serve_in_thread(tmp_store)
    try:
        pg = page
        pg.goto(srv.link("?fn=many:f"))
        pg.wait_for_selector("body[data-ready='1']")
        assert "2000 evaluation(s), 20 selected" in pg.inner_text("#run-count")
        selected = pg.eval_on_selector_all("#runs tbody tr.selected", "rs => rs.map(r => +r.dataset.run)")
        assert selected == list(range(2000, 1980, -1))  # the newest, newest first
        n_rows = len(pg.query_selector_all("#runs tbody tr[data-run]"))
        assert 10 <= n_rows <= 60  # the rows in view and a margin, not 2,000
        assert pg.query_selector("#runs tbody tr[data-run='1']") is None
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = w.scrollHeight; }")
        pg.wait_for_selector("#runs tbody tr[data-run='1']")  # the oldest, at the bottom
        assert len(pg.query_selector_all("#runs tbody tr[data-run]")) <= 60
        pg.eval_on_selector("#runs-wrap", "w => { w.scrollTop = 0; }")

        def shown():
            # (the count and the rows are drawn together, by one renderRuns; no page of them still asked for)
            pg.wait_for_function("() => !document.querySelector('#runs tbody tr.pending')")
            return pg.eval_on_selector_all("#runs tbody tr[data-run]", "rs => rs.map(r => +r.dataset.run)")

        pg.fill("#run-filter", "i<=5 opt=adam")
        pg.wait_for_function("() => document.querySelector('#run-count').textContent.startsWith('3 of 2000')")
        assert sorted(shown()) == [1, 3, 5]
        pg.fill("#run-filter", "status:failed")
        pg.wait_for_function("() => document.querySelector('#run-count').textContent.startsWith('20 of 2000')")
        assert all(r % 100 == 0 for r in shown())
        pg.fill("#run-filter", "^r19[0-9]{2}\\b =1999\\b")  # a run shown as r1999 (cli/ids.py)
        pg.wait_for_function("() => document.querySelector('#run-count').textContent.startsWith('1 of 2000')")
        assert shown() == [1999]
        pg.fill("#run-filter", "status:failed")
        # clicked at once, while the filter's rows may still be on their way: select all adds the rows of
        # the filter typed (the 20 failed), never the one row of the filter before (on a loaded machine
        # it did: 20 selected; test_ui_browser_argsort holds the answer back to pin it every time)
        pg.click("#select-all")
        pg.wait_for_function("() => document.querySelector('#run-count').textContent.includes('39 selected')")
        pg.click("#select-none")
        pg.wait_for_function("() => document.querySelector('#run-count').textContent.includes(' 0 selected')")
        assert "runs=" in pg.url and pg.errors == []
        # a reload keeps the (empty) selection rather than selecting the newest again
        pg.reload()
        pg.wait_for_selector("body[data-ready='1']")
        assert "2000 evaluation(s), 0 selected" in pg.inner_text("#run-count")
    finally:
        srv.shutdown()
        srv.server_close()


def test_two_scripts_defining_train_are_told_apart_in_the_dashboard(project, page):
    """Both scripts' functions are __main__:train: the sidebar has one entry per file, named as
    `memolab ls` names them (a.py:train, b.py:train), each with its own runs, and "code changed"
    marks an edit of one script, never the other script's code."""
    a = "from memolab import memo\n@memo\ndef train(n):\n    return n{}\ntrain(1)\n"
    project.write("a.py", a.format(""))
    project.run("a.py")
    project.write("b.py", "from memolab import memo\n@memo\ndef train(n):\n    return n * 2\ntrain(1)\n")
    project.run("b.py")
    project.write("a.py", a.format(" + 1"))
    project.run("a.py")
    srv, _ = serve_in_thread(project.store)
    try:
        page.goto(srv.link("?fn=__main__:train"))
        page.wait_for_selector("body[data-ready='1']")
        entries = page.eval_on_selector_all("#functions li[data-fn='__main__:train']", "ls => ls.map(l => l.dataset.label)")
        assert sorted(entries) == ["a.py:train", "b.py:train"]
        assert page.inner_text("#fn-title") == "a.py:train"  # the only script of the URL's function first
        rows = page.query_selector_all("#runs tbody tr[data-run]")
        changed = [r for r in rows if "code changed" in r.inner_text()]
        assert len(rows) == 2 and len(changed) == 1, [r.inner_text() for r in rows]
        page.click("#functions li[data-label='b.py:train']")
        page.wait_for_function("() => document.querySelector('#fn-title').textContent === 'b.py:train'")
        page.wait_for_function("() => document.querySelectorAll('#runs tbody tr[data-run]').length === 1")
        assert "code changed" not in page.inner_text("#runs tbody")
        # the URL names the function as `ls --json` does (b.py:train), not __main__:train + its script
        assert "fn=b.py%3Atrain" in page.url and "script=" not in page.url and page.errors == []
        page.goto(srv.link("?fn=b.py:train"))  # such a URL opens that script's function
        page.wait_for_selector("body[data-ready='1']")
        assert page.inner_text("#fn-title") == "b.py:train"
        assert len(page.query_selector_all("#runs tbody tr[data-run]")) == 1 and page.errors == []
    finally:
        srv.shutdown()
        srv.server_close()
