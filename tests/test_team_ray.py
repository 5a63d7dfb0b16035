"""Memoized functions in Ray tasks (issue 42; docs/team.md, "Ray").

One local Ray instance for the module (``ray.init(num_cpus=2)``, no dashboard), shut down by
its fixture. The workers are configured as users do it, through ``runtime_env`` (the store,
and ``PYTHONPATH`` for ``ray_tasks``); every test uses arguments of its own in that store.
Ray needs care on a loaded 2-core machine: generous deadlines on every wait, conditions
polled, never a sleep tuned to an idle machine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import require

ray = require("ray")  # (under CI a missing ray is a failure, not a skip)

import memolab  # noqa: E402
from conftest import SRC  # noqa: E402, require
from memolab.settings import config  # noqa: E402
from memolab.store import Store  # noqa: E402

TESTS = str(Path(__file__).resolve().parent)
#: a bound on every wait for Ray (workers start in seconds idle; far longer on a loaded 2-core machine)
WAIT = 180


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    store = tmp_path_factory.mktemp("ray") / "store"
    old = config.settings()
    memolab.configure(store=str(store))
    env = {"MEMOLAB_STORE": str(store), "PYTHONPATH": os.pathsep.join([SRC, TESTS]), "OMP_NUM_THREADS": "1"}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    sys.path.insert(0, TESTS)
    try:
        import ray_tasks

        yield store, ray_tasks
    finally:
        ray.shutdown()
        sys.path.remove(TESTS)
        memolab.configure(store=old.store)


def _hits(store: Path, ids) -> dict:
    s = Store(store)
    try:
        rows = s.index.conn().execute(f"SELECT id, hits, last_hit FROM evaluations WHERE id IN "
                                      f"({','.join('?' * len(ids))})", list(ids)).fetchall()
        return {i: (h, t) for i, h, t in rows}
    finally:
        s.close()


def _wait_for(what, condition, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def test_six_tasks_over_two_keys_compute_twice_and_the_workers_hits_are_recorded(cluster, tmp_path):
    """Single flight across the worker processes; each worker's hits are written within moments
    of the call, while the worker lives on (a worker is killed at the end, never exits: before
    this they were kept for an ``atexit`` that never ran). Then the driver hits."""
    store, tasks = cluster
    marks = str(tmp_path)
    keys = [0, 1, 0, 1, 0, 1]
    out = ray.get([tasks.task.remote(k, marks) for k in keys], timeout=WAIT)
    assert [o["square"] for o in out] == [k * k for k in keys]
    assert sorted(tasks.computed(marks)) == [0, 1] and all(len(p) == 1 for p in tasks.computed(marks).values())
    wanted = {tasks.square.key(k, marks)[2] for k in (0, 1)}
    rows = {r["id"]: r for r in tasks.square.evaluations() if r["args"] in wanted}
    assert len(rows) == 2
    _wait_for("the workers' 4 hits written", lambda: sum(h for h, _ in _hits(store, rows).values()) == 4)
    assert all(t is not None for h, t in _hits(store, rows).values() if h)
    assert tasks.square(0, marks) == {"k": 0, "square": 0}  # the driver: a hit
    assert sorted(tasks.computed(marks)) == [0, 1] and sum(len(p) for p in tasks.computed(marks).values()) == 2


def test_gc_older_than_keeps_a_result_only_ray_workers_read(cluster, tmp_path):
    """A result stored 30 days ago and read since only by Ray workers is in use: ``memolab gc
    --older-than 7d`` keeps it (before, its last use stayed 30 days old and gc dropped it)."""
    store, tasks = cluster
    marks = str(tmp_path)
    assert tasks.square(7, marks)["square"] == 49  # stored by the driver
    (row,) = [r for r in tasks.square.evaluations() if r["args"] == tasks.square.key(7, marks)[2]]
    old = time.time() - 30 * 86400
    s = Store(store)
    with s.index.write() as c:
        c.execute("UPDATE evaluations SET started=?, finished=? WHERE id=?", (old, old + 1, row["id"]))
    s.close()
    assert ray.get([tasks.task.remote(7, marks) for _ in range(2)], timeout=WAIT)[0]["square"] == 49
    assert len(tasks.computed(marks)[7]) == 1  # hits in the workers, no computation
    _wait_for("the workers' hits written", lambda: _hits(store, [row["id"]])[row["id"]][0] >= 2)
    env = {**os.environ, "PYTHONPATH": SRC, "MEMOLAB_STORE": str(store)}
    cp = subprocess.run([sys.executable, "-m", "memolab", "gc", "--older-than", "7d", "--yes"], env=env, capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert row["id"] in {r["id"] for r in tasks.square.evaluations()}
