"""Issue 53: one name per function, accepted everywhere; misses and errors that say what to do."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SRC


def memolab(project, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, MEMOLAB_STORE=str(project.store), PYTHONPATH=SRC)
    cp = subprocess.run([sys.executable, "-m", "memolab", *args], cwd=project.root, env=env, capture_output=True,
                        text=True, timeout=120)
    if check and cp.returncode != 0:
        raise AssertionError(f"memolab {' '.join(args)} -> {cp.returncode}\n{cp.stdout}\n{cp.stderr}")
    return cp


SWEEP = """\
from memolab import memo

@memo
def train(n):
    return n * 3

if __name__ == "__main__":
    train(1)
"""


def test_every_printed_name_is_accepted_back(project):
    project.write("sweep.py", SWEEP)
    project.write("other.py", "from memolab import memo\n@memo\ndef train(n):\n    return n * 2\ntrain(1)\n")
    project.write("pkg/__init__.py", "")
    project.write("pkg/prep.py", "from memolab import memo\n@memo\ndef load(n):\n    return n\n")
    project.write("lib_user.py", "from pkg.prep import load\nload(1)\n")
    # a notebook importing the script: sweep:train, another function (its note below)
    project.write("nb.py", "import sweep\nsweep.train(1)\n")
    for s in ("sweep.py", "other.py", "lib_user.py"):
        project.run(s)
    project.run("nb.py")
    listing = json.loads(memolab(project, "ls", "--json").stdout)
    names = [f.get("label") or f["fn"] for f in listing["functions"]]
    assert {"sweep.py:train", "other.py:train", "pkg.prep:load", "sweep:train"} <= set(names), names
    import memolab as ml

    for name in names + ["__main__:train", "load", "prep:load"]:
        for cmd in (("why", name), ("ls", name), ("runs", name, "--all")):
            memolab(project, *cmd)
        assert len(ml.runs(name, store=str(project.store))) >= 1, name
    # one script's share of a symbol two scripts ran: clear acts on whole symbols only, and says so
    cp = memolab(project, "clear", "sweep.py:train", "--dry-run", check=False)
    assert cp.returncode == 2 and "give __main__:train" in cp.stderr, cp.stderr
    assert "would clear __main__:train" in memolab(project, "clear", "__main__:train", "--dry-run").stdout
    assert "would clear pkg.prep:load" in memolab(project, "clear", "load", "--dry-run").stdout
    # `train` names three functions: ambiguous alike in the CLI and in Python, candidates as printed
    cp = memolab(project, "why", "train", check=False)
    assert cp.returncode == 2 and "other.py:train, sweep.py:train, sweep:train" in cp.stderr, cp.stderr
    with pytest.raises(LookupError, match="other.py:train, sweep.py:train, sweep:train"):
        ml.runs("train", store=str(project.store))
    sweep_only = ml.runs("sweep.py:train", store=str(project.store))
    assert {r.script for r in sweep_only} == {str(project.root / "sweep.py")}
    cp = memolab(project, "why", "trian", check=False)
    assert cp.returncode == 1 and "did you mean" in cp.stderr and "train" in cp.stderr, cp.stderr
    # the import's miss says the same code ran as the script, and that it is another function
    why = memolab(project, "why", "sweep:train").stdout
    assert ("no stored evaluation of this function yet; the same code ran as `sweep.py` (`__main__:train`, "
            "1 result); as `sweep:train` it is another function") in why, why
