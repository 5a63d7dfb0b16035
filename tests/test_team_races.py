"""Races the Dask tests found in the team store, pinned one by one.

1. Several clients opening an EMPTY team database at the same moment (the workers of a
cluster starting against a new database) all get the team index: the schema is created
once, and nobody takes the race for a damaged or newer schema.

Found by the Dask tests: PostgreSQL's catalog lookups are not one snapshot, so a client
could see the creating client's tables without its ``memolab_meta`` ("damaged"), or collide
with a creation committed while it waited for the advisory lock (``DuplicateTable``).
Before the fix most rounds of this test failed.

2. Two threads of one process finding the same team row (two Dask tasks of one key on
a worker): the second import must be a hit on what the first imported, not be taken
for a refused import (which made the second task compute the key again).
"""
from __future__ import annotations

import multiprocessing

import memolab
from conftest import require
from memolab.settings import config


def _open(dsn: str, q) -> None:
    try:
        from memolab.team.pg import PgIndex

        with PgIndex(dsn) as idx:
            q.put(("ok", idx.version))
    except BaseException as e:  # reported to the parent, whatever it is
        q.put((type(e).__name__, str(e)[:300]))


def test_clients_creating_the_schema_at_once_all_succeed(postgres_server):
    require("psycopg")
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


@memolab.memo
def g(i: int) -> dict:
    return {"i": i}


def test_a_team_row_imported_by_another_thread_is_a_hit(tmp_path, postgres_dsn, s3_bucket):
    old = config.settings()
    try:
        memolab.configure(store=str(tmp_path / "a"), remote=postgres_dsn, remote_blobs=s3_bucket)
        a = g.store()
        g(1)
        a.journal.drain()
        memolab.configure(store=str(tmp_path / "b"))
        b = g.store()
        trow = b.link.index.lookup(g.key(1))
        first = b.adopt(g.key(1), trow)  # thread 1 imports it
        second = b.adopt(g.key(1), trow)  # thread 2 found the same team row meanwhile
        assert first is not None and second is not None and second["id"] == first["id"]
        b.mark_corrupt(g.key(1), first, "stale", status="stale")  # refused locally after all
        assert b.adopt(g.key(1), trow) is None  # then it is computed here, not imported again
    finally:
        memolab.configure(store=old.store, remote=old.remote, remote_blobs=old.remote_blobs)
