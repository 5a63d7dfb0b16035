"""The README's screenshots, taken from the demo's own store (`make screenshots`).

Runs `examples/run_demo.py` (its store: `build/demo/.memolab`: the demo's two trainings,
before and after the edit of `forward`), serves that store with `memolab ui` on a free
port, and photographs the dashboard in Debian's headless Chromium (driven by Playwright,
as the browser tests do): the scalars of both trainings overlaid, their hyperparameters,
the code diff between them, and the pipeline (load_data -> train -> evaluate, both
versions, the edited step marked). Writes `docs/screenshots/demo_*.png`.

    .venv/bin/python examples/screenshots.py [--out docs/screenshots] [--skip-demo]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEMO = Path(os.environ.get("MEMOLAB_DEMO_DIR") or ROOT / "build" / "demo")
CHROMIUM = os.environ.get("MEMOLAB_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def serve(store: Path) -> tuple[subprocess.Popen, str]:
    """``memolab ui`` on a free port; its process and the URL it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "memolab", "ui", "--port", "0", "--no-browser"],
                            cwd=store.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
        # no `fn`: the dashboard opens on the most recent memoized function (the demo's `train`)
        # with its runs selected
        pg.goto(url)
        pg.wait_for_selector("body[data-ready='1']", timeout=30000)
        pg.wait_for_timeout(1500)  # the charts draw after the data arrives
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
    print(f"screenshots of the demo's store in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
