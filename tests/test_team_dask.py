"""Memoized functions in Dask tasks (issue 12, "Distributed execution").

One ``LocalCluster`` for the module: 2 worker processes x 2 threads, loopback,
no dashboard. The memoized functions live in ``team_dask_tasks`` (imported by
the workers); computations are counted with marker files, since the computing
processes are the workers. Each test gets a fresh store, configured on every
worker with ``memolab.workers.Configure`` (re-registered per test, and applied by
the scheduler to a worker its nanny restarts).

Layouts:
- ``shared``: every worker and the client on one local store directory (one
  machine): single flight through the local index's leases.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

if os.environ.get("CI"):
    import distributed  # noqa: F401  (under CI a missing distributed is a failure, not a skip)
distributed = pytest.importorskip("distributed")

import dask  # noqa: E402

import memolab  # noqa: E402
from memolab import config  # noqa: E402
from memolab.tracking import query  # noqa: E402
from memolab.workers import Configure  # noqa: E402

from team_dask_tasks import marks_of, square  # noqa: E402

KEYS = list(range(5))
TASKS = [k for _ in range(4) for k in KEYS]  # 20 tasks over 5 distinct keys


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=2, host="127.0.0.1",
                                       dashboard_address=None, worker_dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(params=["shared"])
def layout(request, client, tmp_path):
    """Configure the workers and this process (the client) for one test; yields the marks dir."""
    old = config.settings()
    if request.param == "shared":
        client.register_plugin(Configure(store=str(tmp_path / "store")))
        memolab.configure(store=str(tmp_path / "store"))
    client.wait_for_workers(2)
    marks = tmp_path / "marks"
    marks.mkdir()
    yield str(marks)
    memolab.configure(store=old.store)


def _worker_pids(client) -> set:
    return set(client.run(os.getpid).values())


def _run(client, api: str, marks: str, sleep: float = 0.0) -> list:
    if api == "submit":
        futures = [client.submit(square, k, marks, sleep, pure=False) for k in TASKS]
        return client.gather(futures)
    if api == "map":
        return client.gather(client.map(square, TASKS, marks=marks, sleep=sleep, pure=False))
    tasks = [dask.delayed(square, pure=False)(k, marks, sleep) for k in TASKS]
    return list(dask.compute(*tasks))


def _check_results(results: list) -> None:
    assert [r["k"] for r in results] == TASKS
    assert [r["square"] for r in results] == [k * k for k in TASKS]
    # every task of a key returns the one stored result (computed by one process)
    by_key = {}
    for r in results:
        by_key.setdefault(r["k"], set()).add(r["pid"])
    assert all(len(pids) == 1 for pids in by_key.values()), by_key


def _stored_runs() -> dict:
    """{eval id: the done run linked to it}; asserts one such run per stored evaluation."""
    store = square.store()
    evals = square.evaluations()
    runs = [r for r in query.runs(store.index, fn=square.symbol) if isinstance(r["id"], int)]
    done = {}
    for r in runs:
        if r["status"] == "done" and r["eval_id"] is not None:
            assert r["eval_id"] not in done
            done[r["eval_id"]] = r
    assert set(done) == {e["id"] for e in evals}
    return done


@pytest.mark.parametrize("api", ["submit", "map", "delayed"])
def test_twenty_tasks_over_five_keys_compute_five_times(client, layout, api):
    marks = layout
    workers = _worker_pids(client)
    results = _run(client, api, marks, sleep=0.2)  # long enough for tasks of one key to overlap
    _check_results(results)
    starts, dones = marks_of(marks, "start"), marks_of(marks, "done")
    assert {k: len(v) for k, v in starts.items()} == {k: 1 for k in KEYS}
    assert {k: len(v) for k, v in dones.items()} == {k: 1 for k in KEYS}
    assert {p for v in dones.values() for p in v} <= workers  # computed on the workers, not here

    # usable on the client: the same values, and a call here is a hit (nothing computed)
    for r in results[:5]:
        assert square(r["k"], marks) == r
    assert marks_of(marks, "start") == starts
    assert len(square.evaluations()) == 5

    # the logs made inside the tasks (on the workers) are attached to their evaluations
    runs = _stored_runs()
    for ev in square.evaluations():
        run = runs[ev["id"]]
        assert run["pid"] in workers
        loss = query.scalars(square.store().index, run["id"], "loss")
        assert loss["n"] == 3 and loss["step"] == [0, 1, 2]
        assert [t["text"] for t in query.texts(square.store().index, run["id"], "worker")] == [f"pid {run['pid']}"]


def test_a_killed_worker_computation_is_taken_over(client, layout):
    """SIGKILL the worker process computing a key: its lease dies with it, another
    worker takes the key over, and every key still has exactly one stored result."""
    marks = layout
    futures = client.map(square, TASKS, marks=marks, sleep=1.5, pure=False)
    deadline = time.monotonic() + 60
    while not marks_of(marks, "sleeping") and time.monotonic() < deadline:
        time.sleep(0.02)
    (k0, [victim]), = list(marks_of(marks, "sleeping").items())[:1]
    os.kill(victim, signal.SIGKILL)
    results = client.gather(futures)

    _check_results(results)
    assert victim not in {r["pid"] for r in results}
    starts, dones = marks_of(marks, "start"), marks_of(marks, "done")
    # exactly one finished computation per key, none by the killed process ...
    assert {k: len(v) for k, v in dones.items()} == {k: 1 for k in KEYS}
    assert victim not in {p for v in dones.values() for p in v}
    # ... and the key it was computing was started again by another process (taken over)
    assert victim in starts[k0] and len(starts[k0]) == 2
    for k, pids in starts.items():  # a key is started twice only if the killed process started it
        assert len(pids) == 1 or (len(pids) == 2 and victim in pids), (k, pids)
    evals = square.evaluations()
    assert len(evals) == 5 and len({e["args"] for e in evals}) == 5
    runs = _stored_runs()
    assert victim not in {r["pid"] for r in runs.values()}
    lost = [r for r in query.runs(square.store().index, fn=square.symbol) if r["pid"] == victim]
    assert lost and all(r["status"] == "lost" and r["eval_id"] is None for r in lost)
