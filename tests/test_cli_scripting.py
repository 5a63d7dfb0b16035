"""The CLI is safe to script: destructive commands refuse without a terminal, report exactly
what they removed, read-only commands never create a store, `--json` and one exit-code
convention (docs/cli.md). Every test runs `python -m memolab` as a real subprocess."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

import pytest

from conftest import read_terminal

JOB = """
import sys
import memolab
from memolab import memo

@memo
def train(n):
    for s in range(n):
        memolab.log.scalar("loss", 1.0 / (s + 1), step=s)
    memolab.log.text("notes", "done", step=n)
    return {"n": n, "weights": bytes(300_000)}  # big enough to live in a blob file

@memo
def broken(n):
    memolab.log.scalar("x", 1.0, step=0)
    memolab.log.scalar("x", 2.0, step=1)
    raise ValueError("boom")

train(int(sys.argv[1]))
memolab.log.scalar("outside", 3.0, step=0)   # goes to the process run <process:job.py>
try:
    broken(1)
except ValueError:
    pass
"""


@pytest.fixture
def logged(project):
    project.write("job.py", JOB)
    project.run("job.py", "10")
    return project


def memolab(project, *args, check=True, input=None):
    cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=project.root, input=input, text=True,
                        capture_output=True, timeout=120, env=_env(project))
    if check and cp.returncode != 0:
        raise AssertionError(f"{args} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return cp


def _env(project):
    from conftest import SRC

    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([SRC] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["MEMOLAB_STORE"] = str(project.store)
    return e


def counts(project):
    import sqlite3

    db = sqlite3.connect(project.store / "index.sqlite")
    try:
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("evaluations", "runs", "scalars", "log_events")}
    finally:
        db.close()


def test_destructive_commands_refuse_without_a_terminal(logged):
    before = counts(logged)
    for args in (["clear", "train"], ["clear"], ["gc"], ["gc", "--older-than", "0s"]):
        cp = memolab(logged, *args, input="n\n", check=False)  # `echo n | memolab clear train`
        assert cp.returncode == 2, (args, cp.stdout, cp.stderr)
        assert "refusing" in cp.stderr and "--yes" in cp.stderr
    assert counts(logged) == before  # nothing was deleted
    assert memolab(logged, "gc", "--older-than", "0s", "--dry-run", input="").returncode == 0


def test_clear_reports_runs_and_log_points_and_names_process_runs(logged):
    c0 = counts(logged)
    assert c0["evaluations"] == 1 and c0["runs"] == 3  # train, broken (failed), <process:job.py>
    # a failed function has no evaluation, but its run and logs are cleared and counted
    r = json.loads(memolab(logged, "clear", "broken", "--yes", "--json").stdout)
    assert (r["evaluations"], r["runs"], r["log_points"]) == (0, 1, 2)
    # process runs are named by their script
    r = json.loads(memolab(logged, "clear", "job.py", "--yes", "--json").stdout)
    assert (r["fn"], r["evaluations"], r["runs"], r["log_points"]) == ("<process:job.py>", 0, 1, 1)
    out = memolab(logged, "clear", "train", "--yes").stdout
    assert "cleared __main__:train: 1 evaluation, 1 run, 11 log points; freed" in out and "1 blob" in out
    assert counts(logged) == {"evaluations": 0, "runs": 0, "scalars": 0, "log_events": 0}


def test_gc_older_than_drops_process_and_failed_runs(logged):
    dry = json.loads(memolab(logged, "gc", "--older-than", "0s", "--dry-run", "--json").stdout)
    assert (dry["evaluations"], dry["runs"], dry["log_points"]) == (1, 3, 14)
    assert counts(logged)["runs"] == 3  # a dry run deletes nothing
    r = json.loads(memolab(logged, "gc", "--older-than", "0s", "--yes", "--json").stdout)
    assert (r["evaluations"], r["runs"], r["log_points"], r["blobs"]) == (1, 3, 14, 1)
    assert r["bytes_freed"] >= r["blob_bytes"] > 0
    assert counts(logged) == {"evaluations": 0, "runs": 0, "scalars": 0, "log_events": 0}
    # an age they have not reached keeps them
    logged.run("job.py", "5")
    r = json.loads(memolab(logged, "gc", "--older-than", "1d", "--yes", "--json").stdout)
    assert (r["evaluations"], r["runs"]) == (0, 0) and counts(logged)["runs"] == 3


@pytest.mark.parametrize("args", [["ls"], ["show", "1"], ["why", "train"], ["ui", "--no-browser", "--port", "0"],
                                  ["export-tb", "OUT"], ["doctor"], ["clear", "--yes"], ["gc", "--yes"]])
def test_no_command_creates_a_store(project, tmp_path, args):
    typo = tmp_path / "typo"
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    cp = memolab(project, "--store", str(typo), *args, check=False)
    assert cp.returncode == 1 and f"no store at {typo}" in cp.stderr, (cp.stdout, cp.stderr)
    assert "Traceback" not in cp.stderr and not typo.exists()


def test_store_option_after_the_command_and_short_names_everywhere(logged, tmp_path):
    env_free = dict(_env(logged))
    del env_free["MEMOLAB_STORE"]
    cp = subprocess.run([sys.executable, "-m", "memolab", "ls", "--store", str(logged.store)], cwd=tmp_path,
                        env=env_free, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "job.py:train" in cp.stdout and "job.py:broken" in cp.stdout
    out = tmp_path / "tb"
    cp = memolab(logged, "export-tb", str(out), "train")  # the short name, as `ls train` takes it
    assert "wrote 1 run(s)" in cp.stdout and (out / "job.py.train").is_dir()


def test_ambiguous_and_misspelt_names(project):
    for mod in ("alpha", "beta"):
        project.write(f"{mod}.py", "from memolab import memo\n\n@memo\ndef train(x):\n    return x\n")
    project.write("job.py", "import alpha, beta\nalpha.train(1)\nbeta.train(2)\n")
    project.run("job.py")
    cp = memolab(project, "ls", "train", check=False)
    assert cp.returncode == 2 and "alpha:train" in cp.stderr and "beta:train" in cp.stderr
    cp = memolab(project, "ls", "trian", check=False)
    assert cp.returncode == 1
    suggestion = cp.stderr.split("did you mean", 1)[1]
    assert "alpha:train" in suggestion and "beta:train" in suggestion and "train, train" not in suggestion
    assert memolab(project, "ls", "alpha:train").returncode == 0
    assert memolab(project, "ls", "--bogus", check=False).returncode == 2  # usage


def test_json_output(logged):
    ls = json.loads(memolab(logged, "ls", "--json").stdout)
    (f,) = ls["functions"]
    assert f["fn"] == "__main__:train" and f["evaluations"] == 1 and set(f) >= {"size", "hits", "compute", "last"}
    assert "<process:job.py>" in ls["runs_only"] and "__main__:broken" in ls["runs_only"]
    evs = json.loads(memolab(logged, "ls", "train", "--json").stdout)
    (e,) = evs["evaluations"]
    assert e["arguments"] == {"n": "10"} and e["status"] == "done" and isinstance(e["id"], int)
    show = json.loads(memolab(logged, "show", str(e["id"]), "--json").stdout)
    assert show["id"] == e["id"] and show["fn"] == "__main__:train" and "deps" in show and "versions" in show
    logged.run("job.py", "12")  # a miss with new arguments
    why = json.loads(memolab(logged, "why", "train", "--json").stdout)
    assert why["fn"] == "__main__:train" and why["miss"]["hit"] is False and why["miss"]["reasons"]
    doc = json.loads(memolab(logged, "doctor", "--json").stdout)
    assert doc["ok"] is True and doc["checked"] >= 2 and doc["problems"] == []
    cp = memolab(logged, "show", "999999", "--json", check=False)
    assert cp.returncode == 1 and "no evaluation #999999" in cp.stderr


def _on_a_terminal(project, *args, env=None):
    """Run with stderr on a pseudo-terminal; returns what was written to it."""
    main, sub = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "memolab", *args], cwd=project.root,
                             env={**_env(project), **(env or {})},
                             stdout=subprocess.PIPE, stderr=sub, stdin=subprocess.DEVNULL)
        os.close(sub)
        chunks = [read_terminal(main, p)]
        p.wait(timeout=60)
        return b"".join(chunks).decode()
    finally:
        os.close(main)


def test_progress_bar_on_a_terminal_only(logged, tmp_path):
    """A terminal gets a bar (here at once: MEMOLAB_PROGRESS_DELAY=0; by default only work that
    lasts 2 s draws one), tqdm's when it is installed; a pipe never does."""
    now = {"MEMOLAB_PROGRESS_DELAY": "0"}
    assert re.search(r"verifying blobs: +\d+%\|", _on_a_terminal(logged, "doctor", env=now))
    assert "exporting runs: " in _on_a_terminal(logged, "export-tb", str(tmp_path / "tb"), env=now)
    assert "verifying blobs" not in _on_a_terminal(logged, "doctor")  # quick work: no bar after the default delay
    assert "verifying blobs" not in _on_a_terminal(logged, "doctor", env={**now, "MEMOLAB_PROGRESS": "off"})
    gc = _on_a_terminal(logged, "gc", "--older-than", "0s", "--yes", env=now)
    assert "gc: dropping evaluations: " in gc and "gc: collecting unreferenced blobs: " in gc
    cp = memolab(logged, "doctor")
    assert cp.stderr == ""  # a pipe gets no bar
