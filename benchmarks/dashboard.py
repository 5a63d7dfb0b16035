"""The dashboard at the scale of a sweep: 50 runs x 20 tags x 5,000 steps (5 M points).

Builds the store in bulk through the tracking layer's sink (no training runs), serves it, and
drives the page in Debian's headless Chromium (Playwright) to time:

* all charts drawn after "select all" (every chart of every tag up to date: body[data-drawn]);
* toggling one run off and on again;
* the longest task the page ran meanwhile (PerformanceObserver 'longtask', >= 50 ms);
* what went over the wire: requests and bytes per view, an idle tab's requests over 10 s, and
  a live refresh's bytes after one running run logged 100 more points per tag.

    python benchmarks/dashboard.py [--runs 50] [--tags 20] [--steps 5000] [--store DIR]

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
from typing import List, Tuple

CHROMIUM = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
FN = "sweep:train"


def build(root: Path, runs: int, tags: int, steps: int, running: int = 1) -> Tuple[List[int], List[str]]:
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


def grow(root: Path, run: int, tags: List[str], start: int, n: int) -> None:
    from memolab.store import Store
    from memolab.tracking import sink as S

    sk = S.Sink(Store(root).index)
    now = time.time()
    for tag in tags:
        sk.q.extend((S.SCALAR, run, tag, s, now + s * 0.01, 0.4 + 0.1 * math.sin(s * 0.37)) for s in range(start, start + n))
    sk.flush()


LONGTASKS = """() => { window.__long = []; new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); })
                .observe({ type: 'longtask', buffered: false }); }"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--tags", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--store", type=Path)
    a = ap.parse_args()

    from playwright.sync_api import sync_playwright

    from memolab.store import Store
    from memolab.ui.server import serve_in_thread

    root = a.store or Path(tempfile.mkdtemp(prefix="memolab-dash-")) / "store"
    t = time.perf_counter()
    if not (root / "index.sqlite").exists():
        build(root, a.runs, a.tags, a.steps)
        print(f"built {a.runs} runs x {a.tags} tags x {a.steps} steps in {time.perf_counter() - t:.1f} s ({root})")
    c = Store(root).index.conn()
    ids = [r for (r,) in c.execute("SELECT id FROM runs WHERE fn=? ORDER BY started DESC", (FN,))]
    tags = [t for (t,) in c.execute("SELECT DISTINCT tag FROM scalar_tags ORDER BY tag")]
    last_step = c.execute("SELECT MAX(last_step) FROM scalar_tags").fetchone()[0]
    srv, _ = serve_in_thread(root)
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: List[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            t = time.perf_counter()
            pg.goto(srv.url + f"?fn={FN}&runs=")
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
            rows.append((f"select all ({len(ids)} runs): every chart drawn", dt, n, b))
            sent = pg.evaluate("() => Math.max(...[...document.querySelectorAll('#charts canvas[data-sent]')]"
                               ".flatMap(c => c.dataset.sent.split(',').map(Number)))")
            px = pg.evaluate("() => document.querySelector('#charts .plot').clientWidth")
            one = str(ids[len(ids) // 2])
            dt, n, b = drawn_after(lambda: pg.click(f"#runs tbody tr[data-run='{one}']"))
            rows.append(("deselect one run (charts in view redrawn)", dt, n, b))
            dt, n, b = drawn_after(lambda: pg.click(f"#runs tbody tr[data-run='{one}']"))
            rows.append(("select it again (charts in view redrawn)", dt, n, b))
            dirty = pg.evaluate("() => +document.body.dataset.dirty")
            t0 = time.perf_counter()
            pg.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
            pg.wait_for_function("() => +document.body.dataset.dirty === 0 || "
                                 "[...document.querySelectorAll('#charts .card')].every(c => { const r = c.getBoundingClientRect();"
                                 " return r.bottom < -innerHeight || r.top > 2 * innerHeight || !state.charts[c.dataset.tag].dirty; })",
                                 timeout=60_000)
            rows.append((f"scroll to the end: {dirty} waiting charts drawn", time.perf_counter() - t0, "", ""))
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


if __name__ == "__main__":
    main()
