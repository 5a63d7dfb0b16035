"""`make demo` runs: the PyTorch pipeline misses, hits in a new process, and misses with a diff after an edit."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

require("torch")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_tells_the_pytorch_story(tmp_path):
    from conftest import SRC

    env = dict(os.environ, MEMOLAB_DEMO_DIR=str(tmp_path / "demo"), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    env.pop("MEMOLAB_STORE", None)
    cp = subprocess.run([sys.executable, str(ROOT / "examples" / "run_demo.py")], env=env, capture_output=True, text=True,
                        timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    # nothing printed at a process's exit (a stored tensor's pin freed at shutdown printed a
    # "TypeError: 'NoneType' object is not callable" per tensor)
    assert "Exception ignored" not in cp.stdout + cp.stderr, cp.stderr
    out = cp.stdout
    first, second, third = re.findall(r"mse = ([0-9.]+)", out)
    assert first == second != third  # the hit returns the same model; the edited forward trains another
    assert "pipeline.py:train: hit" in out
    assert "`__main__:Net` changed" in out and "-        return self.out(torch.relu(self.hidden(x)))" in out
    assert "load_data + train:" in out and "memolab ui" in out
    # lineage: evaluate missed because its model now comes from another evaluation of train
    assert "argument `model` now comes from `train` #4 (was #2: `train`'s code changed" in out, out
    # the hint works from a fresh shell (no venv activated): an executable by its full path
    exe = re.search(r"&& (\S+) (?:-m memolab )?ui", out)[1]
    assert os.path.isabs(exe) and os.access(exe, os.X_OK), exe
    ls = out[out.index("$ memolab ls"):]
    # a script's functions are named by their script in ls (issue 40), as in runs and the dashboard
    assert re.search(r"pipeline\.py:load_data\s+1\s", ls) and re.search(r"pipeline\.py:train\s+2\s", ls), ls


def test_the_sweep_example_logs_twelve_runs_and_a_failure_then_hits_them_all(tmp_path):
    """examples/sweep.py (the dashboard's sweep views and screenshots are made from it), run twice in
    fresh processes: the first run computes 12 runs and a diverging one that fails; the second hits
    the 12 (no new run of them) and prints the same, the failure being computed again."""
    import json

    from conftest import SRC

    env = dict(os.environ, MEMOLAB_STORE=str(tmp_path / "store"), MEMOLAB_VERBOSE="0",
               PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))

    def run(*args: str, script: bool = True) -> str:
        cmd = [sys.executable, str(ROOT / "examples" / "sweep.py")] if script else [sys.executable, "-m", "memolab", *args]
        cp = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        return cp.stdout

    first = run()
    runs = json.loads(run("runs", "--json", "--all", script=False))["runs"]
    assert sorted(r["status"] for r in runs) == ["done"] * 12 + ["failed"], runs
    done = [r for r in runs if r["status"] == "done"]
    assert {(r["hparams"]["lr"], r["hparams"]["seed"]) for r in done} == {(lr, s) for lr in (0.3, 0.1, 0.03) for s in range(4)}
    assert all(set(r["metrics"]) == {"train/loss", "val/loss", "val/acc"} for r in done)
    assert all(r["name"] == f"lr={r['hparams']['lr']} seed={r['hparams']['seed']}" for r in runs)
    assert sorted((r["hparams"]["lr"], r["hparams"]["seed"]) for r in runs if "baseline" in r["run_tags"]) == \
        [(0.03, 0), (0.1, 0), (0.3, 0), (1.2, 0)]
    failed = next(r for r in runs if r["status"] == "failed")
    assert failed["hparams"]["lr"] == 1.2 and failed["error"].startswith("FloatingPointError: loss diverged")
    assert "lr=1.2 seed=0: failed (loss diverged" in first

    second = run()
    assert second == first
    again = json.loads(run("runs", "--json", "--all", script=False))["runs"]
    assert sorted(r["status"] for r in again) == ["done"] * 12 + ["failed"] * 2  # hits start no run
