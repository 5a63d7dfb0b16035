"""What every connection to a store parses before its first statement (issue 52 §2: a fresh
process's first hit): SQLite reads the whole schema, triggers included, on a connection's first
statement. The run-id digits trigger was 8.4 KB of unrolled seeks; its short form must keep
the same number after every write, replace the unrolled one on a writable open (in one
transaction), and leave an older memolab's view of the store (the triggers it looks for by name,
what they keep) as it was."""
from __future__ import annotations

import random
import sqlite3

from memolab.tracking import counts, schema
from test_counts import _index  # (an index with the schema's tables, indexes and lineage triggers)


def _digits_db(trigger: str) -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.execute("CREATE TABLE runs(id INTEGER PRIMARY KEY, fn TEXT)")
    c.execute("CREATE TABLE run_digits(n INTEGER NOT NULL)")
    c.execute("INSERT INTO run_digits(n) VALUES (1)")
    c.execute(trigger)
    return c


def _edge_ids(rnd: random.Random) -> int:
    base = rnd.choice([1, 9, 10, 11, 19, 99, 100, 101, 999, 1000, 10 ** 17, 10 ** 18 - 1, 10 ** 18,
                       2 ** 63 - 1, 2 ** 63 - 2, 922337203685477580, 92233720368547758])
    return min(2 ** 63 - 1, base + rnd.randrange(0, 3))


def _prefix_ids(rnd: random.Random) -> int:
    # ids sharing long starts with ids of other lengths (1234 and 12345678: four digits in common)
    start = str(rnd.choice([1, 12, 123, 1234, 99, 9, 10, 100, 9223372036854775807]))[:rnd.randrange(1, 20)]
    return min(2 ** 63 - 1, int(start + "".join(rnd.choice("0919") for _ in range(rnd.randrange(0, 4)))))


def test_the_short_digits_trigger_keeps_the_unrolled_ones_number_after_every_write():
    """Random ids of every length, ids that share long starts across lengths, the edges of each
    length and of the integer range; deletes between batches: after every insert both triggers
    keep the same number, which is at least the digits that tell every run apart."""
    short, unrolled = counts._digits_trigger(), counts.unrolled_digits_trigger()
    assert len(short) < 2100 < 8000 < len(unrolled)  # (1.9 KB against 8.4 KB)
    rnd = random.Random(52)
    compared = 0
    for trial in range(80):
        a, b = _digits_db(unrolled), _digits_db(short)
        draw = [lambda: rnd.randrange(1, 2 ** 63), lambda: rnd.randrange(1, 10 ** rnd.randrange(1, 19)),
                lambda: _prefix_ids(rnd), lambda: _edge_ids(rnd)][trial % 4]
        for _ in range(3):
            for _ in range(12):
                i = draw()
                for c in (a, b):
                    c.execute("INSERT OR IGNORE INTO runs(id) VALUES (?)", (i,))
                got = [c.execute("SELECT n FROM run_digits").fetchone()[0] for c in (a, b)]
                assert got[0] == got[1], (trial, i, got)
                compared += 1
            ids = [r[0] for r in a.execute("SELECT id FROM runs")]
            assert b.execute("SELECT n FROM run_digits").fetchone()[0] >= counts.digits_shared_by(ids) + 1
            for i in rnd.sample(ids, min(3, len(ids))):
                for c in (a, b):
                    c.execute("DELETE FROM runs WHERE id = ?", (i,))
    assert compared == 80 * 36




def _trigger_sql(c: sqlite3.Connection, name: str) -> str | None:
    row = c.execute("SELECT sql FROM sqlite_master WHERE type='trigger' AND name=?", (name,)).fetchone()
    return row[0] if row else None


def older_memolab_install(c: sqlite3.Connection, long: bool = True) -> None:
    """What an older memolab (0.4.2 with ``long``, else 0.4.3) does on a writable open of a store
    lacking its triggers in the file: the tables, a recount, and its triggers made in the file."""
    from memolab.tracking import argindex

    for stmt in (*schema._STATEMENTS, *counts.statements(), *argindex.statements()):
        c.execute(stmt)
    c.execute("BEGIN IMMEDIATE")
    counts._fill(c)
    digits, replace = ((counts.unrolled_digits_trigger(), counts._REPLACE_UNROLLED) if long
                       else (counts._digits_trigger(), counts._REPLACE))
    for stmt in (digits, *(replace if t == counts._REPLACE else t for t in counts.TRIGGERS)):
        c.execute(stmt)
    c.execute("INSERT OR IGNORE INTO args_pending(run) VALUES (?)", (argindex.EVERY,))
    for stmt in (*argindex.TRIGGERS, *argindex.NAME_TRIGGERS):
        c.execute(stmt)
    c.execute("COMMIT")


def _in_file(c: sqlite3.Connection) -> set[str]:
    return {n for (n,) in c.execute("SELECT name FROM main.sqlite_master WHERE type='trigger'")}


def test_a_writable_open_alone_moves_an_older_memolabs_triggers_to_its_connections_and_counts_once():
    """A store an older memolab made (its triggers in the file, long forms): this memolab's writable
    open, with no other process connected (an in-memory index: none can be), drops them and writes the
    markers in one transaction; the counts stay a recount's through writes of the armed connection; an
    older memolab that makes its triggers again (after its own recount) is left them, and the armed
    connection's stand down: nothing is counted twice."""
    from memolab.tracking import argindex

    c = _index()
    older_memolab_install(c)
    assert set(counts._NAMES) | set(argindex._NAMES) <= _in_file(c)
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (1234567, 'f', 1, 'done')")
    c.execute("INSERT INTO evaluations(fn, code, args, schema, status, hits, size) VALUES ('f', 'c', 'a', 's', 'done', 2, 10)")
    assert counts.available(c) and len(_trigger_sql(c, "counts_run_digits") or "") > 8000
    schema.ensure(c)  # this memolab's writable open, alone
    schema.arm(c)  # (and its connection armed, as before a write: store.arming)
    assert _in_file(c) == {"lineage_replace", "lineage_add", "lineage_drop"} and not c.in_transaction
    assert counts.available(c) and argindex.available(c) and counts.check(c) == []
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (1234999, 'f', 2, 'done')")
    assert c.execute("SELECT n FROM run_digits").fetchone()[0] == 5  # 1234567, 1234999: "1234" shared
    c.execute("INSERT OR REPLACE INTO evaluations(fn, code, args, schema, status, hits, size) "
              "VALUES ('f', 'c', 'a', 's', 'done', 5, 7)")  # replaces the row: its hits and size off, the new ones on
    assert c.execute("SELECT n, hits, size FROM evaluation_counts WHERE fn='f'").fetchone() == (1, 5, 7)
    assert counts.check(c) == []
    # an older memolab again: its triggers back in the file (after its recount); the armed connection's stand down
    older_memolab_install(c, long=False)
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (777, 'f', 3, 'done')")
    c.execute("UPDATE evaluations SET hits = hits + 3")
    c.execute("INSERT INTO evaluations(fn, code, args, schema, status, hits, size) VALUES ('f', 'c', 'b', 's', 'done', 1, 1)")
    assert c.execute("SELECT n, hits, size FROM evaluation_counts WHERE fn='f'").fetchone() == (2, 9, 8)
    assert c.execute("SELECT SUM(runs) FROM run_counts WHERE fn='f'").fetchone()[0] == 3
    assert counts.check(c) == [] and argindex.check(c) == []
    schema.ensure(c)  # moved once: an older memolab's triggers made again are left to it (no recount each change)
    assert set(counts._NAMES) <= _in_file(c) and counts.check(c) == []


def test_the_older_triggers_kept_in_the_file_are_made_short():
    """Where the older memolab's triggers stay in the file (another process had it open), a writable
    open replaces the long ones with the short ones that keep the same numbers, in one transaction; a
    trigger of any other text (a newer memolab's) is left as it is."""
    c = _index()
    older_memolab_install(c)
    short = {"counts_run_digits": counts._digits_trigger(), "counts_evaluation_replace": counts._REPLACE}
    assert sorted(counts.shorten(c)) == sorted(short)
    assert {n: _trigger_sql(c, n) for n in short} == {n: counts._as_kept(t) for n, t in short.items()}
    assert counts.shorten(c) == [] and not c.in_transaction  # once: the next open finds them short
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (1234567, 'f', 1, 'done')")
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (1234999, 'f', 2, 'done')")
    assert c.execute("SELECT n FROM run_digits").fetchone()[0] == 5
    assert counts.check(c) == []
    c.execute("DROP TRIGGER counts_run_digits")
    other = counts._digits_trigger().replace("ORDER BY id ASC", "ORDER BY id")
    c.execute(other)
    assert counts.shorten(c) == [] and "ORDER BY id ASC" not in (_trigger_sql(c, "counts_run_digits") or "")
