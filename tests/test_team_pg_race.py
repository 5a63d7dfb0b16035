"""Several clients opening an EMPTY team database at the same moment (the workers of a
cluster starting against a new database) all get the team index: the schema is created
once, and nobody takes the race for a damaged or newer schema.

Found by the Dask tests: PostgreSQL's catalog lookups are not one snapshot, so a client
could see the creating client's tables without its ``memolab_meta`` ("damaged"), or collide
with a creation committed while it waited for the advisory lock (``DuplicateTable``).
Before the fix most rounds of this test failed.
"""
from __future__ import annotations

import multiprocessing

import pytest


def _open(dsn: str, q) -> None:
    try:
        from memolab.team.pg import PgIndex

        with PgIndex(dsn) as idx:
            q.put(("ok", idx.version))
    except BaseException as e:  # reported to the parent, whatever it is
        q.put((type(e).__name__, str(e)[:300]))


def test_clients_creating_the_schema_at_once_all_succeed(postgres_server):
    pytest.importorskip("psycopg")
    ctx = multiprocessing.get_context("fork")
    for _ in range(4):
        dsn = postgres_server.new_database()
        q = ctx.Queue()
        procs = [ctx.Process(target=_open, args=(dsn, q)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert all(r[0] == "ok" for r in results), results
        postgres_server.drop_database(dsn)
