"""memolab in a real Jupyter kernel, run by nbclient as Jupyter runs a notebook: HTML displays
(runs as a table with metric columns, a run's curves as inline SVG, ``explain()`` with its
reasons and a rendered diff, evaluations), runs named after the notebook (not
``ipykernel_launcher.py``), the miss lines in the cell's output, and ``memolab.ui()``."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from conftest import SRC, require

nbformat = require("nbformat", reason="nbformat is pinned in the dev extra")
nbclient = require("nbclient", reason="nbclient is pinned in the dev extra")
require("ipykernel", reason="ipykernel is pinned in the dev extra")

CELLS = [
    """
    import json, os, sys, urllib.request
    if os.environ.get("HIDE_SESSION"):  # Jupyter told the kernel through its connection file only
        del os.environ["HIDE_SESSION"], os.environ["JPY_SESSION_NAME"]
    import memolab
    from memolab import log

    @memolab.memo
    def train(lr):
        for step in range(30):
            log.scalar("train/loss", 1.0 / (step + 1) + lr, step=step)
            log.scalar("val/acc", 0.5 + step / 100 - lr, step=step)
        return lr * 2

    for lr in (0.1, 0.01):
        train(lr)
    log.scalar("notebook/x", 1.0, step=0)  # a log outside any memoized call: the notebook's own run
    """,
    "memolab.runs('train')",
    "[r for r in memolab.runs('train') if r.name == 'lr=0.1'][0]",
    """
    @memolab.memo
    def train(lr):
        for step in range(30):
            log.scalar("train/loss", 1.0 / (step + 2) + lr, step=step)
            log.scalar("val/acc", 0.5 + step / 100 - lr, step=step)
        return lr * 2

    train.explain(0.1)
    """,
    "train.evaluations()",
    """
    log.flush()  # the notebook's own run is written by the background sink
    from memolab.store.process import script_path
    print(json.dumps({"script": script_path(), "fns": sorted({r.fn for r in memolab.runs()})}))
    """,
    "dash = memolab.ui(); dash",
    "print(urllib.request.urlopen(dash.url, timeout=30).status)",
]


@pytest.fixture
def kernel_spec(tmp_path, monkeypatch):
    """A kernel spec running this interpreter (the default spec's ``python`` may be another)."""
    d = tmp_path / "jupyter" / "kernels" / "memolab-test"
    d.mkdir(parents=True)
    (d / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "memolab test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "memolab-test"


def _run(project, kernel_spec, env):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(c)) for c in CELLS])
    path = project.root / "sweep.ipynb"
    nbformat.write(nb, str(path))
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name=kernel_spec,
                                     resources={"metadata": {"path": str(project.root)}})
    kernel_env = {**os.environ, "PYTHONPATH": SRC, "MEMOLAB_STORE": str(project.store), **env}
    if env.get("JPY_SESSION_NAME") == "":
        kernel_env.pop("JPY_SESSION_NAME")
    client.execute(env=kernel_env)
    return nb, path


def _outputs(cell, kind):
    out = []
    for o in cell.outputs:
        if kind == "html" and o.get("output_type") in ("execute_result", "display_data"):
            out.append(o["data"].get("text/html", ""))
        elif o.get("output_type") == "stream" and o.get("name") == kind:
            out.append(o["text"])
    return "".join(out)


@pytest.mark.parametrize("how", ["JPY_SESSION_NAME", "connection file"])
def test_a_notebook_in_a_real_kernel(project, kernel_spec, how):
    env = {"JPY_SESSION_NAME": str(project.root / "sweep.ipynb")}
    if how == "connection file":
        env["HIDE_SESSION"] = "1"
    nb, path = _run(project, kernel_spec, env)
    cells = nb.cells
    # the first miss says why, in the cell's output (its stderr stream)
    assert "memolab: train(lr=0.1) miss — no stored evaluation of this function yet (memolab why sweep.ipynb:train)" in \
        _outputs(cells[0], "stderr")
    table = _outputs(cells[1], "html")
    assert table.startswith("<table") and ">train/loss</th>" in table and ">val/acc</th>" in table
    assert ">lr=0.1<" in table and ">lr=0.01<" in table
    card = _outputs(cells[2], "html")
    assert card.count("<svg") == 2 and card.count("<polyline") == 2 and "<b>train/loss</b>" in card
    explained = _outputs(cells[3], "html")
    assert "miss</span>" in explained and "changed" in explained
    assert "background:#e6ffed" in explained and "background:#ffeef0" in explained  # added and removed lines
    assert "1.0 / (step + 2)" in explained
    evaluations = _outputs(cells[4], "html")
    assert evaluations.startswith("<table") and ">#1<" in evaluations and "lr=0.1" in evaluations
    facts = json.loads(_outputs(cells[5], "stdout").strip().splitlines()[-1])
    assert facts["script"] == str(path)
    assert "<process:sweep.ipynb>" in facts["fns"] and not any("ipykernel" in f for f in facts["fns"]), facts
    link = _outputs(cells[6], "html")
    assert 'href="http://127.0.0.1:' in link and "token=" in link and 'target="_blank"' in link
    assert _outputs(cells[7], "stdout").strip() == "200"


def test_a_kernel_jupyter_says_nothing_about_is_a_notebook_not_the_launcher(project, kernel_spec):
    nb, _ = _run(project, kernel_spec, {"JPY_SESSION_NAME": ""})
    facts = json.loads(_outputs(nb.cells[5], "stdout").strip().splitlines()[-1])
    assert facts["script"] is None and "<process:notebook>" in facts["fns"], facts
    assert not any("ipykernel" in f for f in facts["fns"])
