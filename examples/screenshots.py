"""The README's screenshots, taken from the demo's own store (`make screenshots`).

Runs `examples/run_demo.py` (its store: `build/demo/.memolab`: the demo's two trainings,
before and after the edit of `forward`), serves that store with `memolab ui` on a free
port, and photographs the dashboard in Debian's headless Chromium (driven by Playwright,
as the browser tests do): the scalars of both trainings overlaid, their hyperparameters,
the code diff between them, and the pipeline (load_data -> train -> evaluate, both
versions, the edited step marked). Writes `docs/screenshots/demo_*.png`.

Then runs `examples/sweep.py` in a workspace of its own (`build/demo-sweep`: 3 learning rates x
4 seeds, and one that diverges) and photographs the sweep views: the runs grouped by `lr` (each
group's mean and its min-max band), every run with the best one starred, and the page of the run
that failed (its traceback, arguments, tags and note). Writes `docs/screenshots/sweep_*.png`.

    .venv/bin/python examples/screenshots.py [--out docs/screenshots] [--skip-demo]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEMO = Path(os.environ.get("MEMOLAB_DEMO_DIR") or ROOT / "build" / "demo")
SWEEP = DEMO.parent / "demo-sweep"
#: the page has drawn every chart in view and asks nothing more (charts.js marks it)
IDLE = "() => performance.getEntriesByName('memolab:idle').length > 0"
CHROMIUM = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def serve(store: Path) -> tuple[subprocess.Popen, str]:
    """``memolab ui`` on a free port; its process and the URL it printed."""
    env = {k: v for k, v in os.environ.items() if k != "MEMOLAB_STORE"}  # the workspace's own store
    proc = subprocess.Popen([sys.executable, "-m", "memolab", "ui", "--port", "0", "--no-browser"],
                            cwd=store.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+)", line)
        if m:
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("memolab ui did not start")


def shoot(url: str, out: Path) -> None:
    from playwright import sync_api

    out.mkdir(parents=True, exist_ok=True)
    base = url.split("?")[0]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        # the demo's `train` (the most recent function is `evaluate`, which logs no scalars), its
        # runs selected
        pg.goto(url + ("&" if "?" in url else "?") + "fn=__main__%3Atrain")
        pg.wait_for_selector("body[data-ready='1']", timeout=30000)
        pg.wait_for_function(IDLE, timeout=30000)  # the charts draw after the data arrives
        pg.screenshot(path=str(out / "demo_scalars.png"), full_page=True)
        view = pg.url.split("?", 1)[1] if "?" in pg.url else ""
        pg.goto(f"{base}?{view}&tab=hparams" if view else f"{base}?tab=hparams")
        pg.wait_for_selector("body[data-ready='1']", timeout=30000)
        pg.wait_for_timeout(800)
        pg.screenshot(path=str(out / "demo_hparams.png"), full_page=True)
        compare = pg.query_selector("#compare-code")
        if compare is not None and compare.is_visible() and compare.is_enabled():
            compare.click()
            pg.wait_for_timeout(1000)
            pg.screenshot(path=str(out / "demo_code_diff.png"), full_page=True)
        # the pipeline around the two evaluations of the last step, one of them's panel open
        pg.goto(f"{base}?fn=__main__:evaluate&tab=pipeline")
        pg.wait_for_selector("body[data-ready='1']", timeout=30000)
        pg.wait_for_selector("#pipeline-graph g.node[data-eval]", timeout=30000)
        newest = pg.query_selector("#runs tbody tr[data-eval] a.eval-open")
        if newest is not None:
            newest.click()
            pg.wait_for_selector("#eval-panel:not(.hidden)", timeout=30000)
        pg.wait_for_timeout(500)
        pg.screenshot(path=str(out / "demo_pipeline.png"), full_page=True)
        browser.close()


def make_sweep() -> Path:
    """``examples/sweep.py`` run in a fresh workspace of its own; its store."""
    shutil.rmtree(SWEEP, ignore_errors=True)
    SWEEP.mkdir(parents=True)
    (SWEEP / "pyproject.toml").write_text("[project]\nname = 'memolab-sweep'\n")
    shutil.copy(HERE / "sweep.py", SWEEP / "sweep.py")
    env = {k: v for k, v in os.environ.items() if k != "MEMOLAB_STORE"}
    env["MEMOLAB_SYSTEM_METRICS"] = "off"  # runs of a few ms: sys/ charts would be one point each
    subprocess.run([sys.executable, "sweep.py"], cwd=SWEEP, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return SWEEP / ".memolab"


def shoot_sweep(url: str, out: Path) -> None:
    from playwright import sync_api

    base, _, token = url.partition("?")
    token = f"{token}&" if token else ""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        # grouped by lr: each group's mean, its min-max band, the best group starred (the runs
        # that finished: the filter narrows the charts)
        pg.goto(f"{base}?{token}group=lr&band=minmax&tags=val%2F&q=status%3Adone")
        pg.wait_for_selector("#charts canvas[data-grouped='1']", timeout=30000)
        pg.wait_for_function(IDLE, timeout=30000)
        pg.screenshot(path=str(out / "sweep_grouped.png"))
        # every run: the best one starred in the charts and the table (val/loss, lowest first), the
        # failed one's lines ending in a cross; a log axis for a loss spanning decades
        pg.goto(f"{base}?{token}tags=loss&logy=1")
        pg.wait_for_selector("#charts canvas[data-best]:not([data-best=''])", timeout=30000)
        pg.wait_for_function(IDLE, timeout=30000)
        pg.screenshot(path=str(out / "sweep_best.png"))
        # the page of the run that failed
        failed = pg.evaluate("() => String(state.runs.find((r) => r.status === 'failed').id)")
        pg.goto(f"{base}?{token}run={failed}")
        pg.wait_for_selector("#run-page:not(.hidden) pre", timeout=30000)
        pg.screenshot(path=str(out / "sweep_run_page.png"), full_page=True)
        browser.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--skip-demo", action="store_true", help="use the store the last `make demo` left")
    args = ap.parse_args()
    if not args.skip_demo or not (DEMO / ".memolab").exists():
        subprocess.run([sys.executable, str(HERE / "run_demo.py")], check=True, stdout=subprocess.DEVNULL)
    proc, url = serve(DEMO / ".memolab")
    try:
        shoot(url, Path(args.out))
    finally:
        proc.terminate()
        proc.wait(10)
    proc, url = serve(make_sweep())
    try:
        shoot_sweep(url, Path(args.out))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"screenshots of the demo's and the sweep's stores in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
