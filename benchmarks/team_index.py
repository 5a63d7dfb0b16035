"""The index operations of the team store: the local SQLite ``Index`` and the team
``PgIndex`` (PostgreSQL on loopback) side by side, with a bare ``SELECT 1`` as the
floor of one round trip.

Rows: a lookup that hits and one that misses (one prepared statement each on
PostgreSQL), ``lookup_many`` of 100 keys (one statement over arrays), a claim
that takes a free lease plus its release, a claim of a stored key (a hit),
``publish_many`` of 1,000 rows (one pipeline), ``add_hits`` for 1,000 rows (one
statement). Interleaved rounds; median and min–max per operation.

The PostgreSQL server is started for the run (initdb + pg_ctl in a temporary
directory, as the tests do; Debian's ``postgresql`` package), or given with
``--dsn`` (it should be an empty scratch database: rows are written to it).

Usage: python benchmarks/team_index.py [--rounds 5] [--dsn postgresql://...]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def fields(i: int, fin: float) -> dict[str, Any]:
    return dict(payload=f"{i:064x}", payload_size=1000, buffers="[]", size=1000, started=fin - 1, finished=fin,
                duration=1.0, host="bench", python="3.11", versions="{}",
                snapshot=json.dumps({"result_digest": [f"r{i}"]}), hits=0, code_refs="[]",
                inline=b"x" * 200 if i % 2 else None)


def key(fn: str, i: int) -> tuple:
    return (fn, "c" * 64, f"{i:064x}", "s1")


def operations(ix: Any, tag: str) -> dict[str, Callable[[], float]]:
    """name -> a function timing one batch and returning seconds per operation."""
    ix.publish_many([(key("hot", i), fields(i, 1000.0 + i), {}) for i in range(1000)])
    ids = [r["id"] for r in ix.rows_since(fn="hot")]
    state = {"round": 0}

    def per(n: int, body: Callable[[int], Any]) -> float:
        t = time.perf_counter()
        for i in range(n):
            body(i)
        return (time.perf_counter() - t) / n

    def lookup_hit() -> float:
        return per(500, lambda i: ix.lookup(key("hot", i)))

    def lookup_miss() -> float:
        return per(500, lambda i: ix.lookup(key("cold", i)))

    def lookup_many() -> float:
        keys = [key("hot", i) for i in range(0, 1000, 10)]
        return per(20, lambda i: ix.lookup_many(keys)) / len(keys)

    def claim_release() -> float:
        state["round"] += 1
        r = state["round"]

        def one(i: int) -> None:
            k = key(f"claim{r}", i)
            ix.claim(k, "bench-owner", 60)
            ix.release(k, "bench-owner")
        return per(200, one)

    def claim_hit() -> float:
        return per(200, lambda i: ix.claim(key("hot", i), "bench-owner", 60))

    def publish_many() -> float:
        state["round"] += 1
        r = state["round"]
        rows = [(key(f"pub{r}", i), fields(i, 5000.0 + i), {}) for i in range(1000)]
        t = time.perf_counter()
        ix.publish_many(rows)
        return (time.perf_counter() - t) / len(rows)

    def add_hits() -> float:
        counts = {i: (1, time.time()) for i in ids}
        t = time.perf_counter()
        ix.add_hits(counts)
        return (time.perf_counter() - t) / len(counts)

    return {"lookup (hit)": lookup_hit, "lookup (miss)": lookup_miss, "lookup_many, per key (100)": lookup_many,
            "claim free lease + release": claim_release, "claim of a stored key (hit)": claim_hit,
            "publish_many, per row (1000)": publish_many, "add_hits, per row (1000)": add_hits}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dsn", default=None)
    a = ap.parse_args()

    from memolab.store.sqlite import Index
    from memolab.team.pg import PgIndex

    server = None
    dsn = a.dsn
    if dsn is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from servers.postgres import PgServer, find_bin

        bindir = find_bin()
        if bindir is None:
            sys.exit("no PostgreSQL binaries (apt-get install postgresql) and no --dsn")
        server = PgServer(bindir)
        server.start()
        dsn = server.new_database()
    try:
        tmp = tempfile.mkdtemp(prefix="memolab-bench-")
        sq = Index(Path(tmp) / "index.sqlite")
        pg = PgIndex(dsn)
        import psycopg

        raw = psycopg.connect(dsn, autocommit=True)
        ops = {"SQLite": operations(sq, "sqlite"), "PostgreSQL": operations(pg, "pg")}
        ops["PostgreSQL"]["SELECT 1 (round-trip floor)"] = lambda: _select1(raw)
        res: dict[str, dict[str, list[float]]] = {b: {n: [] for n in o} for b, o in ops.items()}
        for _ in range(a.rounds):  # interleaved: every operation of both backends once per round
            for name in ops["PostgreSQL"]:
                for b in ops:
                    if name in ops[b]:
                        res[b][name].append(ops[b][name]())
        print(f"team index operations, µs per operation: median (min-max) over {a.rounds} interleaved rounds")
        print("PostgreSQL 127.0.0.1 (loopback, fsync off), psycopg 3; shared noisy machine\n")
        print(f"{'operation':34} {'SQLite Index':>22} {'PgIndex':>22} {'ratio':>7}")
        for name in ops["PostgreSQL"]:
            cells = []
            for b in ("SQLite", "PostgreSQL"):
                xs = res[b].get(name)
                cells.append(f"{statistics.median(xs) * 1e6:8.1f} ({min(xs) * 1e6:.0f}-{max(xs) * 1e6:.0f})"
                             if xs else "-")
            ratio = (f"{statistics.median(res['PostgreSQL'][name]) / statistics.median(res['SQLite'][name]):6.1f}x"
                     if name in res["SQLite"] else "")
            print(f"{name:34} {cells[0]:>22} {cells[1]:>22} {ratio:>7}")
        pub = statistics.median(res["PostgreSQL"]["publish_many, per row (1000)"])
        print(f"\npublish_many on PostgreSQL: {1 / pub:,.0f} rows/s")
        raw.close()
        pg.close()
    finally:
        if server is not None:
            server.close()


def _select1(conn: Any) -> float:
    t = time.perf_counter()
    for _ in range(500):
        conn.execute("SELECT 1", prepare=True).fetchone()
    return (time.perf_counter() - t) / 500


if __name__ == "__main__":
    main()
