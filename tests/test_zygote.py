"""The tests' fork server (tests/zygote.py) gives its children what a real start gives: each case
found when a test behaved differently forked. The server here preloads json alone (cheap)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import zygote

SCRIPT = """
import json, multiprocessing.process as mp, os, sys

def f(x: int) -> int:
    return x

print(json.dumps({"annotations": repr(f.__annotations__), "flags": f.__code__.co_flags, "argv": sys.argv,
                  "path0": sys.path[0], "main": __name__, "original_dir": mp.ORIGINAL_DIR,
                  "authkey": bytes(mp.current_process().authkey).hex(), "orig_argv": sys.orig_argv[1:]}))
"""


def _both(tmp_path, args):
    env = dict(os.environ)
    env.pop("MEMOLAB_TEST_NO_FORK_SERVER", None)
    forked = zygote.run(args, tmp_path, env, ("json", "multiprocessing"), 60)
    real = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert forked.returncode == real.returncode == 0, forked.stderr + real.stderr
    return json.loads(forked.stdout), json.loads(real.stdout)


def test_a_forked_script_and_module_run_as_at_a_real_start(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMOLAB_TEST_NO_FORK_SERVER", raising=False)
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "m.py").write_text(SCRIPT)
    for args in (("s.py", "a"), ("-m", "m", "b")):
        forked, real = _both(tmp_path, args)
        # compiled with the script's own future flags, not the server's ``annotations``: the code
        # digests of a forked rank 0 and a real rank 1 differed (test_lightning_ddp)
        assert forked["annotations"] == real["annotations"] == repr({"x": int, "return": int})
        assert forked["flags"] == real["flags"]
        assert forked["authkey"] != real["authkey"]
        for k in ("argv", "path0", "main", "original_dir", "orig_argv"):
            assert forked[k] == real[k], k
    again, _ = _both(tmp_path, ("s.py", "a"))
    assert again["authkey"] != forked["authkey"]  # multiprocessing's key: random in each process
