"""A process killed at its end (a Ray worker) writes its usage after each hit (issue 42; docs/team.md, "Ray").

Ray itself is in tests/test_team_ray.py. Here, without Ray, a fresh process that answers
``hooks.exits_without_atexit()`` as a Ray worker does, and is then SIGKILLed as Ray kills its
workers: its hit on a team row reaches the team index (the team's record of the result's last
use) while it lives, sent on by the usage thread itself, with the uploader thread stopped.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import SRC
from servers.team import LocalTeam

SCRIPT = """
import json, sys, time
import memolab.settings.hooks
if sys.argv[1] == "worker":
    memolab.settings.hooks.exits_without_atexit = lambda: True    # what memolab.ray answers in a Ray worker
import memolab
from memolab.store import get_store

@memolab.memo
def double(x):
    return x * 2

if sys.argv[1] == "worker":
    get_store().journal.stop()  # the uploader would send the hits within 30 s: only the usage thread may
print(json.dumps({"value": double(21), "args": double.key(21)[2]}), flush=True)
if sys.argv[1] == "worker":
    time.sleep(600)             # until killed, as a Ray worker is: no atexit, no drain
"""


def test_a_workers_hit_on_a_team_row_reaches_the_team_while_it_lives(tmp_path):
    team = LocalTeam(tmp_path)
    (tmp_path / "job.py").write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, **team.env, "PYTHONPATH": SRC, "PYTHONDONTWRITEBYTECODE": "1"}
    first = subprocess.run([sys.executable, "job.py", "compute"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, env={**env, "MEMOLAB_STORE": str(tmp_path / "a")})
    assert first.returncode == 0, first.stderr
    args = json.loads(first.stdout)["args"]
    assert team.hits() == {args: 0}  # uploaded at its exit, not hit yet

    worker = subprocess.Popen([sys.executable, "job.py", "worker"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                              env={**env, "MEMOLAB_STORE": str(tmp_path / "b")}, start_new_session=True)
    try:
        assert json.loads(worker.stdout.readline())["value"] == 42  # a team hit, on another machine's store
        deadline = time.monotonic() + 120
        while team.hits().get(args, 0) < 1:
            assert time.monotonic() < deadline, "the worker's hit never reached the team index"
            assert worker.poll() is None
            time.sleep(0.05)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    assert team.hits() == {args: 1}
