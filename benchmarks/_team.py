"""Shared by ``benchmarks/team_store.py`` and the worker processes it starts.

- ``Servers``: the team store on loopback, started with the test suite's own
  helpers (``tests/servers/``): Debian's PostgreSQL (initdb + pg_ctl in a
  temporary directory) and moto's S3 server (a subprocess).
- the memoized functions measured (a module of their own, so worker processes
  import them under the same name as the parent: same keys).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # tests/servers

import memolab  # noqa: E402
from memolab import memo  # noqa: E402


@memo
def small(i: int) -> dict[str, Any]:
    """A small result: stored inline in its index row (no blob)."""
    return {"i": i, "name": f"result {i}", "values": list(range(8))}


@memo
def big(mb: int, seed: int) -> Any:
    """An ``mb`` MB float64 array: a blob of that size."""
    import numpy as np

    return np.random.default_rng(seed).random(mb * 1_000_000 // 8)


@memo
def shard(i: int, mb: int) -> Any:
    """The results ``pull`` fetches: ``mb`` MB arrays."""
    import numpy as np

    return np.random.default_rng(1000 + i).random(mb * 1_000_000 // 8)


class Servers:
    """PostgreSQL and moto's S3 server on 127.0.0.1, one database and one bucket."""

    def __init__(self) -> None:
        from servers.postgres import PgServer, find_bin
        from servers.s3 import S3Server

        bindir = find_bin()
        if bindir is None:
            raise SystemExit("PostgreSQL's initdb/pg_ctl not found: apt-get install postgresql (make system-deps)")
        self.pg = PgServer(bindir)
        self.pg.start()
        self.dsn = self.pg.new_database()
        self.s3 = S3Server()
        self.s3.start()
        self.blobs_url = f"s3://{self.s3.make_bucket()}/memolab"
        # AWS_ENDPOINT_URL + dummy credentials, for us and our children; an unsigned team store
        # (no MEMOLAB_HMAC_KEY here) is loaded only when opted into (docs/team.md, "Trust")
        self.env = {**self.s3.env, "MEMOLAB_TEAM_UNSIGNED": "1"}
        os.environ.update(self.env)

    def close(self) -> None:
        self.s3.stop()
        self.pg.close()


def use(store: str, dsn: str, blobs_url: str) -> Any:
    """Point memolab at local store ``store`` in front of the team store; the opened store,
    its team connections made (a lookup of a key nobody has: one query)."""
    memolab.configure(store=store, remote=dsn, remote_blobs=blobs_url)
    st = small.store()
    st.lookup(("warm-up", "", "", ""))
    st.link.blobs.exists("0" * 64)  # the S3 client made and connected
    return st


def hit_worker(store: str, dsn: str, blobs_url: str, env: dict[str, str], keys: list[int], barrier: Any,
               out: Any) -> None:
    """One of N concurrent processes: team hits of ``keys`` (a fresh local store), then the
    same keys as local hits (read from the local store); wall-clock stamps for the parent."""
    import warnings

    warnings.simplefilter("ignore")
    os.environ.update(env)
    st = use(store, dsn, blobs_url)
    barrier.wait()
    t0 = time.time()
    for k in keys:
        small(k)
    t1 = time.time()
    barrier.wait()
    t2 = time.time()
    for k in keys:
        st.forget()
        small(k)
    t3 = time.time()
    out.put((t0, t1, t2, t3))
