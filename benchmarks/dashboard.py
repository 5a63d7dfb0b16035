"""The dashboard at the scale of a sweep: 50 runs x 20 tags x 5,000 steps (5 M points).

Builds the store in bulk through the tracking layer's sink (no training runs), serves it, and
drives the page in Debian's headless Chromium (Playwright) to time:

* the charts in view drawn after "select all" (body[data-drawn]; charts out of view are drawn
  when scrolled to), and after toggling one run off and on again;
* the longest task the page ran meanwhile (PerformanceObserver 'longtask', >= 50 ms);
* what went over the wire: requests and bytes per view, an idle tab's requests over 10 s, and
  a live refresh's bytes after one running run logged 100 more points per tag;
* the same targets with every chart in view (a window 6,000 px tall), timed inside the page;
* then the same view in the page before this rework (``--before REV``, served from git by the same
  server) and now, in a window tall enough to show every chart: opened with all runs selected,
  one run deselected, 10 s idle;
* first draw at any width (issue 40): the bare URL (the 20 newest runs selected) in windows 1,280
  to 1,920 px wide, timed in the page from navigation to its first chart drawn
  (``memolab:first-draw``) and to idle (``memolab:idle``: every chart in view drawn, no request
  left), with the summary level chosen by the series (now) and by the chart's width (before).
  Targets: < 1 s to first draw, < 1.5 s to idle. ``--widths-only`` runs this part alone;
  ``--widths-only --page-before REV`` compares the page now with the page at REV instead (same
  server and store, the two opened in turn at each width, ``--rounds`` times).
* ``--sweep24`` (issue 54): the same first draw, on the 24-run daily sweep of tests/sweep24.py
  (prepare -> 24 train -> 24 evaluate, 300 steps, sys/ tags, a code edit) instead of the
  runs x tags x steps store; implies ``--widths-only`` (and takes ``--page-before``).

    python benchmarks/dashboard.py [--runs 50] [--tags 20] [--steps 5000] [--store DIR] [--widths-only]
                                   [--page-before REV --rounds N] [--sweep24]

Pass --store to reuse a store this script built before (building 5 M points takes ~20 s).
Timings are wall clock on whatever machine runs it; quote ratios and the deterministic columns.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

CHROMIUM = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
FN = "sweep:train"


def build(root: Path, runs: int, tags: int, steps: int, running: int = 1) -> tuple[list[int], list[str]]:
    """A sweep written through the sink in bulk: ``runs`` runs of FN (the last ``running`` still running)."""
    from memolab.store import Store
    from memolab.tracking import sink as S
    from memolab.tracking.runs import new_id

    st = Store(root)
    sk = S.Sink(st.index)
    t0 = time.time() - 3600
    names = [f"{('train', 'val', 'sys', 'lr')[i % 4]}/m{i:02d}" for i in range(tags)]
    ids = []
    for r in range(runs):
        rid = new_id()
        ids.append(rid)
        sk.q.append((S.START, rid, {"fn": FN, "code": "c" * 64, "args": f"a{r}", "schema": "1", "started": t0 + r,
                                    "pid": os.getpid(), "host": "bench",
                                    "hparams": {"lr": 10 ** -(1 + r % 5), "width": 32 * (1 + r % 3), "steps": 100000,
                                                "seed": r}}))
        for ti, tag in enumerate(names):
            sk.q.extend((S.SCALAR, rid, tag, s, t0 + r + s * 0.01,
                         (1 + ti) * math.exp(-s / (1000 + 37 * r)) + 0.01 * ((s * 7919 + r) % 13)) for s in range(steps))
        if r < runs - running:
            sk.q.append((S.END, rid, "done", t0 + r + steps * 0.01, None))
        sk.flush()
    return ids, names


def grow(root: Path, run: int, tags: list[str], start: int, n: int) -> None:
    from memolab.store import Store
    from memolab.tracking import sink as S

    sk = S.Sink(Store(root).index)
    now = time.time()
    for tag in tags:
        sk.q.extend((S.SCALAR, run, tag, s, now + s * 0.01, 0.4 + 0.1 * math.sin(s * 0.37)) for s in range(start, start + n))
    sk.flush()


LONGTASKS = """() => { window.__long = [];
                new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); })
                .observe({ type: 'longtask', buffered: false }); }"""


ALL_DRAWN = """([n, k]) => { const cs = [...document.querySelectorAll('#charts .card')];
    return cs.length === k && cs.every(c => { const v = c.querySelector('canvas[data-points]');
        return v && v.dataset.points.split(',').length === n; }); }"""
IN_VIEW_DRAWN = """([n, gone]) => { const cs = [...document.querySelectorAll('#charts .card')].filter(c => {
        const r = c.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });
    return cs.length > 0 && cs.every(c => { const v = c.querySelector('canvas[data-runs]');
        return v && !v.dataset.runs.split(',').includes(gone) && v.dataset.points.split(',').length === n; }); }"""


def build_sweep24(root: Path) -> None:
    """The 24-run sweep the browser tests use (tests/sweep24.py), written into a store at ``root``."""
    import sys

    from memolab.store import Store

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import sweep24

    sweep24.build(Store(root).index)


def old_static(rev: str) -> Path:
    """The page (app.js, index.html, style.css) as it was at ``rev``, with today's vendored libraries.

    The server still answers the routes that page uses (/api/tags, /api/scalars, /api/runs)."""
    import subprocess

    from memolab.ui import server

    d = Path(tempfile.mkdtemp(prefix="memolab-dash-before-"))
    shutil.copytree(server.STATIC / "vendor", d / "vendor")
    repo = Path(__file__).resolve().parents[1]
    names = subprocess.run(["git", "ls-tree", "--name-only", rev, "src/memolab/ui/static/"], capture_output=True,
                           check=True, cwd=repo, text=True).stdout.split()
    for name in (Path(n).name for n in names):  # the page's own files (app.js, charts.js, ...), not vendor/
        if name != "vendor":
            out = subprocess.run(["git", "show", f"{rev}:src/memolab/ui/static/{name}"], capture_output=True, check=True,
                                 cwd=repo)
            (d / name).write_bytes(out.stdout)
    return d


def compare(p, srv, ids: list[int], ntags: int) -> dict:
    """One page, one view: open with every run selected (from the URL), deselect one, sit idle."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    # tall enough for every chart to be in view: the page now draws charts out of view only when
    # scrolled to, so this is what makes "every chart drawn" the same work for both pages
    pg = browser.new_page(viewport={"width": 1400, "height": 4200})
    out = {}
    n0 = len(srv.served)
    t0 = time.perf_counter()
    pg.goto(srv.link(f"?fn={FN}&runs=" + ",".join(map(str, ids))))
    pg.evaluate(LONGTASKS)
    pg.wait_for_function(ALL_DRAWN, arg=[len(ids), ntags], timeout=300_000)
    out["open"] = time.perf_counter() - t0
    data = [b for path, b in list(srv.served)[n0:] if path.startswith("/api/")]
    out["open_reqs"], out["open_bytes"] = len(data), sum(data)
    out["legend"] = pg.evaluate("() => Math.max(...[...document.querySelectorAll('#charts .legend')]"
                                ".map(l => l.getBoundingClientRect().height))")
    gone = str(ids[len(ids) // 2])
    row = f"#runs tbody tr[data-run='{gone}']"
    pg.eval_on_selector("#runs-wrap", "(w, sel) => { const r = document.querySelector(sel); if (r) r.scrollIntoView(); }", row)
    pg.wait_for_selector(row)
    n0 = len(srv.served)
    t0 = time.perf_counter()
    pg.click(row)
    pg.wait_for_function(IN_VIEW_DRAWN, arg=[len(ids) - 1, gone], timeout=300_000)
    out["toggle"] = time.perf_counter() - t0
    data = [b for path, b in list(srv.served)[n0:] if path.startswith("/api/")]
    out["toggle_bytes"] = sum(data)
    out["longest"] = pg.evaluate("() => Math.max(0, ...window.__long)")
    time.sleep(1)
    n0 = len(srv.served)
    time.sleep(10)
    idle = list(srv.served)[n0:]
    out["idle_reqs"], out["idle_bytes"] = len(idle), sum(b for _, b in idle)
    browser.close()
    return out


# In the page: from the click to the frame after the last chart is drawn (body[data-drawn]), so
# Playwright's polling is not counted.
IN_PAGE = """(sel) => new Promise((res) => {
  const before = +(document.body.dataset.drawn || 0), t0 = performance.now();
  document.querySelector(sel).click();
  const check = () => +(document.body.dataset.drawn || 0) > before
    ? requestAnimationFrame(() => setTimeout(() => res(performance.now() - t0), 0)) : setTimeout(check, 2);
  check(); })"""


def every_chart_in_view(p, srv, ids: list[int], rounds: int = 3) -> dict:
    """The issue's targets with all 20 charts in view (a window 6,000 px tall), timed in the page:
    select all (the series fetched the first time only), then one run toggled off and on."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    pg = browser.new_page(viewport={"width": 1400, "height": 6000})
    pg.goto(srv.link(f"?fn={FN}&runs="))
    pg.wait_for_selector("body[data-ready='1']")
    pg.evaluate(LONGTASKS)
    row = f"#runs tbody tr[data-run='{ids[len(ids) // 2]}']"
    out: dict = {"select all, first (fetch included)": [], "select all, series held": [], "toggle one run": []}
    for r in range(rounds):
        label = "select all, first (fetch included)" if r == 0 else "select all, series held"
        out[label].append(pg.evaluate(IN_PAGE, "#select-all"))
        for _ in range(2):
            out["toggle one run"].append(pg.evaluate(IN_PAGE, row))
        pg.evaluate(IN_PAGE, "#select-none")
    out["longest task"] = [pg.evaluate("() => Math.max(0, ...window.__long)")]
    browser.close()
    return out


WIDTHS = (1280, 1400, 1600, 1920)
MARKS = """() => new Promise((res) => { const get = () => {
  const f = performance.getEntriesByName('memolab:first-draw')[0], i = performance.getEntriesByName('memolab:idle')[0];
  if (f && i) res([f.startTime, i.startTime]); else setTimeout(get, 20); }; get(); })"""


def width_dependent_level(n: int, ordered: bool, px: int) -> int:
    """The summary level as it was chosen before issue 40: from the blocks only while one block
    spans at most 16 pixels of the chart, so a wider window read every point."""
    from memolab.tracking import schema

    nblocks = -(-n // schema.BLOCK)
    if n <= 2 * px or not ordered or nblocks * 16 < px:
        return 0
    return max(1, -(-nblocks // px))


def first_draw(p, srv, rounds: int = 3) -> dict:
    """{width: ([first-draw ms], [idle ms])}: the bare URL opened in a fresh page at each width."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    out: dict = {}
    for w in WIDTHS:
        for _ in range(rounds):
            open_once(browser, srv, w, out)
    browser.close()
    return out


def open_once(browser, srv, w: int, out: dict) -> None:
    pg = browser.new_page(viewport={"width": w, "height": 1000})
    pg.goto(srv.link(""))
    f, i = pg.evaluate(MARKS)
    out.setdefault(w, ([], []))[0].append(f)
    out[w][1].append(i)
    pg.close()


def pages_part(root: Path, rev: str, rounds: int, label: str) -> None:
    """The page now and the page at ``rev`` (same server, same store), opened in turn at each width,
    ``rounds`` times: a loaded machine slows both alike."""
    from playwright.sync_api import sync_playwright

    from memolab.ui import server as ui_server
    from memolab.ui.server import serve_in_thread

    before_dir, now_static = old_static(rev), ui_server.STATIC
    srv, _ = serve_in_thread(root)
    now: dict = {}
    before: dict = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for _ in range(rounds):
                for w in WIDTHS:
                    for static, out in ((before_dir, before), (now_static, now)):
                        ui_server.STATIC = static
                        open_once(browser, srv, w, out)
            browser.close()
    finally:
        ui_server.STATIC = now_static
        srv.shutdown()
        srv.server_close()
        shutil.rmtree(before_dir, ignore_errors=True)
    print_widths(now, before, f"{label}, the page now and at {rev}")


def print_widths(now: dict, before: dict, label: str) -> None:
    """Each cell the median and the min-max of its rounds; a ratio's range over the rounds paired in
    order (the i-th opening before against the i-th now: in turn with ``--page-before``)."""
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731

    def ms(v: list[float]) -> str:
        return f"{med(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})" if v else "nan"

    def ratio(b: list[float], n: list[float]) -> str:
        pairs = [x / y for x, y in zip(b, n, strict=False)]
        return f"{med(pairs):.2f}x ({min(pairs):.2f}–{max(pairs):.2f})" if pairs else "nan"

    print(f"\nFirst draw at any width, {label}: the bare URL (20 newest runs selected), in the page, "
          f"median (min–max) of {len(next(iter(now.values()))[0])} (ms)")
    print("| window | first draw now | idle now | first draw before | idle before | first draw before / now "
          "| idle before / now |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for w in now:
        b0, b1 = before.get(w, ([], []))
        print(f"| {w}px | {ms(now[w][0])} | {ms(now[w][1])} | {ms(b0)} | {ms(b1)} | {ratio(b0, now[w][0])} "
              f"| {ratio(b1, now[w][1])} |")
    if before:
        every = lambda d, k: [v for w in d for v in d[w][k]]  # noqa: E731
        print(f"| all | {ms(every(now, 0))} | {ms(every(now, 1))} | {ms(every(before, 0))} | {ms(every(before, 1))} "
              f"| {ratio(every(before, 0), every(now, 0))} | {ratio(every(before, 1), every(now, 1))} |")


def widths_part(root: Path, label: str) -> None:
    from playwright.sync_api import sync_playwright

    from memolab.ui import series
    from memolab.ui.server import serve_in_thread

    srv, _ = serve_in_thread(root)
    try:
        with sync_playwright() as p:
            now = first_draw(p, srv)
            level = series.blocks_per_bucket
            series.blocks_per_bucket = width_dependent_level
            try:
                before = first_draw(p, srv)
            finally:
                series.blocks_per_bucket = level
    finally:
        srv.shutdown()
        srv.server_close()
    print_widths(now, before, label)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--tags", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--store", type=Path)
    ap.add_argument("--widths-only", action="store_true", help="only the first draw at each window width")
    ap.add_argument("--page-before", metavar="REV",
                    help="with --widths-only: compare the page now with the page at REV (same server), not the "
                         "summary level by width")
    ap.add_argument("--rounds", type=int, default=3, help="with --page-before: rounds (default 3)")
    ap.add_argument("--before", default="69bc26a^", metavar="REV",
                    help="compare with the page at this git revision (default: before issue 28's rework; '' skips)")
    ap.add_argument("--sweep24", action="store_true",
                    help="the first draw of issue 54's 24-run sweep (tests/sweep24.py); implies --widths-only")
    a = ap.parse_args()
    a.widths_only = a.widths_only or a.sweep24

    from playwright.sync_api import sync_playwright

    from memolab.store import Store
    from memolab.ui.server import serve_in_thread

    root = a.store or Path(tempfile.mkdtemp(prefix="memolab-dash-")) / "store"
    t = time.perf_counter()
    label = "the 24-run sweep (tests/sweep24.py)" if a.sweep24 else f"{a.runs} runs x {a.tags} tags x {a.steps} steps"
    if not (root / "index.sqlite").exists():
        if a.sweep24:
            build_sweep24(root)
        else:
            build(root, a.runs, a.tags, a.steps)
        print(f"built {label} in {time.perf_counter() - t:.1f} s ({root})")
    if a.widths_only:
        try:
            if a.page_before:
                pages_part(root, a.page_before, a.rounds, label)
            else:
                widths_part(root, label)
        finally:
            if a.store is None:
                shutil.rmtree(root.parent, ignore_errors=True)
        return
    c = Store(root).index.conn()
    ids = [r for (r,) in c.execute("SELECT id FROM runs WHERE fn=? ORDER BY started DESC", (FN,))]
    tags = [t for (t,) in c.execute("SELECT DISTINCT tag FROM scalar_tags ORDER BY tag")]
    last_step = c.execute("SELECT MAX(last_step) FROM scalar_tags").fetchone()[0]
    srv, _ = serve_in_thread(root)
    rows = []
    results: dict = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            t = time.perf_counter()
            pg.goto(srv.link(f"?fn={FN}&runs="))
            pg.wait_for_selector("body[data-ready='1']")
            rows.append(("page ready (no run selected)", time.perf_counter() - t, "", ""))
            pg.evaluate(LONGTASKS)

            def drawn_after(action) -> float:
                before = int(pg.evaluate("() => +(document.body.dataset.drawn || 0)"))
                n0 = len(srv.served)
                t0 = time.perf_counter()
                action()
                try:
                    pg.wait_for_function(f"() => +(document.body.dataset.drawn || 0) > {before}", timeout=120_000)
                except Exception:
                    print("page errors:", errors)
                    raise
                dt = time.perf_counter() - t0
                reqs = [x for x in list(srv.served)[n0:] if "/api/series" in x[0]]
                return dt, len(reqs), sum(b for _, b in reqs)

            dt, n, b = drawn_after(lambda: pg.click("#select-all"))
            rows.append((f"select all ({len(ids)} runs): charts in view drawn", dt, n, b))
            sent = pg.evaluate("() => Math.max(...[...document.querySelectorAll('#charts canvas[data-sent]')]"
                               ".flatMap(c => c.dataset.sent.split(',').map(Number)))")
            px = pg.evaluate("() => document.querySelector('#charts .plot').clientWidth")
            one = str(ids[len(ids) // 2])
            dt, n, b = drawn_after(lambda: pg.click(f"#runs tbody tr[data-run='{one}']"))
            rows.append(("deselect one run (charts in view redrawn)", dt, n, b))
            dt, n, b = drawn_after(lambda: pg.click(f"#runs tbody tr[data-run='{one}']"))
            rows.append(("select it again (charts in view redrawn)", dt, n, b))
            dirty = pg.evaluate("() => Object.values(state.charts).filter(c => c.dirty).length")
            t0 = time.perf_counter()
            for _ in range(100):  # a screen at a time, as a reader scrolls, each screen drawn before the next
                pg.wait_for_function("() => Object.values(state.charts).every(c => !c.dirty || !c.inView)", timeout=60_000)
                if pg.evaluate("() => { const y = scrollY; scrollBy(0, innerHeight); return scrollY === y; }"):
                    break
            pg.wait_for_function("() => Object.values(state.charts).every(c => !c.dirty)", timeout=60_000)
            rows.append((f"scroll through: the {dirty} charts out of view drawn", time.perf_counter() - t0, "", ""))
            pg.evaluate("() => window.scrollTo(0, 0)")
            longest = pg.evaluate("() => Math.max(0, ...window.__long)")
            rows.append(("longest task meanwhile (ms)", longest / 1000, "", ""))

            # idle: the newest run is "running" (its pid is this process) but writes nothing
            n0 = len(srv.served)
            time.sleep(10)
            idle = {p.split("?")[0] for p, _ in list(srv.served)[n0:]}
            rows.append((f"idle 10 s: requests to {', '.join(sorted(idle))}", 0.0, len(list(srv.served)[n0:]),
                         sum(b for _, b in list(srv.served)[n0:])))
            # live: the running run logs 100 more points on every tag
            n0 = len(srv.served)
            n_live = c.execute("SELECT MAX(n) FROM scalar_tags WHERE run=?", (ids[0],)).fetchone()[0] + 100
            grow(root, ids[0], tags, last_step + 1, 100)
            pg.wait_for_function(f"() => Object.values(state.series).every(per => per['{ids[0]}'].n === {n_live})",
                                 timeout=60_000)
            live = [x for x in list(srv.served)[n0:] if "/api/series" in x[0]]
            rows.append((f"live refresh: +100 points x {len(tags)} tags", 0.0, len(live), sum(b for _, b in live)))
            browser.close()
            assert not errors, errors
            tall = every_chart_in_view(p, srv, ids)
        if a.before:
            from memolab.ui import server as ui_server

            now_static = ui_server.STATIC
            try:
                before_dir = old_static(a.before)
            except Exception as e:  # no git, or no such revision: the comparison is skipped
                print(f"no comparison with {a.before!r}: {e}")
            else:
                with sync_playwright() as p:
                    results["after"] = compare(p, srv, ids, len(tags))
                    ui_server.STATIC = before_dir
                    try:
                        results["before"] = compare(p, srv, ids, len(tags))
                    finally:
                        ui_server.STATIC = now_static
                        shutil.rmtree(before_dir, ignore_errors=True)
        widths_part(root, f"{len(ids)} runs x {len(tags)} tags x {a.steps} steps")
    finally:
        srv.shutdown()
        srv.server_close()
        if a.store is None:
            shutil.rmtree(root.parent, ignore_errors=True)
    print(f"\nDashboard, {len(ids)} runs x {len(tags)} tags x {a.steps} steps; chart plot {px} px wide, "
          f"at most {sent} points held per series")
    print(f"| {'step':<50} | {'seconds':>8} | {'requests':>8} | {'bytes sent':>10} |")
    print(f"|{'-' * 52}|{'-' * 9}:|{'-' * 9}:|{'-' * 11}:|")
    for name, s, n, b in rows:
        print(f"| {name:<50} | {s:8.3f} | {n!s:>8} | {b!s:>10} |")
    print("(requests and bytes: /api/series only, gzipped as sent, except the idle row: every request)")
    print("\nEvery chart in view (1400x6000 window), in the page: click to the frame after the last chart is drawn (ms)")
    print(f"| {'step':<40} | {'median':>7} | {'min-max':>11} | {'n':>3} |")
    print(f"|{'-' * 42}|{'-' * 8}:|{'-' * 12}:|{'-' * 4}:|")
    for name, v in tall.items():
        v = sorted(v)
        print(f"| {name:<40} | {v[len(v) // 2]:7.0f} | {f'{v[0]:.0f}-{v[-1]:.0f}':>11} | {len(v):>3} |")
    if a.before and len(results) == 2:
        b, n = results["before"], results["after"]
        print(f"\nSame store, same view: page before ({a.before}) and now. Opened with all {len(ids)} runs selected "
              "(from the URL); one of them still running.")
        print(f"| {'':<46} | {'before':>12} | {'now':>12} | {'before / now':>12} |")
        print(f"|{'-' * 48}|{'-' * 13}:|{'-' * 13}:|{'-' * 13}:|")
        for key, name, fmt in (("open", "open: every chart drawn (s)", "{:.2f}"),
                               ("open_reqs", "open: API requests", "{}"),
                               ("open_bytes", "open: API bytes", "{:,}"),
                               ("toggle", "deselect one run: charts in view redrawn (s)", "{:.2f}"),
                               ("toggle_bytes", "deselect one run: API bytes", "{:,}"),
                               ("longest", "longest task (ms)", "{:.0f}"),
                               ("legend", "legend height (px)", "{:.0f}"),
                               ("idle_reqs", "next 10 s, nothing new logged: requests", "{}"),
                               ("idle_bytes", "next 10 s, nothing new logged: bytes", "{:,}")):
            ratio = f"{b[key] / n[key]:.1f}x" if n[key] else "-"
            print(f"| {name:<46} | {fmt.format(b[key]):>12} | {fmt.format(n[key]):>12} | {ratio:>12} |")


if __name__ == "__main__":
    main()
