"""One suite for every index of evaluations (``team.protocol.EvalIndex``).

Each test runs against the local SQLite ``Index`` and the team's ``PgIndex`` (a
real PostgreSQL server started by ``tests/servers/postgres.py``): a rule that
holds on a laptop holds on the team database. The tests after the suite are
PostgreSQL's own: schema versions and upgrades, lock timeouts, a server that
goes away.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memolab.store.leasing import process_token
from memolab.store.sqlite import Index

SRC = str(Path(__file__).resolve().parents[1] / "src")
ELSEWHERE = "otherhost:4242:777/1.abc"  # a lease owner on another machine: only its heartbeat speaks for it


# -- opening an index by spec, here and in child processes ------------------------------------
OPEN = """
def open_index(spec):
    if spec.startswith("sqlite:"):
        from pathlib import Path
        from memolab.store.sqlite import Index
        return Index(Path(spec[len("sqlite:"):]))
    from memolab.team.pg import PgIndex
    return PgIndex(spec)
"""
exec(OPEN)  # defines open_index here too


@pytest.fixture(params=["sqlite", "postgres"])
def spec(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'index.sqlite'}"
    return request.getfixturevalue("postgres_dsn")


@pytest.fixture
def index(spec):
    ix = open_index(spec)  # noqa: F821 (defined by exec above)
    yield ix
    if hasattr(ix, "close"):
        ix.close()


BARRIER = """
def barrier():
    # tell the parent we are ready, then go when all siblings are: they act at once
    import os
    d = os.environ["BARRIER_DIR"]
    open(os.path.join(d, "ready-%d" % os.getpid()), "w").close()
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.001)
"""


def run_children(tmp_path: Path, body: str, args: list[list[str]], timeout: float = 60) -> list[str]:
    """Run ``body`` (Python, with ``open_index``, ``barrier()`` and ``sys.argv``) in one
    fresh process per argument list, all at once; their stdouts."""
    run = tmp_path / f"children_{time.monotonic_ns()}"
    run.mkdir()
    script = run / "child.py"
    script.write_text("import sys, time, json\n" + OPEN + BARRIER + textwrap.dedent(body))
    env = dict(os.environ, BARRIER_DIR=str(run),
               PYTHONPATH=os.pathsep.join([SRC] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    procs = [subprocess.Popen([sys.executable, str(script), *a], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for a in args]
    try:
        deadline = time.monotonic() + timeout
        while len(list(run.glob("ready-*"))) < len(procs):
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                break  # reported below
            time.sleep(0.005)
        (run / "go").touch()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"child failed ({p.returncode}):\n{out}\n{err}"
            outs.append(out)
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# -- rows ----------------------------------------------------------------------------------------
def key(i: Any, fn: str = "pkg.mod.f") -> tuple:
    return (fn, "code" + "0" * 60, f"args{i}", "schema1")


def fields(i: int = 0, inline: bool = False, finished: float = 1000.0, size: int = 100, **kw) -> dict[str, Any]:
    f = dict(payload=f"{i:064x}", payload_size=size, buffers="[]", size=size, started=finished - 2.5,
             finished=finished, duration=2.5, host="hostA", python="3.11.7", versions='{"numpy": "2.0"}',
             snapshot=json.dumps({"result_digest": [f"r{i}"], "i": i}), hits=0, last_hit=None,
             code_refs='["ref1"]', signature=None, reason=None, inline=b"\x00inline\xff%d" % i if inline else None)
    f.update(kw)
    return f


COMMON = ("fn", "code", "args", "schema", "status", "payload", "payload_size", "buffers", "size", "started",
          "finished", "duration", "host", "python", "versions", "snapshot", "hits", "last_hit", "code_refs",
          "signature", "reason", "inline")


def same(row: dict[str, Any], k: tuple, f: dict[str, Any]) -> None:
    """``row`` holds ``f`` verbatim under key ``k``."""
    assert (row["fn"], row["code"], row["args"], row["schema"]) == k
    assert row["status"] == "done"
    for c in COMMON[5:]:
        if c in f:
            assert row[c] == f[c], c


def read_only(index) -> None:
    """From now on, a write through this thread's connection fails."""
    if isinstance(index, Index):
        index.conn().execute("PRAGMA query_only = ON")
    else:
        index.conn().execute("SET default_transaction_read_only = on")


def writable(index) -> None:
    if isinstance(index, Index):
        index.conn().execute("PRAGMA query_only = OFF")
    else:
        index.conn().execute("SET default_transaction_read_only = off")


# -- the suite -----------------------------------------------------------------------------------
def test_lookup_hit_miss_and_never_writes(index):
    f = fields(1, inline=True)
    eid, new = index.publish(key(1), f, {})
    assert new
    index.publish(key(2), fields(2), {})
    read_only(index)
    try:
        row = index.lookup(key(1))
        same(row, key(1), f)
        assert row["id"] == eid and row["inline"] == f["inline"]
        assert index.lookup(key(2))["inline"] is None
        assert index.lookup(key(3)) is None
        assert index.lookup(("other.fn",) + key(1)[1:]) is None
        assert set(index.lookup_many([key(1), key(2), key(3)])) == {key(1), key(2)}
        assert [r["args"] for r in index.rows_since()] == ["args1", "args2"]
        assert len(index.evaluations()) == 2 and index.functions()[0]["evaluations"] == 2
    finally:
        writable(index)


def test_lookup_many(index):
    rows = {key(i): fields(i, inline=i % 2 == 0) for i in range(30)}
    index.publish_many([(k, f, {}) for k, f in rows.items()])
    want = [key(i) for i in range(0, 40, 3)]  # some absent
    got = index.lookup_many(want)
    assert set(got) == {k for k in want if k in rows}
    for k, row in got.items():
        same(row, k, rows[k])
    assert index.lookup_many([]) == {}
    index.mark_corrupt(got[key(3)]["id"], "damaged")
    assert key(3) not in index.lookup_many([key(3), key(6)])


def test_claim_owner_wait_hit_force(index):
    k = key(1)
    assert index.claim(k, "A", ttl=60) == ("owner", None)
    assert index.claim(k, "B", ttl=60) == ("wait", None)
    assert index.claim(k, "A", ttl=60) == ("owner", None)  # ours already
    assert index.live_leases(60) == 1
    f = fields(1)
    eid = index.record(k, "A", f, {"src1": ("pkg.mod.f", "def f(): ...")})
    state, row = index.claim(k, "B", ttl=60)
    assert state == "hit" and row["id"] == eid
    same(row, k, f)
    assert index.live_leases(60) == 0  # a hit takes no lease
    assert index.source("src1") == "def f(): ..."
    # force: the stored row is skipped; the lease is taken and the recomputed row replaces it
    assert index.claim(k, "B", ttl=60, force=True) == ("owner", None)
    assert index.claim(k, "C", ttl=60, force=True) == ("wait", None)
    eid2 = index.record(k, "B", fields(1, payload="f" * 64), {})
    assert eid2 != eid and index.lookup(k)["payload"] == "f" * 64


def test_lease_taken_over_after_ttl_and_heartbeat_keeps_it(index):
    k = key(1)
    ttl = 0.5
    assert index.claim(k, ELSEWHERE, ttl=ttl)[0] == "owner"
    assert index.claim(k, "B", ttl=ttl)[0] == "wait"
    time.sleep(ttl + 0.15)
    index.heartbeat([(k, ELSEWHERE), (key(9), ELSEWHERE)])  # a key it does not hold: nothing
    assert index.claim(k, "B", ttl=ttl)[0] == "wait"  # heart-beaten just now
    time.sleep(ttl + 0.15)
    index.heartbeat([(k, "not-the-owner")])  # refreshes nothing
    assert index.claim(k, "B", ttl=ttl)[0] == "owner"  # stale: taken over
    assert index.claim(k, ELSEWHERE, ttl=ttl)[0] == "wait"
    assert index.live_leases(ttl) == 1 and index.live_leases(0) == 0
    index.heartbeat([])


def test_dead_owner_on_this_host_is_taken_over_at_once(index, spec, tmp_path):
    k = key(1)
    ready = tmp_path / "ready"
    body = f"""
    ix = open_index(sys.argv[1])
    from memolab.store.leasing import process_token
    print(ix.claim({k!r}, process_token(), ttl=3600)[0], flush=True)
    open({str(ready)!r}, "w").close()
    time.sleep(600)
    """
    script = tmp_path / "holder.py"
    script.write_text("import sys, time\n" + OPEN + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, str(script), spec], env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert p.poll() is None, "the lease holder died early"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert p.stdout.readline().strip() == "owner"
        assert index.claim(k, process_token(), ttl=3600)[0] == "wait"  # alive: its lease stands
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # dead on this host: taken over at once, whatever the ttl
    assert index.claim(k, process_token(), ttl=3600)[0] == "owner"


def test_release(index):
    k = key(1)
    assert index.claim(k, "A", ttl=60)[0] == "owner"
    index.release(k, "B")  # not B's: nothing happens
    assert index.claim(k, "C", ttl=60)[0] == "wait"
    index.release(k, "A")
    index.release(key(2), "A")  # holds none: nothing
    assert index.live_leases(60) == 0
    assert index.claim(k, "C", ttl=60)[0] == "owner"


def test_record_drops_the_lease(index):
    k = key(1)
    index.claim(k, "A", ttl=60)
    index.record(k, "A", fields(1), {})
    assert index.live_leases(60) == 0
    assert index.claim(k, "B", ttl=60, force=True)[0] == "owner"  # no lease left behind to wait for


def test_record_after_losing_the_lease_keeps_the_others_row(index):
    k = key(1)
    ttl = 0.2
    assert index.claim(k, ELSEWHERE, ttl=ttl)[0] == "owner"
    assert index.claim(k, "B", ttl=ttl)[0] == "wait"  # seen: a lease is judged by its heartbeat's progress
    time.sleep(ttl + 0.1)
    assert index.claim(k, "B", ttl=ttl)[0] == "owner"
    theirs = index.record(k, "B", fields(1, payload="b" * 64), {})
    ours = index.record(k, ELSEWHERE, fields(1, payload="a" * 64), {})
    assert ours == theirs and index.lookup(k)["payload"] == "b" * 64
    # a lost lease with no row stored by the new owner: ours is written
    k2 = key(2)
    index.claim(k2, ELSEWHERE, ttl=ttl)
    assert index.claim(k2, "B", ttl=ttl)[0] == "wait"
    time.sleep(ttl + 0.1)
    assert index.claim(k2, "B", ttl=ttl)[0] == "owner"
    eid = index.record(k2, ELSEWHERE, fields(2), {})
    assert index.lookup(k2)["id"] == eid
    assert index.claim(k2, "C", ttl=60)[0] == "hit"


def test_record_refused_when_blobs_are_gone(index):
    from memolab.store.sqlite import BlobsGone

    k = key(1)
    index.claim(k, "A", ttl=60)
    with pytest.raises(BlobsGone):
        index.record(k, "A", fields(1), {}, present=lambda: False)
    assert index.lookup(k) is None
    assert index.claim(k, "B", ttl=60)[0] == "wait"  # still A's lease: A puts the blobs again and retries
    index.record(k, "A", fields(1), {})
    assert index.lookup(k) is not None


def test_publish_never_replaces_a_done_row_but_replaces_a_corrupt_one(index):
    k = key(1)
    f1 = fields(1, inline=True, hits=7, last_hit=5000.5, signature="sig-1", reason=None)
    eid, new = index.publish(k, f1, {"s1": ("f", "def f(): 1")})
    assert new
    same(index.lookup(k), k, f1)  # every field verbatim (a signed row verifies on another machine)
    assert index.publish(k, fields(1, payload="2" * 64), {}) == (eid, False)
    assert index.lookup(k)["payload"] == f1["payload"]
    index.mark_corrupt(eid, "truncated blob")
    eid2, new2 = index.publish(k, fields(1, payload="3" * 64), {})
    assert new2 and eid2 != eid
    row = index.lookup(k)
    assert row["id"] == eid2 and row["payload"] == "3" * 64 and row["hits"] == 0 and row["reason"] is None
    # the publisher's lease is dropped
    k2 = key(2)
    index.claim(k2, "P", ttl=60)
    index.publish(k2, fields(2), {}, owner="P")
    assert index.live_leases(60) == 0
    k3 = key(3)
    index.claim(k3, "Q", ttl=60)
    index.publish(k3, fields(3), {}, owner="P")  # not P's lease: Q keeps it
    assert index.live_leases(60) == 1
    assert index.source("s1") == "def f(): 1" and index.source("nope") is None


def test_publish_many_batch(index):
    pre, _ = index.publish(key(5), fields(5, payload="5" * 64), {})
    corrupt, _ = index.publish(key(7), fields(7), {})
    index.mark_corrupt(corrupt)
    batch = [(key(i), fields(i, inline=i % 3 == 0, finished=2000.0 + i), {f"src{i % 4}": ("f", f"v{i % 4}")})
             for i in range(40)]
    batch.insert(10, (key(3), fields(3, payload="d" * 64), {}))  # the same key twice: the first one wins
    out = index.publish_many(batch)
    assert len(out) == len(batch)
    by_args = {}
    for (k, _, _), (eid, new) in zip(batch, out, strict=False):
        by_args.setdefault(k[2], []).append((eid, new))
    assert by_args["args5"] == [(pre, False)]
    assert by_args["args7"][0][1] is True and by_args["args7"][0][0] != corrupt
    first, second = by_args["args3"]
    assert second == (first[0], False) and first[1] is True
    assert index.lookup(key(3))["payload"] == f"{3:064x}"
    assert len(index.rows_since()) == 40
    assert index.source("src3") == "v3"
    assert index.publish_many([]) == []
    # the texts of several digests in one query (a pull's rows, for `explain`), absent ones left out
    assert index.sources_of(["src1", "nope", "src3", "src1"]) == {"src1": ("f", "v1"), "src3": ("f", "v3")}
    assert index.sources_of([]) == {}
    assert len(index.sources_of([f"x{i}" for i in range(1200)] + ["src0"])) == 1  # past any batch limit


def test_rows_since_ordering_and_filters(index):
    index.publish_many([(key(i, fn="f" if i % 2 else "g"), fields(i, finished=100.0 + (i * 7) % 10), {})
                        for i in range(10)])
    index.mark_corrupt(index.lookup(key(3, fn="f"))["id"])
    rows = index.rows_since()
    assert [r["finished"] for r in rows] == sorted(r["finished"] for r in rows) and len(rows) == 9
    assert all(r["status"] == "done" for r in rows) and "inline" in rows[0]
    assert {r["fn"] for r in index.rows_since(fn="f")} == {"f"} and len(index.rows_since(fn="f")) == 4
    later = index.rows_since(since=105.0)
    assert later and all(r["finished"] > 105.0 for r in later)  # strictly after
    assert [r["finished"] for r in index.rows_since(limit=3)] == [r["finished"] for r in rows[:3]]
    assert index.rows_since(fn="nobody") == []


def test_mark_corrupt_hides_the_row(index):
    eid, _ = index.publish(key(1), fields(1), {})
    index.mark_corrupt(eid, "digest mismatch")
    assert index.lookup(key(1)) is None
    assert index.claim(key(1), "A", ttl=60)[0] == "owner"  # a miss: recomputed
    (row,) = index.evaluations()
    assert row["status"] == "corrupt" and row["reason"] == "digest mismatch"
    index.mark_corrupt(eid, "old code", status="stale")
    assert index.evaluations()[0]["status"] == "stale"


def test_add_hits_last_hit_only_grows(index):
    a, _ = index.publish(key(1), fields(1), {})
    b, _ = index.publish(key(2), fields(2, hits=5, last_hit=900.0), {})
    index.add_hits({a: (2, 500.0), b: (1, 100.0)})
    index.add_hits({a: (3, 400.0)})  # an older batch arriving late
    index.add_hits({})
    ra, rb = index.lookup(key(1)), index.lookup(key(2))
    assert (ra["hits"], ra["last_hit"]) == (5, 500.0)
    assert (rb["hits"], rb["last_hit"]) == (6, 900.0)


def test_evaluations_and_functions(index):
    for i in range(6):
        index.publish(key(i, fn="b.f" if i < 4 else "a.g"), fields(i, finished=10.0 * i, size=10 + i, duration=1.5), {})
    index.add_hits({index.lookup(key(1, fn="b.f"))["id"]: (4, 99.0)})
    rows = index.evaluations()
    assert [r["finished"] for r in rows] == [50.0, 40.0, 30.0, 20.0, 10.0, 0.0]  # newest first
    assert "inline" not in rows[0]
    assert [r["args"] for r in index.evaluations(fn="a.g", order="finished ASC")] == ["args4", "args5"]
    assert len(index.evaluations(limit=2)) == 2
    assert [r["args"] for r in index.evaluations(where="size > ?", params=(13,), order="size DESC")] == \
        ["args5", "args4"]
    fns = index.functions()
    assert [f["fn"] for f in fns] == ["a.g", "b.f"]
    g, f = fns
    assert (f["evaluations"], f["size"], f["last"], f["hits"], f["compute"]) == (4, 46, 30.0, 4, 6.0)
    assert (g["evaluations"], g["size"], g["last"]) == (2, 29, 50.0)


def test_gc_plan(index):
    shared = "e" * 64
    ids = {}
    for i, (fin, hit, size) in enumerate([(100.0, None, 10), (200.0, 900.0, 20), (300.0, None, 30), (400.0, None, 40)]):
        f = fields(i, finished=fin, size=size, payload=f"{i:064x}", payload_size=size, last_hit=hit)
        if i >= 2:  # rows 2 and 3 share a buffer blob of 1000 bytes
            f["buffers"] = json.dumps([[shared, 1000]])
            f["size"] = size + 1000
        ids[i], _ = index.publish(key(i), f, {})
    ids[4], _ = index.publish(key(4), fields(4, finished=500.0, size=5, inline=True), {})
    index.mark_corrupt(ids[4])
    # by age: what was last used before the cutoff, and every row out of use
    assert [r["id"] for r in index.gc_plan(cutoff=350.0, max_size=None)] == [ids[0], ids[2], ids[4]]
    assert [r["id"] for r in index.gc_plan(cutoff=None, max_size=None)] == [ids[4]]
    # by size, least recently used first: 10 + 20 + 30 + 40 + 1000 (shared once) = 1100
    assert [r["id"] for r in index.gc_plan(cutoff=None, max_size=1100)] == [ids[4]]
    assert [r["id"] for r in index.gc_plan(cutoff=None, max_size=1080)] == [ids[4], ids[0], ids[2]]
    # dropping row 2 frees no shared bytes while row 3 keeps them: row 1 (used at 900) goes last
    assert [r["id"] for r in index.gc_plan(cutoff=None, max_size=60)] == [ids[4], ids[0], ids[2], ids[3]]
    plan = index.gc_plan(cutoff=None, max_size=0)
    assert set(plan[0]) == {"id", "fn", "finished", "last_hit", "size", "status"}


def test_referenced_digests(index):
    a, _ = index.publish(key(1), fields(1, buffers=json.dumps([["b1" * 32, 5], ["b2" * 32, 6]])), {})
    b, _ = index.publish(key(2), fields(2, inline=True), {})  # inline: refers to no blob
    c, _ = index.publish(key(3), fields(3), {})
    assert index.referenced_digests() == {f"{1:064x}", "b1" * 32, "b2" * 32, f"{3:064x}"}
    assert index.referenced_digests(exclude={a}) == {f"{3:064x}"}
    assert index.referenced_digests(exclude={a, b, c}) == set()


def test_delete_evaluations_and_clear(index):
    ids = [index.publish(key(i, fn="f" if i < 3 else "g"), fields(i), {})[0] for i in range(5)]
    index.delete_evaluations([ids[0], 10 ** 9])
    index.delete_evaluations([])
    assert index.lookup(key(0, fn="f")) is None and index.lookup(key(1, fn="f")) is not None
    assert index.clear("f") == 2
    assert [r["fn"] for r in index.evaluations()] == ["g", "g"]
    assert index.clear() == 2 and index.evaluations() == [] and index.functions() == []


def test_concurrent_claims_from_processes_compute_each_key_once(index, spec, tmp_path):
    """Single flight: processes claim the same keys at once; each owner records at
    once, the others wait for its row. Every key has exactly one owner, and everyone
    ends up with that owner's row (a row recorded while another claims is a hit)."""
    n_keys, n_procs = 12, 4
    keys = [key(i) for i in range(n_keys)]
    body = f"""
    import random
    ix = open_index(sys.argv[1])
    me = sys.argv[2]
    keys = {keys!r}
    random.Random(me).shuffle(keys)
    owned, seen = [], {{}}
    barrier()  # all claim at once
    for k in keys:
        if ix.claim(k, me, ttl=3600)[0] == "owner":
            owned.append(k)
            ix.record(k, me, dict(payload=me, size=1, finished=time.time(), hits=0), {{}})
            seen[k[2]] = me
    for k in keys:
        while k[2] not in seen:
            state, row = ix.claim(k, me, ttl=3600)
            if state == "hit":
                seen[k[2]] = row["payload"]
            elif state == "owner":  # a second owner: the parent fails the test
                owned.append(k)
                ix.record(k, me, dict(payload=me, size=1, finished=time.time(), hits=0), {{}})
                seen[k[2]] = me
            else:
                time.sleep(0.005)
    print(json.dumps({{"owned": [k[2] for k in owned], "seen": seen}}))
    """
    outs = run_children(tmp_path, body, [[spec, f"proc{i}"] for i in range(n_procs)])
    owners: dict[str, list[str]] = {}
    views = []
    for i, out in enumerate(outs):
        res = json.loads(out.strip().splitlines()[-1])
        for a in res["owned"]:
            owners.setdefault(a, []).append(f"proc{i}")
        views.append(res["seen"])
    assert sorted(owners) == sorted(k[2] for k in keys) and all(len(v) == 1 for v in owners.values()), owners
    for view in views:  # everyone has the owner's row
        assert view == {a: o[0] for a, o in owners.items()}
    assert index.live_leases(3600) == 0
    assert {r["args"]: r["payload"] for r in index.rows_since()} == views[0]


# -- PostgreSQL's own ----------------------------------------------------------------------------
def _set_version(dsn: str, v: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE memolab_meta SET value = %s WHERE key = 'schema_version'", (str(v),))


def test_pg_import_memolab_does_not_load_psycopg():
    out = subprocess.run([sys.executable, "-c", "import sys, memolab; print('psycopg' in sys.modules)"],
                         env=dict(os.environ, PYTHONPATH=SRC), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pg_schema_refused_when_older_or_newer(postgres_dsn):
    from memolab.errors import StoreConfigError
    from memolab.team.pg import PgIndex, TeamSchemaError, status, upgrade

    PgIndex(postgres_dsn).close()  # an empty database gets the current schema
    _set_version(postgres_dsn, 0)
    with pytest.raises(StoreConfigError, match=r"team schema 0 .* is older than this memolab's 3: "
                                                r"run `memolab remote upgrade`"):
        PgIndex(postgres_dsn)
    st = status(postgres_dsn)
    assert st["reachable"] and st["schema"] == 0 and not st["ok"] and "memolab remote upgrade" in st["message"]
    _set_version(postgres_dsn, 99)
    with pytest.raises(TeamSchemaError, match=r"team schema 99 .* is newer than this memolab supports "
                                              r"\(1\.\.3\): upgrade memolab") as e:
        PgIndex(postgres_dsn)
    assert e.value.version == 99
    with pytest.raises(TeamSchemaError, match="newer"):
        upgrade(postgres_dsn)  # never downgraded
    assert status(postgres_dsn)["schema"] == 99
    _set_version(postgres_dsn, 1)
    st = status(postgres_dsn)
    assert st["ok"] and st["evaluations"] == 0 and st["leases"] == 0


def test_pg_status_and_upgrade_of_an_empty_database(postgres_dsn):
    from memolab.team.pg import PgIndex, TeamSchemaError, status, upgrade

    st = status(postgres_dsn)
    assert st["reachable"] and st["schema"] is None and not st["ok"]  # status writes nothing
    with pytest.raises(TeamSchemaError, match="no memolab schema"):
        PgIndex(postgres_dsn, create=False)
    assert upgrade(postgres_dsn) == {"from": None, "to": 3, "changed": True}
    assert upgrade(postgres_dsn) == {"from": 3, "to": 3, "changed": False}
    with PgIndex(postgres_dsn) as ix:
        ix.publish(key(1), fields(1, size=7), {})
        ix.claim(key(2), "A", ttl=60)
    st = status(postgres_dsn)
    assert (st["schema"], st["ok"], st["evaluations"], st["done"], st["functions"], st["size"], st["leases"]) == \
        (3, True, 1, 1, 1, 7, 1)


SCHEMA_4 = """
import memolab.team.pg as pg
import memolab.team.pgschema as pgschema  # the schema, its versions and migrations
pgschema.TEAM_SCHEMA_VERSION = 4
pgschema.SUPPORTED = (4, 4)
pgschema.STEPS.append((4, ["ALTER TABLE memolab_evaluations ADD COLUMN extra TEXT",
                      "CREATE INDEX memolab_evaluations_extra ON memolab_evaluations(extra)"]))
"""


def test_pg_upgrade_from_an_older_version_under_concurrency(postgres_dsn, tmp_path):
    from memolab.team.pg import PgIndex, TeamSchemaError

    with PgIndex(postgres_dsn) as ix:
        ix.publish(key(1), fields(1, inline=True), {})
    body = SCHEMA_4 + textwrap.dedent("""
    try:
        pg.PgIndex(sys.argv[1])
        refused = ""
    except pg.TeamSchemaError as e:
        refused = str(e)
    barrier()
    print(json.dumps({"refused": refused, "upgrade": pg.upgrade(sys.argv[1])}))
    ix = pg.PgIndex(sys.argv[1])
    print(json.dumps({"version": ix.version, "row": ix.lookup(%r)["args"]}))
    """) % (key(1),)
    outs = [[json.loads(line) for line in out.strip().splitlines()]
            for out in run_children(tmp_path, body, [[postgres_dsn], [postgres_dsn]])]
    for (first, after) in outs:
        assert "team schema 3" in first["refused"] and "older than this memolab's 4" in first["refused"]
        assert "memolab remote upgrade" in first["refused"]
        assert after == {"version": 4, "row": "args1"}
    ups = sorted((o[0]["upgrade"] for o in outs), key=lambda u: not u["changed"])
    assert ups == [{"from": 3, "to": 4, "changed": True}, {"from": 4, "to": 4, "changed": False}]
    # this (version 3) memolab now refuses the database
    with pytest.raises(TeamSchemaError, match="team schema 4 .* newer"):
        PgIndex(postgres_dsn)
    import psycopg

    with psycopg.connect(postgres_dsn) as c:
        cols = [r[0] for r in c.execute("SELECT column_name FROM information_schema.columns "
                                        "WHERE table_name = 'memolab_evaluations' AND column_name = 'extra'")]
    assert cols == ["extra"]


def test_pg_schema_1_works_without_shared_accepts_until_upgraded(postgres_dsn, monkeypatch):
    """A team database an older memolab made (schema 1, no memolab_accepts) is used as it is:
    no accept is shared through it, and recording one says why, until `memolab remote upgrade`."""
    import memolab.team.pg as pg
    import memolab.team.pgschema as pgschema
    from memolab.team.pgaccepts import AcceptsUnsupported

    with monkeypatch.context() as m:  # what the older memolab created
        m.setattr(pgschema, "TEAM_SCHEMA_VERSION", 1)
        m.setattr(pgschema, "STEPS", pgschema.STEPS[:1])
        pg.PgIndex(postgres_dsn).close()
    with pg.PgIndex(postgres_dsn) as ix:
        assert ix.version == 1 and not ix.accepts_supported and ix.accepts("f") == []
        with pytest.raises(AcceptsUnsupported, match="predates accepts"):
            ix.add_accept(ACCEPT)
        ix.publish(key(1), fields(1), {})
    assert pg.upgrade(postgres_dsn) == {"from": 1, "to": 3, "changed": True}
    with pg.PgIndex(postgres_dsn) as ix:
        assert ix.accepts_supported and ix.lookup(key(1))["args"] == "args1"
        i = ix.add_accept(ACCEPT)
        assert [a["id"] for a in ix.accepts("f")] == [i]


def test_pg_upgrade_honours_lock_timeout(postgres_dsn, monkeypatch):
    import psycopg

    import memolab.team.pg as pg
    import memolab.team.pgschema as pgschema

    pg.PgIndex(postgres_dsn).close()
    monkeypatch.setattr(pgschema, "TEAM_SCHEMA_VERSION", 4)
    monkeypatch.setattr(pgschema, "SUPPORTED", (4, 4))
    monkeypatch.setattr(pgschema, "STEPS", pgschema.STEPS + [(4, ["ALTER TABLE memolab_evaluations ADD COLUMN extra TEXT"])])
    with psycopg.connect(postgres_dsn) as reader:  # a client in the middle of a long read
        reader.execute("SELECT count(*) FROM memolab_evaluations").fetchone()
        with pytest.raises(pg.TeamSchemaError, match=r"could not lock a table within 0.2 s .* nothing was changed"):
            pg.upgrade(postgres_dsn, lock_timeout=0.2)
        reader.execute("SELECT count(*) FROM memolab_evaluations").fetchone()  # not wedged
    with psycopg.connect(postgres_dsn, autocommit=True) as other:  # another migrator holds the lock
        other.execute("SELECT pg_advisory_lock(%s)", (pgschema.LOCK_KEY,))
        with pytest.raises(pg.TeamSchemaError, match="another client has been creating or upgrading"):
            pg.upgrade(postgres_dsn, wait=0.2)
    assert pg.status(postgres_dsn)["schema"] == 3  # both refusals left version 3 intact
    assert pg.upgrade(postgres_dsn, lock_timeout=5) == {"from": 3, "to": 4, "changed": True}


def test_pg_stopped_server_raises_remote_unavailable(postgres_server, postgres_dsn):
    from memolab.errors import RemoteUnavailable
    from memolab.team.pg import PgIndex, status

    ix = PgIndex(postgres_dsn)
    ix.publish(key(1), fields(1), {})
    # a restart while the connection is idle costs nothing: the stale connection is replaced
    postgres_server.stop()
    postgres_server.start()
    assert ix.lookup(key(1)) is not None
    postgres_server.stop()
    try:
        for call in (lambda: ix.lookup(key(1)), lambda: ix.claim(key(2), "A", 60),
                     lambda: ix.publish_many([(key(3), fields(3), {})]), lambda: PgIndex(postgres_dsn)):
            with pytest.raises(RemoteUnavailable, match=r"team index 127\.0\.0\.1:\d+/\w+ unreachable"):
                call()
        st = status(postgres_dsn)
        assert not st["reachable"] and "unreachable" in st["message"]
    finally:
        postgres_server.start()
    assert ix.lookup(key(1)) is not None  # back: reconnected
    ix.close()


def test_pg_silent_server_times_out(monkeypatch):
    """A server that accepts and never answers: connecting gives up after the timeout."""
    from memolab.errors import RemoteUnavailable
    from memolab.team.pg import PgIndex

    monkeypatch.setenv("MEMOLAB_REMOTE_TIMEOUT", "1")  # libpq's floor: 2 s
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        held = []
        t = threading.Thread(target=lambda: held.append(s.accept()), daemon=True)
        t.start()
        with pytest.raises(RemoteUnavailable, match="unreachable"):
            PgIndex(f"postgresql://nobody@127.0.0.1:{port}/db")
        for conn, _ in held:
            conn.close()


def test_pg_logs_bundles_are_referenced(postgres_dsn):
    from memolab.team.pg import PgIndex

    with PgIndex(postgres_dsn) as ix:
        ix.publish(key(1), fields(1, inline=True, logs="1" * 64), {})
        ix.publish(key(2), fields(2, logs="2" * 64, uploaded_by="ann@gpu1"), {})
        # a bundle inline in its row names no blob (nor does a logs value that is neither)
        ix.publish(key(3), fields(3, inline=True, logs="z:" + "QUJD" * 50), {})
        ix.publish(key(4), fields(4, inline=True, logs="../" + "4" * 61), {})
        assert ix.referenced_digests() == {"1" * 64, "2" * 64, f"{2:064x}"}
        assert ix.lookup(key(3))["logs"] == "z:" + "QUJD" * 50  # verbatim
        row = ix.lookup(key(2))
        assert row["logs"] == "2" * 64 and row["uploaded_by"] == "ann@gpu1"
        assert ix.lookup(key(1))["uploaded_by"]  # who published it, by default


def test_pg_forked_child_gets_its_own_connection(postgres_dsn):
    """A fork (multiprocessing, a Dask worker) must not use nor close the parent's session."""
    import gc

    from memolab.team.pg import PgIndex

    ix = PgIndex(postgres_dsn)
    ix.publish(key(1), fields(1), {})
    session = ix.conn().info.backend_pid
    pid = os.fork()
    if pid == 0:  # the child: its own connection; dropping the inherited one must not end the parent's
        code = 1
        try:
            ok = ix.lookup(key(1)) is not None and ix.claim(key(2), "child", 60)[0] == "owner"
            del ix
            gc.collect()
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, st = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(st) == 0
    # the parent's session is alive and still its own (asked directly: no reconnection to hide a loss)
    assert ix.conn().execute("SELECT pg_backend_pid()").fetchone()[0] == session
    assert ix.lookup(key(1)) is not None and ix.claim(key(2), "parent", 60)[0] == "wait"
    ix.close()


def test_pg_bad_dsn_is_a_configuration_error():
    from memolab.errors import StoreConfigError
    from memolab.team.pg import PgIndex

    with pytest.raises(StoreConfigError, match="not a valid PostgreSQL URL"):
        PgIndex("postgresql://[nonsense")


def test_pg_a_role_that_may_not_create_the_schema_is_told_what_to_do(postgres_dsn):
    import psycopg

    from memolab.team.pg import PgIndex, TeamSchemaError

    with psycopg.connect(postgres_dsn, autocommit=True) as c:
        c.execute("DROP ROLE IF EXISTS memolab_reader")
        c.execute("CREATE ROLE memolab_reader LOGIN")
        c.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        with pytest.raises(TeamSchemaError, match="may not create it: run `memolab remote upgrade`"):
            PgIndex(postgres_dsn.replace("postgres@", "memolab_reader@"))
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as c:
            c.execute("DROP ROLE memolab_reader")


def test_pg_leases_use_the_database_clock(postgres_dsn, monkeypatch):
    """Machines' clocks differ: a client an hour ahead must not take over a live lease
    (nor one an hour behind keep a dead one alive): heartbeats are the server's time."""
    from memolab.team.pg import PgIndex

    with PgIndex(postgres_dsn) as ix:
        assert ix.claim(key(1), ELSEWHERE, ttl=60)[0] == "owner"
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600)
        assert ix.claim(key(1), "B", ttl=60)[0] == "wait"
        assert ix.live_leases(60) == 1
        monkeypatch.setattr(time, "time", lambda: real() - 3600)
        ix.claim(key(2), ELSEWHERE, ttl=0.1)
        monkeypatch.undo()
        time.sleep(0.3)
        assert ix.claim(key(2), "B", ttl=0.1)[0] == "owner"


def test_pg_sigkilled_holder_on_another_machine_is_taken_over_after_its_ttl(postgres_dsn, tmp_path):
    """A worker on "another machine" (its owner names another host: the process table
    here cannot speak for it) heart-beats its lease; SIGKILLed, its lease is taken
    over once the heartbeat is older than the TTL, not before."""
    from memolab.team.pg import PgIndex

    ttl = 1.0
    ready = tmp_path / "ready"
    body = f"""
    ix = open_index(sys.argv[1])
    me = "gpu-node-7:4242:999/1.abc"
    assert ix.claim({key(1)!r}, me, ttl={ttl})[0] == "owner"
    open({str(ready)!r}, "w").close()
    while True:
        ix.heartbeat([({key(1)!r}, me)])
        time.sleep(0.05)
    """
    script = tmp_path / "worker.py"
    script.write_text("import sys, time\n" + OPEN + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, str(script), postgres_dsn], env=env)
    with PgIndex(postgres_dsn) as ix:
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                assert p.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            time.sleep(ttl * 1.5)
            assert ix.claim(key(1), "B", ttl=ttl)[0] == "wait"  # older than the ttl, but heart-beaten
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        time.sleep(ttl * 1.5)
        assert ix.claim(key(1), "B", ttl=ttl)[0] == "owner"


# -- accepted code changes (store/accepts.py): the same operations on both indexes ----------------
ACCEPT = {"fn": "f", "schema": "h3", "new_code": "code-new", "old_code": "code-old", "time": 1000.0,
          "user_name": "alice", "host": "box", "deps_before": "{}", "deps_after": "{}", "diffs": "{}",
          "signature": None}


def test_accepts_are_recorded_listed_and_taken_back(index):
    assert index.accepts("f") == []
    i = index.add_accept(ACCEPT)
    j = index.add_accept({**ACCEPT, "new_code": "code-newer", "old_code": "code-new", "time": 2000.0})
    k = index.add_accept({**ACCEPT, "fn": "g"})
    got = index.accepts("f", "h3")
    assert [a["id"] for a in got] == [i, j] and got[0]["user_name"] == "alice" and got[0]["time"] == 1000.0
    assert [a["id"] for a in index.accepts()] == [i, j, k] and index.accepts("f", "h2") == []
    assert index.undo_accept(i, when=3000.0, by="bob@box") is True
    assert index.undo_accept(i, by="bob@box") is False  # once
    assert [a["id"] for a in index.accepts("f")] == [j]
    gone = index.accepts("f", active=False)
    assert [(a["id"], a["undone"], a["undone_by"]) for a in gone] == [(i, 3000.0, "bob@box"), (j, None, None)]
    assert [a["id"] for a in index.accepts(ids=[j, k])] == [j, k]
