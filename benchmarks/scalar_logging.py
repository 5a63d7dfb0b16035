"""Cost of logging a scalar: memolab vs torch.utils.tensorboard.SummaryWriter; and dashboard API latency.

Part 1 logs N scalars from a training loop with each logger, each in its own child
process pinned to one core (so imports do not interfere, and the logger's
background thread competes with the training thread as it would on a busy
machine), in interleaved rounds. It reports the cost per call on the caller's
thread, the all-in cost (loop + flush until durable, wall time on that core) and
the process CPU time of all threads, each as median (min–max) over rounds. Part 2 builds a store with
many evaluations and a million scalar points and times the dashboard's API.

    python benchmarks/scalar_logging.py [--n 200000] [--rounds 5] [--cpu 0] [--runs 1000] [--points 1000] [--big 1000000]

Part 3 (when Playwright and /usr/bin/chromium are there) times the page itself on that store.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
lib, n, workdir, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if cpu != "-" and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(cpu)})  # the logger's own threads share the caller's core
os.chdir(workdir)
if lib.startswith("memolab"):
    import memolab
    memolab.configure(store=os.path.join(workdir, "store"))
    if lib == "memolab.log.scalar":
        log = memolab.log.scalar
    else:
        w = memolab.SummaryWriter("runs/x")
        log = w.add_scalar
    finish = memolab.log.flush
elif lib == "torch SummaryWriter":
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(os.path.join(workdir, "tb"))
    log = w.add_scalar
    finish = w.flush

for i in range(max(1, n // 10)):  # warm-up: first writes, background thread started
    log("warm", 0.5, i)
finish()
c0, t0 = time.process_time(), time.perf_counter()
for i in range(n):
    log("loss", 0.5, i)
t1 = time.perf_counter()
finish()
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"caller_us": (t1 - t0) / n * 1e6, "finish_ms": (t2 - t1) * 1e3,
                  "wall_us": (t2 - t0) / n * 1e6, "cpu_us": (c2 - c0) / n * 1e6}))
"""

LIBS = ("memolab.log.scalar", "memolab.SummaryWriter", "torch SummaryWriter")


def logging_cost(n: int, rounds: int, cpu: str) -> None:
    """Each round runs every logger once, each in a fresh child process (interleaved rounds)."""
    import statistics

    got: dict = {lib: [] for lib in LIBS}
    errors: dict = {}
    for _ in range(rounds):
        for lib in LIBS:
            if lib in errors:
                continue
            with tempfile.TemporaryDirectory() as d:
                cp = subprocess.run([sys.executable, "-c", CHILD, lib, str(n), d, cpu], capture_output=True, text=True)
            if cp.returncode != 0:
                errors[lib] = cp.stderr.strip().splitlines()[-1] if cp.stderr else "failed"
                continue
            got[lib].append(json.loads(cp.stdout.strip().splitlines()[-1]))

    def stat(lib: str, key: str) -> tuple:
        xs = [r[key] for r in got[lib]]
        return statistics.median(xs), min(xs), max(xs)

    def same_round(lib: str, key: str) -> str:
        # torch's child over this logger's child of the same round (run back to back): median (min–max)
        rs = [t[key] / m[key] for t, m in zip(got["torch SummaryWriter"], got[lib], strict=False)]
        return f"{statistics.median(rs):.1f}x ({min(rs):.1f}–{max(rs):.1f})" if rs else "–"

    where = f"pinned to core {cpu} (the logger's background thread shares it)" if cpu != "-" else "not pinned"
    print(f"\n## Cost per scalar, {n:,} scalars per round, {rounds} interleaved rounds, each logger in a fresh "
          f"process {where}; median (min–max)\n")
    print("caller thread: the logging loop's wall time / n. all-in: loop + flush until durable, wall / n, "
          "on the same core. CPU: process CPU time of all threads / n.\n")
    print("| logger | caller thread µs/scalar | all-in µs/scalar | CPU µs/scalar | flush after the loop "
          "| torch / this, caller, same round | torch / this, all-in, same round |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = stat("torch SummaryWriter", "caller_us")[0] if got["torch SummaryWriter"] else None
    base_all = stat("torch SummaryWriter", "wall_us")[0] if got["torch SummaryWriter"] else None
    for lib in LIBS:
        if not got[lib]:
            print(f"| {lib} | – | – | – | – | – | {errors.get(lib, 'no result')} |")
            continue
        c, a, u, f = (stat(lib, k) for k in ("caller_us", "wall_us", "cpu_us", "finish_ms"))
        r1 = same_round(lib, "caller_us") if base else "–"
        r2 = same_round(lib, "wall_us") if base_all else "–"
        print(f"| {lib} | {c[0]:.2f} ({c[1]:.2f}–{c[2]:.2f}) | {a[0]:.2f} ({a[1]:.2f}–{a[2]:.2f}) "
              f"| {u[0]:.2f} ({u[1]:.2f}–{u[2]:.2f}) | {f[0]:.0f} ms | {r1} | {r2} |")


def dashboard_latency(runs: int, points: int, big: int) -> None:
    import statistics
    import time
    import urllib.request

    from memolab.store import Store
    from memolab.tracking.sink import END, SCALAR, START, sink_for
    from memolab.ui.server import serve_in_thread

    with tempfile.TemporaryDirectory() as d:
        store = Store(os.path.join(d, "store"))
        s = sink_for(store.index)
        t0 = time.perf_counter()
        fn = "bench:train"
        for r in range(1, runs + 1):
            s.q.append((START, r, {"fn": fn, "started": float(r), "hparams": {"lr": r / runs, "seed": r % 7}}))
            for i in range(points):
                s.q.append((SCALAR, r, "loss", i, float(r) + i * 0.01, 1.0 / (i + 1) + r / runs))
            s.q.append((END, r, "done", float(r) + 1, None))
            if r % 50 == 0:
                s.flush()
        big_id = runs + 1
        s.q.append((START, big_id, {"fn": "bench:long", "started": 0.0, "hparams": {}}))
        for i in range(big):
            s.q.append((SCALAR, big_id, "loss", i, i * 0.001, (i % 1000) / 1000.0))
        s.flush()
        build = time.perf_counter() - t0
        total = runs * points + big
        srv, _ = serve_in_thread(store.root)
        u = srv.base + "api/"
        some = ",".join(str(i) for i in range(1, 6))
        cases = [
            ("functions", u + "functions"),
            (f"runs of a function ({runs} evaluations)", u + "runs?fn=bench:train"),
            (f"hparams table ({runs} rows)", u + "hparams?fn=bench:train"),
            (f"scalars, 5 runs x {points} points", u + f"scalars?runs={some}&tag=loss"),
            (f"scalars, 1 run x {big:,} points (downsampled to ~1000)", u + f"scalars?runs={big_id}&tag=loss"),
        ]
        print(f"\n## Dashboard API, {runs} evaluations + {total:,} scalar points (store built in {build:.1f} s)\n")
        print("| request | median ms | response KB |")
        print("|---|---:|---:|")
        for name, url in cases:
            times, size = [], 0
            for _ in range(5):
                t = time.perf_counter()
                req = urllib.request.Request(url, headers={"Authorization": f"Bearer {srv.token}"})
                with urllib.request.urlopen(req) as resp:
                    size = len(resp.read())
                times.append(time.perf_counter() - t)
            print(f"| {name} | {statistics.median(times) * 1e3:.1f} | {size / 1024:.0f} |")
        page_timings(srv.link, big_id, big, runs)
        srv.shutdown()
        srv.server_close()


def page_timings(link, big_id: int, big: int, runs: int) -> None:
    """The same store in headless Chromium: load the page, list 1,000 evaluations, overlay charts."""
    chromium = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("\n(browser timings skipped: pip install playwright)")
        return
    if not os.path.exists(chromium):
        print(f"\n(browser timings skipped: no {chromium})")
        return
    import time

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.goto(link("?fn=bench:train"))  # warm-up: browser start, first compile of the page's script
        pg.wait_for_selector("body[data-ready='1']")
        t = time.perf_counter()
        pg.reload()
        pg.wait_for_selector("body[data-ready='1']")
        n = len(pg.query_selector_all("#runs tbody tr[data-run]"))
        rows.append((f"load the page and the table of {runs} evaluations ({n} rows drawn)", (time.perf_counter() - t) * 1e3))
        # measured inside the page: select 5 evaluations, fetch and draw their overlaid charts
        ms = pg.evaluate("""async () => { const t = performance.now();
            for (let i = 1; i <= 5; i++) state.selected.push(String(i));
            renderRuns(); await refreshTab(); return performance.now() - t; }""")
        rows.append(("select 5 evaluations: fetch + draw the overlaid charts", ms))
        ms = pg.evaluate("""() => { const t = performance.now(); state.showAll = true; renderRuns();
            document.body.offsetHeight; return performance.now() - t; }""")
        rows.append((f"'show all': draw all {runs} rows (incl. layout)", ms))
        pg.goto(link("?fn=bench:long"))
        pg.wait_for_selector("body[data-ready='1']")
        ms = pg.evaluate(f"""async () => {{ const t = performance.now();
            state.selected.push("{big_id}"); renderRuns(); await refreshTab(); return performance.now() - t; }}""")
        assert pg.get_attribute("#charts canvas", "data-points") == str(big)
        rows.append((f"chart of the {big:,}-point run (downsampled on the server)", ms))
        browser.close()
    print("\n## Dashboard in headless Chromium (same store)\n")
    print("| action | ms |")
    print("|---|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="scalars per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1000, help="evaluations in the dashboard store")
    ap.add_argument("--points", type=int, default=1000, help="scalar points per evaluation")
    ap.add_argument("--big", type=int, default=1_000_000, help="points of the one long run")
    ap.add_argument("--cpu", default="0", help="core the logging child is pinned to, or '-' for none")
    ap.add_argument("--skip-dashboard", action="store_true")
    a = ap.parse_args()
    import platform

    print(f"python {platform.python_version()}, {os.cpu_count()} cpu(s)")
    logging_cost(a.n, a.rounds, a.cpu)
    if not a.skip_dashboard:
        dashboard_latency(a.runs, a.points, a.big)


if __name__ == "__main__":
    main()
