"""``memolab doctor`` reads each row of the index once (issue 52 §1: doctor at a million rows).

A store made by real calls (small results kept in their rows, larger ones in blob files, runs,
scalars, a miss record) is grown to a few thousand evaluations in SQL, damaged in every way doctor
checks, and checked by ``doctor --json`` in a fresh process whose every SQLite connection records
the statements it runs. Each statement's query plan (``EXPLAIN QUERY PLAN``) says which tables it
walks in full: each table is walked once (``PRAGMA integrity_check`` aside, which reads every page),
the blob folder is listed once and every blob read once, and the rows handed to Python are about
one per row in the store. Every damage is still reported and taken out of use: one pass, no check
dropped. Deterministic: statements and plans, no timings (those are in benchmarks/store_scaling.py).
"""
from __future__ import annotations

import json
import re
import sqlite3
import sys

from test_scale_reads import grow

JOB = """
import memolab
from memolab import memo

@memo
def train(lr, seed=0):
    memolab.log.scalar("val/loss", lr * 2, step=0)
    memolab.log.scalar("val/loss", lr, step=1)
    return lr + seed

@memo
def big(i):  # a result kept in a blob file, not in its row
    return bytes(40000) + str(i).encode()

for lr in (0.1, 0.2, 0.3):
    train(lr)
train(0.1, seed=1)  # a miss, recorded (the miss table)
big(1), big(2)
"""

# every statement of every sqlite3 connection of this process, the rows handed to Python, and the
# blob folder's listings and reads
MEASURE = r"""
import contextlib, io, json, sqlite3, sys
statements, counts = [], {"rows": 0, "listings": 0, "verified": 0}

class Cursor(sqlite3.Cursor):
    def __next__(self):
        r = super().__next__()
        counts["rows"] += 1
        return r
    def fetchone(self):
        r = super().fetchone()
        counts["rows"] += r is not None
        return r
    def fetchall(self):
        r = super().fetchall()
        counts["rows"] += len(r)
        return r
    def fetchmany(self, *a, **k):
        r = super().fetchmany(*a, **k)
        counts["rows"] += len(r)
        return r

class Connection(sqlite3.Connection):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.set_trace_callback(statements.append)
    def cursor(self, factory=Cursor):
        return super().cursor(factory)
    def execute(self, *a, **k):
        return self.cursor().execute(*a, **k)
    def executemany(self, *a, **k):
        return self.cursor().executemany(*a, **k)

_connect = sqlite3.connect
sqlite3.connect = lambda *a, **k: _connect(*a, **{"factory": Connection, **k})

from memolab.store.blobs import BlobFolder
_iter, _verify = BlobFolder.__iter__, BlobFolder.verify
def listing(self):
    counts["listings"] += 1
    return _iter(self)
def verify(self, d):
    counts["verified"] += 1
    return _verify(self, d)
BlobFolder.__iter__, BlobFolder.verify = listing, verify

from memolab.cli import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = main(["doctor", "--json"])
print(json.dumps({"rc": rc, "out": buf.getvalue(), "statements": statements, **counts}))
"""

#: the tables a statement names, by their names and aliases (``FROM runs r``)
_NAMED = re.compile(r"\b(?:FROM|JOIN)\s+(?:main\.)?(\w+)(?:\s+(?:AS\s+)?(?!WHERE|ON|JOIN|LEFT|GROUP|ORDER|LIMIT|USING"
                    r"|INNER|CROSS|UNION|NATURAL)(\w+))?", re.I)


def walks(index: str, statements: list[str]) -> dict[str, int]:
    """{table: how many times the statements walk it in full} (a ``SCAN`` of its query plan; a
    ``SEARCH`` reads by key). ``integrity_check``: how many times every page was read."""
    c = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    out: dict[str, int] = {}
    for sql in statements:
        s = sql.strip()
        head = s.split(None, 1)[0].upper() if s else ""
        if s.startswith("--") or head in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "CREATE"):
            continue  # (a trigger's statements are traced as comments: their plans are searches by key)
        if head == "PRAGMA":
            if "integrity_check" in s:
                out["integrity_check"] = out.get("integrity_check", 0) + 1
            continue
        alias = {}
        for m in _NAMED.finditer(s):
            alias[m.group(1).lower()] = m.group(1).lower()
            if m.group(2):
                alias[m.group(2).lower()] = m.group(1).lower()
        for _, _, _, detail in c.execute("EXPLAIN QUERY PLAN " + s):
            if detail.startswith("SCAN "):
                name = alias.get(detail.split()[1].lower())
                if name is not None and name != "sqlite_master":
                    out[name] = out.get(name, 0) + 1
    c.close()
    return out


def test_doctor_reads_each_row_once_and_still_finds_every_damage(tmp_path):
    from conftest import Project

    project = Project(tmp_path / "proj")
    project.write("job.py", JOB)
    project.run("job.py")
    index = str(project.store / "index.sqlite")
    grow(index, 3000)  # (copies of train's first row: a run and a metric each, the oldest 2% without)
    c = sqlite3.connect(index)
    with c:
        ids = [r[0] for r in c.execute("SELECT id FROM evaluations WHERE fn LIKE '%train' AND inline IS NOT NULL "
                                       "ORDER BY id LIMIT 3")]
        garbled, bad_json, bad_inline = ids
        c.execute("UPDATE evaluations SET host = CAST(x'ff41' AS TEXT) WHERE id = ?", (garbled,))
        c.execute("UPDATE evaluations SET code_refs = '{not json' WHERE id = ?", (bad_json,))
        c.execute("UPDATE evaluations SET inline = CAST(x'00' || inline AS BLOB) WHERE id = ?", (bad_inline,))
        (gone, gone_id), (flipped, flipped_id) = c.execute(
            "SELECT payload, id FROM evaluations WHERE fn LIKE '%big' ORDER BY id").fetchall()
        c.execute("UPDATE evaluation_counts SET n = n + 5 WHERE fn LIKE '%big'")  # drifted
        c.execute("INSERT INTO misses(fn, time, explanation) VALUES ('__main__:train', 1, 'not json')")
        rows = {t: c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("evaluations", "runs", "misses", "scalar_tags", "scalars")}
        blobs = c.execute("SELECT COUNT(DISTINCT payload) FROM evaluations WHERE inline IS NULL").fetchone()[0]
    c.close()
    (project.store / "blobs" / gone[:2] / gone[2:]).unlink()
    blob = project.store / "blobs" / flipped[:2] / flipped[2:]
    data = bytearray(blob.read_bytes())
    data[100] ^= 1  # a damaged blob: quarantined while the walk's snapshot stands (no write to the index)
    blob.chmod(0o600)
    blob.write_bytes(bytes(data))

    cp = project.run("-c", MEASURE, env={"COLUMNS": "200"})
    got = json.loads(cp.stdout.strip().splitlines()[-1])
    doc = json.loads(got["out"])
    # every damage found and taken out of use, in the one pass
    assert got["rc"] == 1, got["out"]
    assert set(doc["undecodable"]) == {str(garbled), str(bad_json), str(bad_inline)}, doc["undecodable"]
    assert "not UTF-8" in doc["undecodable"][str(garbled)] and "code_refs" in doc["undecodable"][str(bad_json)]
    assert doc["marked_corrupt"] == sorted([gone_id, flipped_id])
    assert {p["blob"]: p["problem"] for p in doc["problems"]} == {flipped: f"blob {flipped[:12]} does not match its digest",
                                                                  gone: "missing"}, doc["problems"]
    assert any(m.startswith("kept count evaluations of __main__:big") for m in doc["messages"]), doc["messages"]
    assert doc["miss_records_removed"] == 1 and doc["checked"] == blobs - 1
    c = sqlite3.connect(index)
    assert {i: s for i, s in c.execute("SELECT id, status FROM evaluations WHERE status != 'done'")} == \
        dict.fromkeys((garbled, bad_json, bad_inline, gone_id, flipped_id), "corrupt")
    c.close()

    passes = walks(index, got["statements"])
    print(passes, {k: got[k] for k in ("rows", "listings", "verified")}, len(got["statements"]), file=sys.stderr)
    # each table walked once; the blob folder listed once and every blob read once
    big = {t: passes.pop(t, 0) for t in ("integrity_check", "evaluations", "runs", "misses", "scalars", "scalar_tags",
                                         "run_args")}
    assert big == {"integrity_check": 1, "evaluations": 1, "runs": 1, "misses": 1, "scalars": 0, "scalar_tags": 0,
                   "run_args": 1}, big
    # (and the small tables: one row per function, or per lease, or per run written since the
    # runs' arguments were last indexed)
    assert set(passes) <= {"evaluation_counts", "run_counts", "run_digits", "leases", "arg_names",
                           "args_pending"} and max(passes.values()) == 1, passes
    assert got["listings"] == 1 and got["verified"] == blobs - 1
    # about one row handed to Python per row in the store (and a few more: schema, leases, the
    # rows marked corrupt): the runs' rows once, the evaluations' once
    assert got["rows"] <= rows["evaluations"] + rows["runs"] + rows["misses"] + 100, (got["rows"], rows)

    # and a second doctor finds the store healthy
    cp = project.run("-m", "memolab", "doctor", check=False)
    assert cp.returncode == 0 and "no problems" in cp.stdout and "kept count" not in cp.stdout, cp.stdout + cp.stderr


def test_the_walk_knows_when_the_index_was_written_after_it_began(tmp_store):
    """Doctor decides from its walk only if nothing was committed since it began (asked under the
    write lock): a commit by another process, or by this process's store connection, is seen."""
    import contextlib

    import memolab
    from memolab.cli.doctorwalk import walk
    from memolab.store import get_store

    @memolab.memo
    def f(x):
        return x + 1

    f(1), f(2)
    store = get_store()
    store.flush_hits()
    w = walk(store.index, lambda total: contextlib.nullcontext(type("Bar", (), {"update": lambda self, n: None})()))
    try:
        assert w.unchanged() and not w.undecodable and not w.drift
        with store.index.write():  # the lock alone commits nothing
            assert w.unchanged()
        with sqlite3.connect(tmp_store / "index.sqlite") as other:
            other.execute("UPDATE evaluations SET hits = hits + 1")
        assert not w.unchanged()
    finally:
        w.close()
    w = walk(store.index, lambda total: contextlib.nullcontext(type("Bar", (), {"update": lambda self, n: None})()))
    try:
        with store.index.write() as c:
            c.execute("DELETE FROM evaluations WHERE id = (SELECT MIN(id) FROM evaluations)")
        assert not w.unchanged()
    finally:
        w.close()
