"""The Pipeline tab's draw at a sweep's scale (issue 54): prepare -> N train -> N evaluate, real
evaluations of real @memo functions (tests/test_ui_browser_pipeline.py's sweep, with more learning
rates for the larger one), every run selected, drawn one evaluation per box.

Times, inside the page, the draw alone (the graph already fetched: layout, routing, the SVG and a
forced layout), the median of 7, for the page now and, with ``--page-before REV``, for the page at
REV (served by the same server from git, as benchmarks/dashboard.py does) on the same store and
graph. Timings are wall clock on whatever machine runs it; quote the ratio.

    python benchmarks/pipeline_draw.py [--lrs 4 33] [--page-before c9fa8e5]
"""
from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

#: the draw, timed in the page: the graph of the selection fetched once, then drawn 7 times
DRAW = """async (now) => {
  const g = followSelection(await api(`lineage?evals=${selectedEvaluations().slice(0, MAX_IDS).join(',')}`));
  if (now) { pipeState().by = 'none'; pipeState().graph = g; }
  const ts = [];
  for (let i = 0; i < 7; i++) {
    const t = performance.now();
    if (now) drawPipelineBox(); else document.querySelector('#pipeline').replaceChildren(drawPipeline(g));
    document.body.offsetHeight;
    ts.push(performance.now() - t);
  }
  ts.sort((a, b) => a - b);
  return [g.nodes.length, g.edges.length, ts[3]];
}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lrs", type=int, nargs="+", default=[4, 33], help="learning rates per optimizer (x 3 x 2 train runs)")
    ap.add_argument("--page-before", metavar="REV", help="also time the page at REV")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    import memolab
    from dashboard import ARGS, CHROMIUM, old_static
    from memolab.ui import server as ui_server
    from test_ui_browser_pipeline import SWEEP

    pages = {"now": ui_server.STATIC}
    if a.page_before:
        pages[a.page_before] = old_static(a.page_before)
    now_static = ui_server.STATIC
    print(f"{'train runs':>10} {'evaluations':>11} {'edges':>6} " + " ".join(f"{k:>12}" for k in pages) + "  (ms, median of 7)")
    for n_lr in a.lrs:
        root = Path(tempfile.mkdtemp(prefix="memolab-pipe-"))
        try:
            (root / "mods").mkdir()
            (root / "mods" / "pipesweep.py").write_text(SWEEP)
            sys.path.insert(0, str(root / "mods"))
            memolab.configure(store=str(root / "store"))
            sys.modules.pop("pipesweep", None)
            importlib.import_module("pipesweep").run(lrs=tuple(0.001 * (i + 1) for i in range(n_lr)))
            srv, _ = ui_server.serve_in_thread(root / "store")
            row = {}
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                for name, static in pages.items():
                    ui_server.STATIC = static
                    try:
                        pg = browser.new_page(viewport={"width": 1600, "height": 1000})
                        pg.goto(srv.link("?fn=pipesweep:train&tab=pipeline"))
                        pg.wait_for_selector("body[data-ready='1']")
                        pg.click("#select-all")
                        pg.wait_for_function(f"() => state.selected.length === {6 * n_lr}"
                                             " && document.querySelector('#pipeline-graph')")
                        row[name] = pg.evaluate(DRAW, name == "now")
                        pg.close()
                    finally:
                        ui_server.STATIC = now_static
                browser.close()
            srv.shutdown()
            srv.server_close()
            n, e = row["now"][:2]
            print(f"{6 * n_lr:>10} {n:>11} {e:>6} " + " ".join(f"{row[k][2]:>12.1f}" for k in pages))
        finally:
            sys.modules.pop("pipesweep", None)
            shutil.rmtree(root, ignore_errors=True)
    for d in pages.values():
        if d != now_static:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
