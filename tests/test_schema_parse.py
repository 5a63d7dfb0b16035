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


def test_a_writable_open_makes_an_older_memolabs_long_triggers_short_and_an_older_memolab_still_finds_them():
    c = _index()
    schema.ensure(c)  # a new store: the short forms at once
    short = {n: _trigger_sql(c, n) for n in ("counts_run_digits", "counts_evaluation_replace")}
    assert len(short["counts_run_digits"] or "") < 2100 and len(short["counts_evaluation_replace"] or "") < 1500
    # a store an older memolab made: the long forms (as it makes a trigger the store lacks)
    c.execute("DROP TRIGGER counts_run_digits")
    c.execute(counts.unrolled_digits_trigger())
    c.execute("DROP TRIGGER counts_evaluation_replace")
    c.execute(counts._REPLACE_UNROLLED)
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (1234567, 'f', 1, 'done')")
    c.execute("INSERT INTO evaluations(fn, code, args, schema, status, hits, size) VALUES ('f', 'c', 'a', 's', 'done', 2, 10)")
    assert counts.available(c) and len(_trigger_sql(c, "counts_run_digits") or "") > 8000
    schema.ensure(c)  # this memolab's writable open: both replaced, in one transaction
    assert {n: _trigger_sql(c, n) for n in short} == short and not c.in_transaction
    assert counts.shorten(c) == []  # once: the next open finds them short
    # what an older memolab reads: the triggers it looks for by name, all there, keeping the same numbers
    names = {n for (n,) in c.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    assert set(counts._NAMES) <= names
    c.execute("INSERT INTO runs(id, fn, started, status) VALUES (1234999, 'f', 2, 'done')")
    assert c.execute("SELECT n FROM run_digits").fetchone()[0] == 5  # 1234567, 1234999: "1234" shared
    c.execute("INSERT OR REPLACE INTO evaluations(fn, code, args, schema, status, hits, size) "
              "VALUES ('f', 'c', 'a', 's', 'done', 5, 7)")  # replaces the row: its hits and size off, the new ones on
    assert c.execute("SELECT n, hits, size FROM evaluation_counts WHERE fn='f'").fetchone() == (1, 5, 7)
    assert counts.check(c) == []
    # a trigger of any other text (a newer memolab's) is left as it is
    c.execute("DROP TRIGGER counts_run_digits")
    other = counts._digits_trigger().replace("ORDER BY id ASC", "ORDER BY id")
    c.execute(other)
    assert counts.shorten(c) == [] and "ORDER BY id ASC" not in (_trigger_sql(c, "counts_run_digits") or "")
