"""`memolab runs`, `show RUN_ID`, terminal widths, footers and one-line errors (issue 28, item 10).
Every command runs as a real subprocess on a store written by real scripts."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

JOB = """
import sys
import memolab
from memolab import SummaryWriter, memo

@memo
def train(cfg):
    print("training with", cfg["optim"]["lr"])
    for s in range(5):
        memolab.log.scalar("train/loss", cfg["optim"]["lr"] / (s + 1), step=s)
    memolab.log.scalar("val/acc", 0.5 + cfg["optim"]["lr"], step=4)
    memolab.log.text("notes", "fine", step=0)
    if cfg["optim"]["lr"] > 1:
        raise ValueError("diverged")
    return cfg["optim"]["lr"]

for lr in [float(x) for x in sys.argv[1:]]:
    try:
        train({"optim": {"lr": lr, "wd": 0.0}, "data": {"batch": 256, "name": "a-rather-long-dataset-name-" * 3}})
    except ValueError:
        pass

w = SummaryWriter("runs/extra")
w.add_scalar("loss", 1.0, 0)
w.close()
"""


def memolab(project, *args, check=True, env=None):
    from conftest import SRC

    e = dict(os.environ)
    e.pop("COLUMNS", None)
    e["PYTHONPATH"] = os.pathsep.join([SRC] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["MEMOLAB_STORE"] = str(project.store)
    e.update(env or {})
    cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=project.root, text=True, capture_output=True,
                        timeout=120, env=e)
    if check and cp.returncode != 0:
        raise AssertionError(f"{args} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return cp


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from conftest import Project

    project = Project(tmp_path_factory.mktemp("cli_runs") / "proj")
    project.write("job.py", JOB)
    project.run("job.py", "0.1", "0.01", "0.001", "5")
    return project


def test_runs_lists_every_run_with_status_name_and_final_metrics(store):
    out = memolab(store, "runs", "train").stdout
    lines = out.splitlines()
    assert lines[0] == "job.py:train"  # a script's function, named by its file (issue 40)
    # what every run shares, said once above the table (issue 53)
    assert lines[1].startswith("same in all 4: ") and "batch" in lines[1] and "lr=" not in lines[1], lines[1]
    header = lines[2].split()
    assert header[:7] == ["RUN", "STATUS", "NAME", "WHEN", "TOOK", "EVAL", "val/acc"] and "train/loss" in header
    failed = [ln for ln in lines if " failed " in ln]
    assert len(failed) == 1 and "lr=5.0" in failed[0] and " 5.5" in failed[0]  # its final val/acc
    assert sum(" done " in ln and "#" in ln for ln in lines) == 3
    assert "lr=0.001" in out and "batch" not in "\n".join(lines[2:])  # only the arguments that differ name a run
    doc = json.loads(memolab(store, "runs", "train", "--json").stdout)
    assert doc["fn"] == "__main__:train" and doc["total"] == 4
    r = doc["runs"][0]
    assert set(r) >= {"id", "fn", "name", "status", "started", "duration", "evaluation", "hparams", "metrics", "error"}
    assert r["status"] == "failed" and r["error"] == "ValueError: diverged" and r["evaluation"] is None
    assert r["hparams"]["cfg.optim.lr"] == 5.0 and r["metrics"]["val/acc"] == 5.5
    # every function, the script's writer run included
    every = memolab(store, "runs").stdout
    assert "FUNCTION" in every and "runs/extra" in every and "job.py" in every


def test_footer_limit_and_status_filter(store):
    out = memolab(store, "runs", "train", "--limit", "2").stdout
    assert out.rstrip().endswith("2 of 4 runs shown (--limit N or --all for more)")
    assert "shown" not in memolab(store, "runs", "train", "--all").stdout
    out = memolab(store, "runs", "--status", "failed").stdout
    assert "failed" in out and " done " not in out
    # `ls FUNC --limit N`: the newest N rows, the failed run (it stored nothing) among them
    ls = memolab(store, "ls", "train", "--limit", "1").stdout
    assert "0 of 3 evaluations shown" in ls and " failed: " in ls, ls
    assert "without a stored evaluation" not in ls, ls  # (it is shown)
    assert "1 of 3 evaluations shown" in memolab(store, "ls", "train", "--limit", "2").stdout
    # a script with only process/writer runs: `ls` lists them instead of an empty table
    assert "runs/extra" in memolab(store, "ls", "job.py").stdout


def test_tables_follow_the_terminal_width(store):
    narrow = memolab(store, "ls", "train", env={"COLUMNS": "70"}).stdout
    assert max(len(ln) for ln in narrow.splitlines()) <= 70 and "…" in narrow
    piped = memolab(store, "ls", "train").stdout  # no terminal: whole cells, for grep
    rows = [ln for ln in piped.splitlines() if ln.strip()[:1].isdigit()]
    # whole cells (a long string argument is elided alike in every face, by summary.text)
    assert all(ln.endswith("}}") for ln in rows) and max(len(ln) for ln in rows) > 100, piped
    wide = memolab(store, "ls", "train", "--wide", env={"COLUMNS": "70"}).stdout
    assert max(len(ln) for ln in wide.splitlines()) > 70
    runs = memolab(store, "runs", env={"COLUMNS": "80"}).stdout
    assert max(len(ln) for ln in runs.splitlines()[:-1]) <= 80


def test_show_takes_run_ids_and_lists_logged_tags(store):
    doc = json.loads(memolab(store, "runs", "train", "--json").stdout)
    failed = doc["runs"][0]["id"]
    out = memolab(store, "show", str(failed)).stdout
    assert out.startswith(f"run {failed}  job.py:train  lr=5.0")
    assert "failed (ValueError: diverged)" in out and re.search(r"\n  evaluation +none stored\n", out)
    assert "cfg.optim.lr = 5.0" in out and "train/loss = 1" in out and "texts: notes" in out
    assert 'raise ValueError("diverged")' in out and "training with 5.0" in out  # traceback and output
    assert re.search(r"\n  code vs stored +the same code as evaluation #\d+\n", out)  # not an edit: its arguments
    assert re.search(rf"\n  script +{re.escape(str(store.root / 'job.py'))}\n", out)
    js = json.loads(memolab(store, "show", str(failed), "--json").stdout)
    assert js["traceback"].rstrip().endswith("ValueError: diverged") and js["tags"]["text"] == ["notes"]
    stored = [r for r in doc["runs"] if r["evaluation"]][0]
    ev = memolab(store, "show", str(stored["evaluation"])).stdout
    assert f"run       {stored['id']} ({stored['name']})" in ev and "scalars: train/loss = " in ev
    ev_json = json.loads(memolab(store, "show", f"#{stored['evaluation']}", "--json").stdout)
    assert ev_json["runs"] == [stored["id"]] and ev_json["tags"]["scalar"] == ["train/loss", "val/acc"]


def test_every_error_is_one_line(store):
    for args, code, text in [
        (("runs", "--limit", "-3"), 2, "memolab: runs: argument --limit: must be 1 or more, got -3"),
        (("ls", "train", "--limit", "0"), 2, "memolab: ls: argument --limit: must be 1 or more, got 0"),
        (("ui", "--port", "99999", "--no-browser"), 2, "memolab: --port must be 0..65535"),
        (("runs", "--status", "finished"), 2, "memolab: runs: argument --status: invalid choice"),
        (("show", "nonsense"), 1, "memolab: not an evaluation or run id: 'nonsense'"),
        (("show", "123456789"), 1, "memolab: no evaluation #123456789 (nor run 123456789)"),
        (("nosuchcommand",), 2, "memolab: argument COMMAND: invalid choice"),
    ]:
        cp = memolab(store, *args, check=False)
        assert cp.returncode == code, (args, cp.stderr)
        assert cp.stderr.startswith(text) and cp.stderr.count("\n") == 1, (args, cp.stderr)


def test_piping_into_head_prints_nothing_on_stderr(project):
    from conftest import SRC

    # a diff far larger than a pipe's buffer, so memolab still writes after `head` has gone
    body = "\n".join(f"    v{i} = {i}" for i in range(4000))
    project.write("big.py", f"from memolab import memo\n@memo\ndef f():\n{body}\n    return 1\nf()\n")
    project.run("big.py")
    project.write("big.py", (project.root / "big.py").read_text().replace("    v", "    w"))
    project.run("big.py")
    env = dict(os.environ, MEMOLAB_STORE=str(project.store), PYTHONPATH=SRC)
    for cmd in ("why f", "why f --json", "runs --all"):
        cp = subprocess.run(f"{sys.executable} -m memolab {cmd} | head -1", shell=True, cwd=project.root, env=env,
                            capture_output=True, text=True, timeout=120)
        assert cp.stderr == "" and cp.stdout.count("\n") == 1, (cmd, cp.stderr)


def test_two_scripts_defining_train_are_told_apart(project):
    # Keys are unchanged (both are __main__:train: the same code with the same arguments is the same
    # computation); each run records its script, the CLI says which file ran, and a miss is compared
    # with evaluations of its own script only: another file's `train` is never reported as an edit.
    project.write("a.py", "from memolab import memo\n@memo\ndef train(n):\n    return n\ntrain(1)\n")
    project.write("b.py", "from memolab import memo\n@memo\ndef train(n):\n    return n * 2\ntrain(1)\n")
    project.run("a.py")
    project.run("b.py")
    out = memolab(project, "runs", "__main__:train").stdout  # the whole symbol; `train` alone is ambiguous
    assert "a.py:train" in out and "b.py:train" in out
    why = memolab(project, "why", "__main__:train").stdout
    assert "no evaluation of `train` from b.py is stored yet" in why and f"came from {project.root / 'a.py'}" in why
    assert "changed" not in why and "diff" not in why, why
    # an edit of a.py is compared with a.py's evaluation, not with b.py's (newer, same arguments)
    project.write("a.py", "from memolab import memo\n@memo\ndef train(n):\n    return n + 1\ntrain(1)\n")
    project.run("a.py")
    why = memolab(project, "why", "a.py:train").stdout
    assert "`__main__:train` changed" in why and "-    return n\n" in why and "+    return n + 1" in why, why
    assert "n * 2" not in why, why
    # a miss explained when asked (code this process stored, new arguments) is also within its script
    project.write("c.py", "from memolab import memo\n@memo\ndef train(n):\n    return -n\ntrain(2)\n")
    project.write("d.py", "from memolab import memo\n@memo\ndef train(n):\n    return n - 1\ntrain(1)\ntrain(2)\n")
    project.run("c.py")
    project.run("d.py")
    miss = json.loads(memolab(project, "why", "d.py:train", "--json").stdout)["miss"]
    assert miss["reasons"] == ["new arguments: n 1 -> 2"], miss
    import memolab as ml

    assert sorted({r.script for r in ml.runs("__main__:train", store=str(project.store))}) == [
        str(project.root / f"{s}.py") for s in "abcd"]
