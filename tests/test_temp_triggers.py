"""The kept counts' and argument index's triggers are ``TEMP`` triggers of the connections that write
(``tracking/temptriggers.py``, ``store/arming.py``): a connection that only reads (a fresh process's
first hit) parses none; every write is counted once, whichever memolab wrote it (an older one keeps
its triggers in the file, which the ``TEMP`` ones leave to count); a write that bypasses arming is
refused; an older memolab's triggers leave the file only when no other process has it open."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from memolab import memo
from memolab.store import get_store, walpeers
from memolab.tracking import argindex, counts, schema, temptriggers
from test_schema_parse import older_memolab_install


def _in_file(c) -> set[str]:
    return {n for (n,) in c.execute("SELECT name FROM main.sqlite_master WHERE type='trigger'")}


def _temp(c) -> set[str]:
    return {n for (n,) in c.execute("SELECT name FROM temp.sqlite_master WHERE type='trigger'")}


LINEAGE = {"lineage_replace", "lineage_add", "lineage_drop"}


def _script(tmp_path, body: str) -> str:
    p = tmp_path / "job.py"
    p.write_text(textwrap.dedent("""
        import os, sqlite3, sys
        import memolab
        from memolab import memo
        from memolab.store import get_store
        memolab.configure(store=sys.argv[1])

        @memo
        def f(x):
            return x + 1
    """) + textwrap.dedent(body))
    return str(p)


def _run(tmp_path, script: str, store) -> str:
    cp = subprocess.run([sys.executable, script, str(store)], capture_output=True, text=True, timeout=120,
                        cwd=tmp_path, env={**os.environ, "MEMOLAB_VERBOSE": "0"})
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.strip()


def test_a_hit_only_process_parses_no_count_trigger_and_its_flushed_hits_are_counted(tmp_path):
    """Fresh processes: a miss, then hits only. The file holds the lineage triggers alone; the hit's
    connection made no trigger (it wrote nothing before the hit returned); its hit counts, written
    later on the same connection, armed it for that write alone (one trigger, the others' writes
    still refused); the hits are in the kept counts, a recount's."""
    store = tmp_path / "store"
    job = _script(tmp_path, """
        import json
        f(1)
        c = get_store().index.conn()
        temp = lambda: sorted(n for (n,) in c.execute("SELECT name FROM temp.sqlite_master WHERE type='trigger'"))
        first = temp()
        get_store().flush_hits()
        try:
            c.execute("DELETE FROM runs WHERE id = -1")
            refused = False
        except sqlite3.DatabaseError as e:
            refused = "not authorized" in str(e)
        print(json.dumps([first, temp(), refused]))
    """)
    miss = json.loads(_run(tmp_path, job, store))
    assert set(miss[0]) == set(counts._NAMES) | set(argindex._NAMES)  # the miss: its connection wrote, armed first
    for _ in range(3):  # a hit: nothing made, nothing parsed; then its hit count's trigger alone
        assert json.loads(_run(tmp_path, job, store)) == [[], ["counts_evaluation_hits"], True]
    with sqlite3.connect(store / "index.sqlite") as c:
        assert _in_file(c) == LINEAGE
        assert c.execute("SELECT hits FROM evaluations").fetchall() == [(3,)]
        assert c.execute("SELECT n, hits FROM evaluation_counts").fetchall() == [(1, 3)]
        assert counts.check(c) == [] and argindex.check(c) == []


def test_a_write_that_bypasses_arming_is_refused_and_changes_nothing(tmp_store):
    @memo
    def g(x):
        return x * 2

    g(1), g(2)
    index = get_store().index
    index.close()  # this thread's next connection is a new one, not armed
    c = index.conn()
    assert _temp(c) == set()
    for sql in ("DELETE FROM evaluations", "UPDATE evaluations SET hits = 9", "DELETE FROM runs",
                "INSERT INTO run_args(fn, name, value, started, run) VALUES ('f', 'x', 1, 0, 1)"):
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            c.execute(sql)
    assert c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 2
    c.execute("INSERT INTO misses(fn, time, explanation) VALUES ('f', 0, 'x')")  # (a table no trigger follows)
    with index.write() as w:  # armed first
        w.execute("UPDATE evaluations SET hits = hits + 4")
    assert _temp(c) >= set(counts._NAMES) | set(argindex._NAMES)
    assert c.execute("SELECT SUM(hits) FROM evaluation_counts").fetchone()[0] == 8
    assert counts.check(c) == []


def test_a_connection_armed_before_the_counts_were_filled_counts_from_the_fill_on(tmp_path):
    """Connection A is armed on a store whose tables were never filled (no marker: its triggers stand
    down) and writes; B's writable open fills the tables from the rows and writes the marker; A's
    later writes are counted, once."""
    path = str(tmp_path / "index.sqlite")
    from memolab.store.schema import DDL, LINEAGE_TRIGGERS, _split

    a = sqlite3.connect(path, isolation_level=None)
    a.execute("PRAGMA journal_mode=WAL")
    a.executescript(DDL)
    for stmt in _split(LINEAGE_TRIGGERS):
        a.execute(stmt)
    assert schema.arm(a) and not counts.available(a)
    a.execute("INSERT INTO evaluations(fn, code, args, schema, status, hits, size) VALUES ('f','c','1','s','done',1,5)")
    a.execute("INSERT INTO runs(id, fn, started, status, eval_id) VALUES (11, 'f', 1, 'done', 1)")
    assert a.execute("SELECT COUNT(*) FROM evaluation_counts").fetchone()[0] == 0  # not kept yet: nothing counted
    b = sqlite3.connect(path, isolation_level=None)
    schema.ensure(b)
    assert counts.available(a) and argindex.available(a)
    a.execute("INSERT INTO evaluations(fn, code, args, schema, status, hits, size) VALUES ('f','c','2','s','done',2,7)")
    a.execute("INSERT INTO runs(id, fn, started, status, eval_id) VALUES (12, 'f', 2, 'done', 2)")
    a.execute("DELETE FROM runs WHERE id = 11")
    assert a.execute("SELECT n, hits, size FROM evaluation_counts").fetchall() == [(2, 3, 12)]
    assert counts.check(a) == [] and counts.check(b) == []
    b.execute("BEGIN IMMEDIATE")
    argindex.drain(b)  # (the first reader's fill of the argument index: every run)
    b.execute("COMMIT")
    a.execute("INSERT INTO runs(id, fn, started, status, hparams) VALUES (13, 'f', 3, 'done', '{\"lr\": 1}')")
    assert a.execute("SELECT run FROM args_pending").fetchall() == [(13,)]
    assert argindex.check(a) == []
    a.close(), b.close()


def _older_store(tmp_path):
    """A store as 0.4.2 left it: a result stored, the counts' and argument index's triggers in the
    file (long forms), no markers."""
    store = tmp_path / "store"
    _run(tmp_path, _script(tmp_path, "f(1)\n"), store)
    path = store / "index.sqlite"
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("DELETE FROM meta WHERE key LIKE 'kept:%'")
    older_memolab_install(c)
    assert counts.check(c) == []
    c.close()
    return store, str(path)


def test_an_older_memolabs_triggers_stay_in_the_file_while_another_process_has_it_open(tmp_path):
    store, path = _older_store(tmp_path)
    # another process holds the file open (as an older memolab's would), and writes through its triggers
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys
        c = sqlite3.connect({path!r}, isolation_level=None)
        c.execute("SELECT COUNT(*) FROM evaluations").fetchone()
        print("open", flush=True)
        sys.stdin.readline()
        c.execute("INSERT INTO runs(id, fn, started, status) VALUES (424242, '__main__:f', 9, 'done')")
        c.execute("UPDATE evaluations SET hits = hits + 5")
        print("wrote", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "open"
        assert walpeers.others_connected(path)
        count = "SELECT COUNT(*) FROM main.sqlite_master WHERE type='trigger'"
        out = _run(tmp_path, _script(tmp_path, f"f(2)\nprint(get_store().index.conn().execute({count!r}).fetchone()[0])\n"),
                   store)
        assert int(out) == 3 + len(counts._NAMES) + len(argindex._NAMES)  # kept in the file, made short
        c = sqlite3.connect(path, isolation_level=None)
        assert not temptriggers.marked(c, counts.MARKER) and len(c.execute(
            "SELECT sql FROM sqlite_master WHERE name='counts_run_digits'").fetchone()[0]) < 2100
        assert counts.check(c) == []
        other.stdin.write("\n"), other.stdin.flush()
        assert other.stdout.readline().strip() == "wrote"
        assert counts.check(c) == []  # the other process's writes, counted by the triggers in the file
        c.close()
    finally:
        other.stdin.close()
        other.wait(timeout=60)
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("SELECT COUNT(*) FROM evaluations").fetchone()
    assert not walpeers.others_connected(path)  # (this process's connection alone)
    c.close()
    _run(tmp_path, _script(tmp_path, "f(3)\n"), store)  # alone now: moved
    c = sqlite3.connect(path, isolation_level=None)
    assert _in_file(c) == LINEAGE and temptriggers.marked(c, counts.MARKER)
    assert c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 3
    assert counts.check(c) == [] and argindex.check(c) == []
    c.close()


def test_the_lock_table_is_read_for_other_holders_of_the_dms_byte(tmp_path):
    path = str(tmp_path / "x.sqlite")
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t(a)")
    assert not walpeers.others_connected(path)  # this process's own lock is not another's
    assert not walpeers.others_connected("")  # an in-memory database: the caller's own
    st = os.stat(path + "-shm")
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    table = tmp_path / "locks"

    def says(*lines: str) -> bool:
        table.write_text("".join(line + "\n" for line in lines))
        return walpeers.others_connected(path, locks=str(table))

    me = os.getpid()
    assert not says(f"1: POSIX  ADVISORY  READ {me} {where} 128 128")
    assert says(f"1: POSIX  ADVISORY  READ {me} {where} 128 128", f"2: POSIX  ADVISORY  READ 1 {where} 128 128")
    assert says(f"2: POSIX  ADVISORY  READ 0 {where} 120 EOF")  # (a holder in another pid namespace; a range to the end)
    assert says(f"2: OFDLCK ADVISORY  READ -1 {where} 0 200")
    assert not says(f"2: POSIX  ADVISORY  READ 1 {where} 120 127")  # the WAL locks, not the DMS byte
    assert not says(f"2: POSIX  ADVISORY  READ 1 00:00:{st.st_ino + 1} 128 128")  # another file
    assert says(f"2: POSIX  ADVISORY  READ 1 {where} x y")  # not as expected: perhaps
    assert walpeers.others_connected(path, locks=str(tmp_path / "no-such-table"))  # unreadable: perhaps
    c.close()
