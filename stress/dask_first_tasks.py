"""The first tasks of fresh Dask workers on one shared local store: is each key computed once?

Each round starts a fresh ``LocalCluster`` (2 worker processes x 2 threads, as
``tests/test_team_dask.py``), a fresh store, and runs its 20 tasks over 5 keys
(``team_dask_tasks.square``, 0.2 s each). A round is bad when a key was started more than once
or its tasks returned results of two processes; it prints the stored rows (argument digest,
``state_deps``, ``reads``): a key computed again under another argument digest was routed there.

Before ``settings/hooks`` waited for a hook in flight, 10 of 35 rounds on 2 loaded cores were bad
(the second task thread of a worker began its body while the first registered numpy's generator:
its row depended on an "unseeded" numpy that the worker's seeded numpy never matched).

    PYTHONPATH=src:tests python stress/dask_first_tasks.py --rounds 15
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any


def one_round(distributed: Any, Configure: Any, square: Any, marks_of: Any) -> str | None:
    """Run one round; None when every key was computed once, else what went wrong."""
    keys = list(range(5))
    tasks = [k for _ in range(4) for k in keys]
    d = Path(tempfile.mkdtemp(prefix="memolab-dask-"))
    try:
        (d / "marks").mkdir()
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=2,
                                           host="127.0.0.1", dashboard_address=None, worker_dashboard_address=None)
        client = distributed.Client(cluster)
        try:
            client.register_plugin(Configure(store=str(d / "store")))
            client.wait_for_workers(2, timeout=300)
            futures = [client.submit(square, k, str(d / "marks"), 0.2, pure=False) for k in tasks]
            distributed.wait(futures, timeout=300)
            results = client.gather(futures)
        finally:
            client.close()
            cluster.close()
        pids: dict[int, set[int]] = {}
        for r in results:
            pids.setdefault(r["k"], set()).add(r["pid"])
        starts = marks_of(str(d / "marks"), "start")
        if all(len(v) == 1 for v in pids.values()) and all(len(v) == 1 for v in starts.values()):
            return None
        with sqlite3.connect(d / "store" / "index.sqlite") as c:
            rows = c.execute("SELECT substr(args, 1, 12), json_extract(snapshot, '$.args.k[1]'), "
                             "json_extract(snapshot, '$.state_deps'), json_extract(snapshot, '$.reads') "
                             "FROM evaluations ORDER BY id").fetchall()
        return json.dumps({"pids": {k: sorted(v) for k, v in pids.items()}, "starts": starts, "rows": rows})
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    import distributed
    from memolab.workers import Configure
    from team_dask_tasks import marks_of, square

    bad = 0
    for i in range(args.rounds):
        what = one_round(distributed, Configure, square, marks_of)
        if what is not None:
            bad += 1
            print(f"round {i}: {what}", flush=True)
    print(f"{bad} of {args.rounds} rounds computed a key more than once")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
