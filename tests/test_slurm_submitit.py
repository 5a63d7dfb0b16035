"""Slurm jobs through submitit key a memoized call as the direct call (issue 42; docs/team.md, "Slurm").

No Slurm here: submitit's ``LocalExecutor`` runs each job as Slurm would, a fresh process that
unpickles the submitted function and its arguments (cloudpickle) and calls it. A memo its
module exposes travels by reference, one defined in the submitting script (``__main__``) by
value; either way the job's call hits what the direct call stored, and the reverse. An array
of jobs (``map_array``) with a key twice computes it once (the store's lease). Every script
runs in a fresh process with a deadline (tests/launchers.py).
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import require

require("submitit")

from launchers import run_script  # noqa: E402

PREP = """
import os, uuid
from pathlib import Path
import memolab

@memolab.memo
def prepare(n: int, scale: float = 1.0):
    Path("marks", f"prepare-{n}-{os.getpid()}-{uuid.uuid4().hex[:6]}").touch()
    return [i * scale for i in range(n)]
"""

JOBS = """
import json, os, sys, uuid
from pathlib import Path
import submitit
import memolab
from prep import prepare

@memolab.memo
def featurize(n: int):                      # defined in __main__: sent to the job by value
    Path("marks", f"featurize-{n}-{os.getpid()}-{uuid.uuid4().hex[:6]}").touch()
    return {"n": n, "squares": [i * i for i in range(n)]}

if __name__ == "__main__":
    how, fn, args = sys.argv[1], {"prepare": prepare, "featurize": featurize}[sys.argv[2]], [int(a) for a in sys.argv[3:]]
    if how == "direct":
        out = [fn(a) for a in args]
    else:
        ex = submitit.LocalExecutor(folder="jobs")
        ex.update_parameters(timeout_min=10)
        if how == "array":
            jobs = ex.map_array(fn, args)
        else:
            jobs = [ex.submit(fn, a) for a in args]
        out = [j.result() for j in jobs]
    print(json.dumps({"out": out, "keys": [list(fn.key(a)) for a in args]}))
"""

DEADLINE = 300  # a job is a fresh interpreter (submitit, cloudpickle, memolab): seconds on a loaded machine


def _computed(root: Path, name: str) -> list:
    return sorted(int(p.name.split("-")[1]) for p in (root / "marks").glob(f"{name}-*"))


@pytest.fixture
def project(tmp_path):
    (tmp_path / "prep.py").write_text(textwrap.dedent(PREP))
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    (tmp_path / "marks").mkdir()

    def run(*argv: str) -> dict:
        cp = run_script(tmp_path, "jobs.py", args=argv, deadline=DEADLINE)
        return json.loads(cp.stdout.strip().splitlines()[-1])

    run.root = tmp_path
    return run


@pytest.mark.parametrize("fn", ["prepare", "featurize"])  # by reference, by value
def test_a_submitit_job_keys_its_call_as_the_direct_call(project, fn):
    direct = project("direct", fn, "3")
    assert _computed(project.root, fn) == [3]
    job = project("submit", fn, "3")  # a job: a hit on what the direct call stored
    assert _computed(project.root, fn) == [3]
    assert job["out"] == direct["out"]
    job = project("submit", fn, "4")  # the reverse: the job computes, the direct call hits
    assert _computed(project.root, fn) == [3, 4]
    assert project("direct", fn, "4")["out"] == job["out"]
    assert _computed(project.root, fn) == [3, 4]


def test_an_array_of_jobs_computes_each_key_once(project):
    out = project("array", "prepare", "5", "6", "5", "6", "7")
    assert [len(v) for v in out["out"]] == [5, 6, 5, 6, 7]
    assert _computed(project.root, "prepare") == [5, 6, 7]  # the repeated keys: computed once, by one job
    assert project("direct", "prepare", "5", "6", "7")["out"] == [out["out"][0], out["out"][1], out["out"][4]]
    assert _computed(project.root, "prepare") == [5, 6, 7]
