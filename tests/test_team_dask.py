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
- ``team``: every worker process and the client on a local store of its own
  (three "machines") in front of one team store (a real PostgreSQL and moto's
  S3 server on loopback): single flight across machines through the team
  index's leases; results and logs reach the client through the team store.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import require

distributed = require("distributed")  # (under CI a missing distributed is a failure, not a skip)

import dask  # noqa: E402

import memolab  # noqa: E402
from memolab.settings import config  # noqa: E402
from memolab.tracking import query  # noqa: E402
from memolab.workers import Configure  # noqa: E402
from team_dask_tasks import Environ, marks_of, square  # noqa: E402

# no MEMOLAB_HMAC_KEY in these tests: the team layer says once that results are unsigned
pytestmark = pytest.mark.filterwarnings("ignore:memolab. a team store is configured without MEMOLAB_HMAC_KEY")

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


class Layout(str):
    """The marks directory of one test (a str), with where its results are stored."""

    team_dsn = None

    def team_rows(self) -> list:
        """The team index's rows of ``square`` (the local store's in the shared layout)."""
        if self.team_dsn is None:
            return square.evaluations()
        from memolab.team.pg import PgIndex

        with PgIndex(self.team_dsn) as idx:
            return idx.evaluations(square.symbol)


@pytest.fixture(params=["shared", "team"])
def layout(request, client, tmp_path):
    """Configure the workers and this process (the client) for one test; yields a ``Layout``."""
    old = config.settings()
    marks = tmp_path / "marks"
    marks.mkdir()
    out = Layout(str(marks))
    if request.param == "shared":
        client.register_plugin(Configure(store=str(tmp_path / "store")))
        memolab.configure(store=str(tmp_path / "store"))
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        bucket = request.getfixturevalue("s3_bucket")  # sets AWS_* here; the workers get them below
        client.register_plugin(Environ({k: v for k, v in os.environ.items() if k.startswith("AWS_")}))
        # a generous deadline: what is tested is single flight across machines, and on a heavily
        # loaded machine the default 3 s once cut in (the team store taken for down: a key computed twice)
        client.register_plugin(Configure(store=str(tmp_path / "worker-{worker}"), remote=dsn, remote_blobs=bucket,
                                         remote_timeout=30.0))
        memolab.configure(store=str(tmp_path / "client"), remote=dsn, remote_blobs=bucket, remote_timeout=30.0)
        out.team_dsn = dsn
    client.wait_for_workers(2, timeout=GATHER_BOUND)
    yield out
    memolab.configure(store=old.store, remote=old.remote, remote_blobs=old.remote_blobs,
                      remote_timeout=old.remote_timeout)


def _worker_pids(client) -> set:
    return set(client.run(os.getpid).values())


#: how long a test waits for its tasks: a bound against a hang (under 6 spinners a cluster lost
#: every worker and ``gather`` waited forever in the census), not a timing
GATHER_BOUND = 300


def _gather(client, futures) -> list:
    from distributed import wait

    wait(futures, timeout=GATHER_BOUND)  # raises TimeoutError: the test fails instead of hanging
    return client.gather(futures)


def _run(client, api: str, marks: str, sleep: float = 0.0) -> list:
    if api == "submit":
        return _gather(client, [client.submit(square, k, marks, sleep, pure=False) for k in TASKS])
    if api == "map":
        return _gather(client, client.map(square, TASKS, marks=marks, sleep=sleep, pure=False))
    tasks = [dask.delayed(square, pure=False)(k, marks, sleep) for k in TASKS]
    return list(_gather(client, client.compute(tasks)))


def _check_results(results: list, marks: str | None = None) -> None:
    assert [r["k"] for r in results] == TASKS
    assert [r["square"] for r in results] == [k * k for k in TASKS]
    # every task of a key returns the one stored result (computed by one process)
    by_key = {}
    for r in results:
        by_key.setdefault(r["k"], set()).add(r["pid"])
    assert all(len(pids) == 1 for pids in by_key.values()), _explained(by_key, marks)


def _explained(by_key: dict, marks: str | None) -> str:
    """What a key computed more than once leaves behind, so that a failure says why: which processes
    started each key, and the stored rows with what keys them besides the arguments (two rows of
    one argument digest family, a row with ``state_deps`` or ``reads``: a call routed to a key of
    its own; one row per key: a lease lost)."""
    import json

    rows = []
    for e in square.evaluations():
        snap = json.loads(e.get("snapshot") or "{}")
        rows.append({"args": (e["args"] or "")[:12], "k": snap.get("args", {}).get("k", [None, None])[1],
                     "status": e["status"], "state_deps": snap.get("state_deps"), "reads": snap.get("reads")})
    starts = marks_of(marks, "start") if marks is not None else None
    return f"pids per key {by_key}; starts {starts}; stored rows {rows}"


def _stored_runs(timeout: float = 30.0) -> dict:
    """{eval id: the done run linked to it} in the client's store; asserts one such run per
    stored evaluation. In the team layout a hit's logs are imported in the background:
    waited for (bounded)."""
    store = square.store()
    evals = {e["id"] for e in square.evaluations()}
    deadline = time.monotonic() + timeout
    while True:
        done: dict = {}
        for r in query.runs(store.index, fn=square.symbol):
            if isinstance(r["id"], int) and r["status"] == "done" and r["eval_id"] is not None:
                assert r["eval_id"] not in done
                done[r["eval_id"]] = r
        if set(done) == evals or time.monotonic() > deadline:
            assert set(done) == evals
            return done
        time.sleep(0.05)


def _team_rows(layout: Layout, n: int, timeout: float = GATHER_BOUND) -> list:
    """The team rows of ``square`` once there are ``n`` of them (bounded). A worker's result goes
    up from its journal's background uploader after the local save, so a task can be done before
    its row is on the team: under load (a census) the index was read one upload short."""
    deadline = time.monotonic() + timeout
    while True:
        rows = layout.team_rows()
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def _runs_of(pid: int, layout: Layout) -> list:
    """The runs process ``pid`` logged, in whichever local store it used."""
    from memolab.store.sqlite import Index

    root = Path(layout).parent
    out = []
    for idx in (root / "store", *sorted(root.glob("worker-*"))):
        if (idx / "index.sqlite").exists():
            out += [r for r in query.runs(Index(idx / "index.sqlite"), fn=square.symbol) if r["pid"] == pid]
    return out


@pytest.mark.parametrize("api", ["submit", "map", "delayed"])
def test_twenty_tasks_over_five_keys_compute_five_times(client, layout, api):
    marks = layout
    workers = _worker_pids(client)
    results = _run(client, api, marks, sleep=0.2)  # long enough for tasks of one key to overlap
    _check_results(results, marks)
    starts, dones = marks_of(marks, "start"), marks_of(marks, "done")
    assert {k: len(v) for k, v in starts.items()} == {k: 1 for k in KEYS}
    assert {k: len(v) for k, v in dones.items()} == {k: 1 for k in KEYS}
    assert {p for v in dones.values() for p in v} <= workers  # computed on the workers, not here

    # usable on the client: the same values, and a call here is a hit (nothing computed)
    for r in results[:5]:
        assert square(r["k"], marks) == r
    assert marks_of(marks, "start") == starts
    assert len(square.evaluations()) == 5
    assert len(layout.team_rows()) == 5

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
    results = _gather(client, futures)

    _check_results(results, marks)
    assert victim not in {r["pid"] for r in results}
    starts, dones = marks_of(marks, "start"), marks_of(marks, "done")
    # exactly one finished computation per key, none by the killed process ...
    assert {k: len(v) for k, v in dones.items()} == {k: 1 for k in KEYS}
    assert victim not in {p for v in dones.values() for p in v}
    # ... and the key it was computing was started again by another process (taken over)
    assert victim in starts[k0] and len(starts[k0]) == 2
    for k, pids in starts.items():  # a key is started twice only if the killed process started it
        assert len(pids) == 1 or (len(pids) == 2 and victim in pids), (k, pids)
    evals = _team_rows(layout, 5)  # the team index in the team layout
    assert len(evals) == 5 and len({e["args"] for e in evals}) == 5
    assert all(e["status"] == "done" for e in evals)
    for k in KEYS:  # and the client gets them: hits
        assert square(k, marks)["square"] == k * k
    assert marks_of(marks, "start") == starts
    runs = _stored_runs()
    assert victim not in {r["pid"] for r in runs.values()}
    lost = _runs_of(victim, layout)  # in the store the killed process logged to
    assert lost and all(r["status"] == "lost" and r["eval_id"] is None for r in lost)
