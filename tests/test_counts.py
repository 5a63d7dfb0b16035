"""The per-function counts kept by triggers (``tracking/counts.py``) equal a count of the rows,
whatever writes them, and a store made before them gains them or is read as before."""
from __future__ import annotations

import random
import sqlite3
import time

import pytest

from memolab.store.schema import DDL, LINEAGE_TRIGGERS, _split
from memolab.tracking import counts, schema


def _index() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.executescript(DDL.split("-- indexes --")[0])
    c.executescript(DDL.split("-- indexes --")[1])
    for stmt in _split(LINEAGE_TRIGGERS):
        c.execute(stmt)
    return c


@pytest.mark.parametrize("kept_by", ["armed connection", "older memolab's triggers in the file"])
def test_kept_counts_follow_every_writer(kept_by, monkeypatch):
    """Random writes as memolab's writers make them (a call's ``INSERT OR REPLACE`` of a key stored
    before, a run started then finished naming its evaluation, hits flushed, gc and clear deleting
    evaluations, retention deleting runs, a run moved to another script) and as a team pull or an
    import makes them (runs inserted naming an evaluation, an evaluation replaced by id): after
    every batch the kept counts are a recount's, and the kept run-id digits tell every run apart.
    Kept by this connection's ``TEMP`` triggers, or by an older memolab's in the file (another
    process had the store open at the writable open: they stay, and the ``TEMP`` ones stand down)."""
    c = _index()
    if kept_by != "armed connection":
        from memolab.store import walpeers
        from test_schema_parse import older_memolab_install

        older_memolab_install(c)
        monkeypatch.setattr(walpeers, "others_connected", lambda path, locks="": True)
    schema.ensure(c)
    schema.arm(c)  # (as a memolab connection does before it writes: store.arming)
    assert counts.available(c)
    in_file = {n for (n,) in c.execute("SELECT name FROM main.sqlite_master WHERE type='trigger'")}
    assert (set(counts._NAMES) <= in_file) == (kept_by != "armed connection")
    assert {n for (n,) in c.execute("SELECT name FROM temp.sqlite_master WHERE type='trigger'")} >= set(counts._NAMES)
    rnd = random.Random(52)

    def evaluation(fn: str, args: str, id_: int | None = None) -> int:
        c.execute("INSERT OR REPLACE INTO evaluations(id, fn, code, args, schema, status, size, duration, hits, finished) "
                  "VALUES (?,?,?,?,?,?,?,?,?,?)", (id_, fn, "c", args, "s", "done", rnd.randint(0, 100), rnd.random(),
                                                   rnd.randint(0, 5), time.time()))
        return int(c.execute("SELECT id FROM evaluations WHERE fn=? AND args=?", (fn, args)).fetchone()[0])

    def pick(sql: str) -> int | None:
        row = c.execute(sql + " ORDER BY random() LIMIT 1").fetchone()
        return row[0] if row else None

    for step in range(600):
        op, fn = rnd.random(), rnd.choice(["a", "b", "__main__:train"])
        script = rnd.choice([None, "/p/x.py", "/p/y.py"])
        if op < 0.25:  # a computed call: its evaluation, and its run naming it
            e = evaluation(fn, str(rnd.randint(0, 40)))
            rid = rnd.choice([rnd.getrandbits(52), rnd.randint(1, 10**6), rnd.randint(10**11, 10**13)])
            c.execute("INSERT OR IGNORE INTO runs(id, fn, started, status, eval_id, script) VALUES (?,?,?,?,?,?)",
                      (rid, fn, time.time(), "done", e, script))
        elif op < 0.4:  # a run starts, then ends naming an evaluation (tracking/sink.py)
            c.execute("INSERT OR IGNORE INTO runs(id, fn, started, status, script) VALUES (?,?,?,?,?)",
                      (rnd.getrandbits(52), fn, time.time(), "running", script))
            r, e = pick("SELECT id FROM runs WHERE status='running'"), pick("SELECT id FROM evaluations")
            if r is not None:
                c.execute("UPDATE runs SET status='done', eval_id=COALESCE(?, eval_id) WHERE id=?", (e, r))
        elif op < 0.5:
            c.execute("DELETE FROM evaluations WHERE id IN (SELECT id FROM evaluations ORDER BY random() LIMIT 3)")
        elif op < 0.55:
            c.execute("DELETE FROM runs WHERE id IN (SELECT id FROM runs ORDER BY random() LIMIT 3)")
        elif op < 0.65:
            c.execute("UPDATE evaluations SET hits=hits+2 WHERE id IN (SELECT id FROM evaluations ORDER BY random() LIMIT 4)")
        elif op < 0.66:
            c.execute("DELETE FROM evaluations WHERE fn=?", (fn,))
        elif op < 0.75:  # replaced by its id (a row adopted again), under another key
            e = pick("SELECT id FROM evaluations")
            if e is not None:
                evaluation(fn, f"again{step}", e)
        elif op < 0.8:
            c.execute("UPDATE runs SET script=? WHERE id=?", (script, pick("SELECT id FROM runs")))
        else:  # the same key computed again
            evaluation(fn, str(rnd.randint(0, 40)))
        if step % 50 == 0:
            assert counts.check(c) == [], step
    assert c.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 50
    assert c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] > 10
    # drift (something that bypassed the triggers) is told and repaired by a recount
    c.execute("INSERT OR REPLACE INTO evaluation_counts(fn, n, hits, size, duration) VALUES ('a', 7, 0, 0, 0)")
    assert counts.check(c) and counts.check(c, repair=True) and counts.check(c) == []


def test_the_digits_kept_are_the_fewest_that_tell_runs_apart():
    """Without deletions, the kept digits are exactly what sorting every id gives (ids of many
    lengths, sharing long starts across lengths)."""
    c = _index()
    schema.ensure(c)
    schema.arm(c)
    rnd = random.Random(7)
    ids = {1234567, 12345678901, 123456789012345, 9, 99, 99999999, 4503599627370495}
    ids |= {rnd.getrandbits(52) for _ in range(300)} | {rnd.randint(1, 10**8) for _ in range(300)}
    for i in ids:
        c.execute("INSERT INTO runs(id, fn, started, status) VALUES (?, 'f', 0, 'done')", (i,))
        assert counts.digits(c) == counts.shared_digits(c) + 1


def test_a_store_made_before_the_counts_gains_them_once_and_reads_the_same(tmp_path):
    """An index without the counts (every store before them) is counted as before; opened to write
    by a memolab with them, it gains them, filled from its rows, in one transaction."""
    c = _index()
    c.execute("CREATE TABLE runs(id INTEGER PRIMARY KEY, fn TEXT NOT NULL, started REAL NOT NULL, status TEXT NOT NULL, "
              "eval_id INTEGER, script TEXT)")
    for i in range(30):
        c.execute("INSERT INTO evaluations(fn, code, args, schema, status, size, hits) VALUES ('f','c',?,'s','done',3,1)",
                  (str(i),))
        if i % 3:
            c.execute("INSERT INTO runs(id, fn, started, status, eval_id, script) VALUES (?, 'f', ?, 'done', ?, ?)",
                      (10**12 + i, i, i + 1, "/p/x.py" if i % 2 else None))
    assert not counts.available(c) and counts.runs(c, "f") is None and counts.digits(c) is None
    schema.ensure(c)
    assert counts.available(c) and counts.check(c) == []
    assert counts.runs(c, "f") == 20 and counts.unrun(c, "f") == 10 and counts.runs(c, "f", "/p/x.py") == 10
    assert counts.functions(c) == {"f": {"evaluations": 30, "hits": 30, "runs": 20, "unrun": 10}}
    assert not counts.install(c)  # once
