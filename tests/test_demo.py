"""`make demo` runs: the PyTorch pipeline misses, hits in a new process, and misses with a diff after an edit."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

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
    out = cp.stdout
    first, second, third = re.findall(r"mse = ([0-9.]+)", out)
    assert first == second != third  # the hit returns the same model; the edited forward trains another
    assert "__main__:train: hit" in out
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
