"""The store's hot paths: what a hit and a miss cost, counted in SQLite statements.

No timing here (the machine is shared): a hit is pinned to one point query and
zero writes, every statement of a miss to an index, small results to their
index row. Figures are in benchmarks/store_scaling.py and hit_overhead.py.
"""
from __future__ import annotations

import json
import os
import sqlite3
import warnings

import numpy as np
import pytest

import memolab
from conftest import Calls
from memolab import memo
from memolab.calls.explain import last_miss
from memolab.store import Store, get_store
from memolab.store.local import INLINE_MAX
from memolab.store.sqlite import SCHEMA_VERSION

KEY = ("mod:f", "code", "args", "schema")
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "BEGIN", "COMMIT", "CREATE", "ALTER", "DROP")


def _fields():
    return {"started": 1.0, "finished": 2.0, "duration": 1.0, "snapshot": json.dumps({"result_digest": None})}


def _traced(store: Store) -> list:
    stmts: list = []
    store.index.conn().set_trace_callback(stmts.append)
    return stmts


@pytest.mark.parametrize("value", [{"small": [1, 2, 3]}, np.arange(INLINE_MAX, dtype=np.float64)],
                         ids=["inline", "blob"])
def test_a_hit_from_the_store_is_one_point_query_and_writes_nothing(tmp_path, value):
    writer = Store(tmp_path / "s")
    writer.acquire(KEY, writer.owner_id())
    writer.save(KEY, writer.owner_id(), value, _fields(), {})
    reader = Store(tmp_path / "s")  # another process, in effect: nothing of this key in its memory
    stmts = _traced(reader)
    reader.index.conn().execute("PRAGMA query_only=ON")  # a write would raise: the disk may be read-only or full
    stmts.clear()
    state, row = reader.acquire(KEY, reader.owner_id())
    assert state == "hit"
    got = reader.load(KEY, row)
    np.testing.assert_equal(got, value)
    reader.count_hit(row["id"])
    assert not [s for s in stmts if s.lstrip().upper().startswith(WRITES)], stmts
    selects = [s for s in stmts if "FROM evaluations" in s]
    assert len(selects) == 1, stmts  # the lookup; a blob result adds only its stamp reads
    inline = row["inline"] is not None
    assert inline == (value.__class__ is dict)
    assert len(stmts) == (1 if inline else 2)  # + the stamp read of the array's blob (a payload is always re-hashed)
    # the hit is counted later, off the hit path (here: explicitly)
    reader.index.conn().execute("PRAGMA query_only=OFF")
    reader.flush_hits()
    assert writer.index.evaluations()[0]["hits"] == 1


def test_small_results_live_in_their_row_and_large_ones_in_blobs(tmp_store):
    calls = Calls()

    @memo
    def make(n):
        calls.append(n)
        return np.arange(n, dtype=np.uint8)

    make(100)
    make(INLINE_MAX * 2)
    store = get_store()
    rows = {r["size"] > INLINE_MAX: r for r in store.index.evaluations()}
    inline_ids = {i for (i,) in store.index.conn().execute("SELECT id FROM evaluations WHERE inline IS NOT NULL")}
    assert rows[False]["id"] in inline_ids and rows[True]["id"] not in inline_ids
    refs = store.index.referenced_blobs()
    assert rows[False]["payload"] not in refs  # an inline row names no file
    assert sum(1 for _ in store.blobs) == 2  # the large result's payload and its buffer
    store.forget()
    assert make(100).tolist() == list(range(100)) and len(calls) == 2


def test_out_of_band_buffers_inline_come_back_read_only(tmp_store, monkeypatch):
    """With a threshold above pickling's out-of-band minimum (64 KiB), an array's
    buffer is stored in the row too, and loads as read-only as a mapped blob."""
    monkeypatch.setattr(memolab.store.local, "INLINE_MAX", 1 << 20)
    calls = Calls()

    @memo
    def make(n):
        calls.append(n)
        return {"a": np.arange(n, dtype=np.float64), "b": np.ones(n)}

    make(20_000)
    store = get_store()
    (buffers, inline), = store.index.conn().execute("SELECT buffers, inline FROM evaluations").fetchall()
    assert len(json.loads(buffers)) == 2 and inline is not None and not list(store.blobs)
    store.forget()
    got = make(20_000)
    assert len(calls) == 1 and got["a"][-1] == 19_999 and got["b"].sum() == 20_000
    assert not got["a"].flags.writeable


def test_damaged_inline_result_is_a_miss_recomputed_and_repaired(tmp_store):
    calls = Calls()

    @memo
    def f(x):
        calls.append(x)
        return {"x": x, "pad": "p" * 100}

    f(1)
    store = get_store()
    (eval_id, blob), = store.index.conn().execute("SELECT id, inline FROM evaluations").fetchall()
    bad = bytearray(blob)
    bad[len(bad) // 2] ^= 0xFF
    with store.index.write() as c:
        c.execute("UPDATE evaluations SET inline=? WHERE id=?", (bytes(bad), eval_id))
    store.forget()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert f(1) == {"x": 1, "pad": "p" * 100}
    assert len(calls) == 2 and any("recomputing" in str(x.message) for x in w)
    store.forget()
    assert f(1)["x"] == 1 and len(calls) == 2  # repaired: a hit again


def test_every_statement_of_a_miss_uses_an_index(tmp_store):
    """The miss explanation (at the miss or when asked) looks for the nearest
    stored evaluation through indexed columns: its cost does not grow with the store."""
    @memo
    def g(x, y=0):
        return x + y

    for i in range(30):
        g(i)
    store = get_store()
    stmts = _traced(store)
    g(1000)        # new arguments
    g(5, y=1)      # a changed argument
    assert "new arguments: y 0 -> 1" in last_miss(store, g.symbol)["reasons"]  # explained when asked
    store.index.snapshot_of_code(g.symbol, *g.key(1)[1::2])  # the new code's deps, for a deferred miss
    g.fresh(3)     # forced
    store.index.conn().set_trace_callback(None)
    checked = 0
    for s in stmts:
        if ("evaluations" in s or "misses" in s) and s.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
            plan = " | ".join(r[3] for r in store.index.conn().execute("EXPLAIN QUERY PLAN " + s))
            assert "SCAN evaluations" not in plan and "SCAN misses" not in plan, (s, plan)
            checked += 1
    assert checked >= 9
    assert "new arguments" in str(g.explain(1001))


def _downgrade_to_schema_1(path):
    """Make ``path`` what memolab wrote before schema 2: no inline column, no
    new indexes, the version in ``meta`` only."""
    con = sqlite3.connect(path)
    con.executescript("""
        DROP INDEX evaluations_args; DROP INDEX evaluations_code; DROP INDEX evaluations_summary;
        DROP INDEX evaluations_blobs; DROP INDEX evaluations_unused;
        CREATE INDEX evaluations_fn ON evaluations(fn, finished);
        ALTER TABLE evaluations DROP COLUMN inline;
        UPDATE meta SET value='1' WHERE key='schema_version';
        PRAGMA user_version=0;
    """)
    con.close()


def test_a_schema_1_store_is_migrated_in_place_and_keeps_its_results(tmp_path, blob_results, monkeypatch):
    root = tmp_path / "s"
    s = Store(root)
    s.acquire(KEY, "w")
    s.save(KEY, "w", {"old": True}, _fields(), {})
    del s
    _downgrade_to_schema_1(root / "index.sqlite")
    monkeypatch.setattr(memolab.store.local, "INLINE_MAX", 32 << 10)
    with pytest.warns(memolab.MemolabWarning, match="from schema 1 to"):  # said once, as it is done
        s = Store(root)
    assert s.index.conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert s.index.conn().execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    state, row = s.acquire(KEY, "r")
    assert state == "hit" and s.load(KEY, row) == {"old": True}
    key2 = KEY[:2] + ("args2", KEY[3])
    s.acquire(key2, "w")
    s.save(key2, "w", {"new": True}, _fields(), {})
    assert s.index.lookup(key2)["inline"] is not None
    indexes = {n for (n,) in s.index.conn().execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"evaluations_summary", "evaluations_args", "evaluations_code", "evaluations_blobs"} <= indexes
    assert "evaluations_fn" not in indexes
    Store(root)  # a second opener finds nothing left to do


def test_a_store_of_a_newer_schema_is_refused(tmp_path):
    s = Store(tmp_path / "s")
    s.index.conn().execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(Exception, match="newer memolab"):
        Store(tmp_path / "s")


def test_hit_counts_ride_along_with_the_next_write(tmp_path):
    s = Store(tmp_path / "s")
    s.acquire(KEY, "w")
    first = s.save(KEY, "w", 1, _fields(), {})
    s.count_hit(first)
    s.count_hit(first)
    key2 = KEY[:2] + ("args2", KEY[3])
    s.acquire(key2, "w")
    s.save(key2, "w", 2, _fields(), {})  # no flush_hits: the record's transaction carries them
    assert {r["id"]: r["hits"] for r in s.index.evaluations()}[first] == 2


def test_hit_counts_of_a_process_are_written_when_it_exits(project):
    project.write("job.py", """
        from memolab import memo

        @memo
        def f(x):
            return x * 2

        f(1); f(1); f(1)
    """)
    project.run("job.py")
    project.run("job.py")
    con = sqlite3.connect(project.store / "index.sqlite")
    assert con.execute("SELECT hits FROM evaluations").fetchone()[0] == 5


def test_gc_plan_counts_a_shared_blob_once_and_inline_bytes_per_row(tmp_path, monkeypatch):
    s = Store(tmp_path / "s")
    big = np.ones(100_000)  # 800 kB, one buffer blob shared by two results

    def put(args, value, finished, inline_max):
        monkeypatch.setattr(memolab.store.local, "INLINE_MAX", inline_max)
        key = KEY[:2] + (args, KEY[3])
        s.acquire(key, "w")
        return s.save(key, "w", value, dict(_fields(), finished=finished), {})

    a = put("a", {"v": big, "tag": "a"}, 1.0, 32 << 10)
    b = put("b", {"v": big, "tag": "b"}, 2.0, 32 << 10)
    c = put("c", "x" * 1000, 3.0, 32 << 10)
    size = {r["id"]: r["size"] for r in s.index.evaluations()}
    assert [r["id"] for r in s.gc_plan()] == []
    assert [r["id"] for r in s.gc_plan(older_than=10, now=11.5)] == [a]
    pb = size[b] - 800_000  # b's payload
    # dropping a frees only its payload: the shared buffer stays while b uses it
    assert [r["id"] for r in s.gc_plan(max_size=800_000 + pb + size[c])] == [a]
    assert [r["id"] for r in s.gc_plan(max_size=800_000 + pb + size[c] - 1)] == [a, b]
    assert [r["id"] for r in s.gc_plan(max_size=size[c])] == [a, b]
    assert [r["id"] for r in s.gc_plan(max_size=size[c] - 1)] == [a, b, c]
    s.index.mark_corrupt(c, "test")
    assert [r["id"] for r in s.gc_plan()] == [c]
    dead = s.unreferenced_blobs(dropping=[a, b])
    assert len(dead) == 3 and sum(n for _, n in dead) >= 800_000  # two payloads and the shared buffer


def _writes(stmts: list) -> list:
    return [s.split()[0].upper() for s in stmts if s.lstrip().upper().startswith(("BEGIN", "COMMIT"))]


@pytest.mark.parametrize("quick", [False, True], ids=["leased", "lease-free"])
def test_a_miss_is_two_write_transactions_with_its_run_and_explanation(tmp_store, quick):
    """Lease + miss explanation, then result + run: two commits, and no read of
    a dead row or an unloadable verdict when the key has no row at all. A quick
    function's miss takes no lease: one commit, the miss recorded with the result."""
    @memo
    def f(x):
        return x + 1

    old = memolab.settings.config.settings().lease_free_below
    memolab.configure(lease_free_below=5.0 if quick else 0)  # (quick: under 5 s, not 1 ms: loaded machines)
    try:
        f(0)
        store = get_store()
        stmts = _traced(store)
        assert f(1) == 2
        store.index.conn().set_trace_callback(None)
    finally:
        memolab.configure(lease_free_below=old)
    assert _writes(stmts) == (["BEGIN", "COMMIT"] if quick else ["BEGIN", "COMMIT", "BEGIN", "COMMIT"]), stmts
    assert bool([s for s in stmts if "leases" in s]) is not quick, stmts
    assert not [s for s in stmts if "status!='done'" in s.replace(" ", "") or "status='unloadable'" in s], stmts
    con = store.index.conn()
    (eval_id,), = con.execute("SELECT id FROM evaluations WHERE args=?", (f.key(1)[2],)).fetchall()
    run = con.execute("SELECT status, eval_id, finished >= started, hparams FROM runs WHERE eval_id=?", (eval_id,)).fetchall()
    assert run == [("done", eval_id, 1, '{"x": 1}')]
    assert "new arguments: x 0 -> 1" in last_miss(store, f.symbol)["reasons"][0]
    assert con.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0


def test_a_run_that_logs_is_written_the_ordinary_way_with_its_logs(tmp_store):
    @memo
    def g(x):
        memolab.log.scalar("loss", 0.5, step=1)
        return x

    g(1)
    con = get_store().index.conn()
    (status, eval_id, run_id), = con.execute("SELECT status, eval_id, id FROM runs WHERE fn=?", (g.symbol,)).fetchall()
    assert status == "done" and eval_id is not None
    assert con.execute("SELECT value FROM scalars WHERE run=?", (run_id,)).fetchall() == [(0.5,)]


def test_a_miss_on_a_row_out_of_use_still_says_why(tmp_store):
    @memo
    def h(x):
        return x

    h(1)
    store = get_store()
    (eval_id,), = store.index.conn().execute("SELECT id FROM evaluations").fetchall()
    store.index.mark_corrupt(eval_id, "hand-damaged")
    store.forget()
    h(1)
    assert last_miss(store, h.symbol)["reasons"] == [f"stored evaluation #{eval_id} was not used: hand-damaged"]


def test_misses_are_trimmed_to_the_last_20_per_function(tmp_store):
    @memo
    def k(x):
        return x

    for i in range(100):
        k(i)
    n = get_store().index.conn().execute("SELECT COUNT(*) FROM misses WHERE fn=?", (k.symbol,)).fetchone()[0]
    assert 20 <= n <= 20 + 15


def test_environment_reads_on_the_hit_path_follow_every_change(monkeypatch):
    """The hit path reads the environment through ``config.environ_bytes`` (30 ns, not
    ``os.environ.get``'s 1 µs): it must still see every change made through ``os.environ``."""
    import os

    from memolab.settings.config import environ_bytes
    from memolab.store import signing

    monkeypatch.delenv("MEMOLAB_HMAC_KEY", raising=False)
    assert environ_bytes(b"MEMOLAB_HMAC_KEY") is None and signing.secret() is None
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "clé")
    assert signing.secret() == "clé".encode()  # the bytes os.environ.get(...).encode() gave
    os.environ["MEMOLAB_HMAC_KEY"] = "k2"
    assert signing.secret() == b"k2"
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "")
    assert signing.secret() is None  # empty counts as unset
    del os.environ["MEMOLAB_HMAC_KEY"]
    assert signing.secret() is None
    os.environ.update({"MEMOLAB_HMAC_KEY": "k3"})
    assert signing.secret() == b"k3"
    monkeypatch.delenv("MEMOLAB_HMAC_KEY")


def test_a_rider_that_raises_is_rolled_back_alone_and_the_result_recorded(tmp_path):
    """``Store.ride_along``: the rider runs in the result's transaction, in a savepoint:
    what it wrote before raising is undone, the result is recorded all the same."""
    st = Store(tmp_path / "s")
    st.index.conn().execute("CREATE TABLE rider_log(x)")

    def rider(c):
        c.execute("INSERT INTO rider_log VALUES (1)")
        raise RuntimeError("boom")

    st.acquire(KEY, st.owner_id())
    st.ride_along(rider)
    st.save(KEY, st.owner_id(), {"v": 1}, _fields(), {})
    st.ride_along(None)
    c = st.index.conn()
    assert not c.in_transaction
    assert c.execute("SELECT count(*) FROM rider_log").fetchone() == (0,)
    assert st.load(KEY, st.lookup(KEY)) == {"v": 1}

    st.ride_along(lambda c: c.execute("INSERT INTO rider_log VALUES (2)"))  # one that succeeds is kept
    key2 = KEY[:2] + ("args2",) + KEY[3:]
    st.acquire(key2, st.owner_id())
    st.save(key2, st.owner_id(), {"v": 2}, _fields(), {})
    st.ride_along(None)
    assert c.execute("SELECT x FROM rider_log").fetchall() == [(2,)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_connection(tmp_path):
    """The pid a hit compares against is cached (``config.pid``, no system call); a fork must
    still give the child its own SQLite connection, and the parent's must survive the child."""
    from memolab.settings import config

    calls = Calls()

    @memo(store=tmp_path / "s")
    def f(x):
        calls.append(x)
        return x + 1

    assert f(1) == 2
    parent_conn = f.store().index.conn()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = (config.pid() == os.getpid() and f.store().index.conn() is not parent_conn
                  and f(1) == 2 and f(2) == 3)  # a hit and a miss, on the child's connection
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert config.pid() == os.getpid() and f.store().index.conn() is parent_conn
    f.store().forget()
    assert f(1) == 2 and f(2) == 3  # the child's miss is stored; the parent's connection reads it
    assert calls.count(1) == 1 and calls.count(2) == 0


def test_a_hit_asks_the_system_for_no_process_id(tmp_path, monkeypatch):
    """``os.getpid`` is a system call; a hit compares the cached ``config.pid`` instead."""
    @memo(store=tmp_path / "s")
    def f(x):
        return x + 1

    assert f(1) == 2
    asked = []
    real = os.getpid
    monkeypatch.setattr(os, "getpid", lambda: asked.append(1) or real())
    for _ in range(3):
        f.store().forget()  # read from the store, not this process's copy
        assert f(1) == 2
    assert f(1) == 2  # and from memory
    assert asked == []
