"""Notes and tags on runs and evaluations (issue 40, item 6), end to end in fresh processes:
written by memolab.log.note/tag in the run and by `memolab tag` / `memolab note`, read back by
`memolab runs` (--tag, --sort), `memolab show`, memolab.runs(), kept in the index's annotations
table (store schema 5)."""
from __future__ import annotations

import json
import sqlite3

JOB = """
import sys
import memolab
from memolab import memo


@memo
def fit(lr):
    for step in range(5):
        memolab.log.scalar("val/loss", lr * 10 + 1.0 / (step + 1), step)
        memolab.log.scalar("val/acc", 1 - lr, step)
    if lr == 0.1:
        memolab.log.tag("baseline")
        memolab.log.note("the **first** try")
    return lr


for lr in map(float, sys.argv[1:]):
    fit(lr)
"""


def memolab_cli(project, *args, check=True):
    return project.run("-m", "memolab", *args, check=check, env={"COLUMNS": "200"})


def test_notes_and_tags_from_code_and_the_cli_are_read_everywhere(project):
    project.write("job.py", JOB)
    project.run("job.py", "0.1", "0.01", "0.3")
    runs = json.loads(memolab_cli(project, "runs", "fit", "--json").stdout)["runs"]
    by = {r["hparams"]["lr"]: r for r in runs}
    assert by[0.1]["run_tags"] == ["baseline"] and [n["text"] for n in by[0.1]["notes"]] == ["the **first** try"]
    assert by[0.01]["run_tags"] == [] and by[0.01]["notes"] == []

    # `runs --tag`, and `--sort` best first: val/loss is loss-like (lowest first), val/acc not
    tagged = json.loads(memolab_cli(project, "runs", "fit", "--tag", "baseline", "--json").stdout)["runs"]
    assert [r["hparams"]["lr"] for r in tagged] == [0.1]
    order = lambda *a: [r["hparams"]["lr"] for r in json.loads(memolab_cli(project, "runs", "fit", *a, "--json").stdout)["runs"]]  # noqa: E731
    assert order("--sort", "val/loss") == [0.01, 0.1, 0.3]
    assert order("--sort", "val/acc") == [0.01, 0.1, 0.3]
    assert order("--sort", "val/acc:min") == [0.3, 0.1, 0.01]
    table = memolab_cli(project, "runs", "fit", "--sort", "val/loss", "--wide").stdout
    assert "[baseline]" in table and table.index("lr=0.01") < table.index("lr=0.3")

    # the CLI writes them on an evaluation (#id) and on a run (rID, its short id)
    ev = by[0.3]["evaluation"]
    out = memolab_cli(project, "tag", f"#{ev}", "diverged", "lr-sweep").stdout
    assert "diverged, lr-sweep" in out
    memolab_cli(project, "note", f"r{str(by[0.01]['id'])[:8]}", "looks", "stable")
    shown = memolab_cli(project, "show", f"#{ev}").stdout
    assert "tags: diverged, lr-sweep" in shown
    shown = memolab_cli(project, "show", str(by[0.01]["id"])).stdout
    assert "notes:" in shown and "looks stable" in shown
    memolab_cli(project, "tag", f"#{ev}", "--remove", "lr-sweep")
    assert json.loads(memolab_cli(project, "show", f"#{ev}", "--json").stdout)["run_tags"] == ["diverged"]
    # a bad tag is refused, naming it, and nothing is written
    bad = memolab_cli(project, "tag", f"#{ev}", "two words", check=False)
    assert bad.returncode != 0 and "'two words' is not a tag" in bad.stderr

    # the Python API in another process
    got = project.run_json("-c", "import json, memolab; rs = memolab.runs('fit', tag='diverged');"
                                 " print(json.dumps([[r.hparams['lr'], r.run_tags, [n.text for n in r.notes]] for r in rs]))")
    assert got == [[0.3, ["diverged"], []]]

    # stored in the index's annotations table (store schema 5 and later)
    c = sqlite3.connect(project.store / "index.sqlite")
    assert c.execute("PRAGMA user_version").fetchone()[0] >= 5
    kinds = sorted(c.execute("SELECT kind, text, source FROM annotations").fetchall())
    assert kinds == [("note", "looks stable", "cli"), ("note", "the **first** try", "log"),
                     ("tag", "baseline", "log"), ("tag", "diverged", "cli")]
