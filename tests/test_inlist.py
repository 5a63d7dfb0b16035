"""store.inlist: the one helper for ``IN (?,?,…)`` lists, at the chunk boundary, against a real SQLite."""
import sqlite3

import pytest

from memolab.store.inlist import CHUNK, chunks, placeholders


@pytest.mark.parametrize("n", [0, 1, 499, 500, 501, 1001])
def test_chunks_cover_every_value_once_in_order_within_the_limit(n):
    values = list(range(n))
    got = list(chunks(values))
    assert [len(p) for _, p in got] == [min(CHUNK, n - i) for i in range(0, n, CHUNK)]
    assert [v for _, p in got for v in p] == values  # each once, in order
    for q, part in got:
        assert q == ",".join("?" * len(part)) and q.count("?") == len(part) <= CHUNK
    assert len(got) == -(-n // CHUNK)  # 0 values: no statement at all


@pytest.mark.parametrize("n", [0, 1, 499, 500, 501, 1001])
def test_chunked_queries_find_exactly_the_rows_asked_for(n):
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
    c.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(2 * n + 3)])
    want = list(range(0, 2 * n, 2))  # every other row
    found = [i for q, part in chunks(want) for (i,) in c.execute(f"SELECT id FROM t WHERE id IN ({q}) ORDER BY id", part)]
    assert found == want
    c.execute("DELETE FROM t WHERE id IN ()")  # what no values would write: valid, matches nothing
    assert c.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 2 * n + 3


def test_postgres_placeholders_and_sizes():
    assert placeholders(3, "%s") == "%s,%s,%s" and placeholders(0) == "" and placeholders(1) == "?"
    got = list(chunks("abcde", size=2, mark="%s"))
    assert got == [("%s,%s", ["a", "b"]), ("%s,%s", ["c", "d"]), ("%s", ["e"])]
    with pytest.raises(ValueError, match="size must be at least 1"):
        list(chunks([1], size=0))
