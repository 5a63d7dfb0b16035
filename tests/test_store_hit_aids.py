"""The hit aids (issue 52 §2): a hit reads the snapshot's ``result_digest``, ``state_deps`` and ``reads``
from columns of their own instead of parsing the snapshot (``store/sqlite.py``, ``AIDS``).

Not a schema step, and safe both ways, on a copy of the golden fixture store an earlier release wrote
(``tests/data/golden/stores``, schema 5, no aid columns):

- before this memolab records into it, a lookup reads the snapshot's JSON (the columns are not there)
  and gives what ``json_extract`` of the snapshot gives, row by row;
- its first record adds the columns in place; the file's schema version stays the one an older memolab
  of this schema writes, so it is not refused ("written by a newer memolab");
- rows without aids (the fixture's, and a row an older memolab writes afterwards, naming only its own
  columns: a replaced row never keeps the aids of the row it replaced) read the snapshot; rows with aids
  read them; every lookup gives the snapshot's truth; an older memolab's own lookup statement reads the
  file as before.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest

from memolab.store import Store, sqlite as index_sql
from memolab.store.schema import SCHEMA_VERSION

FIXTURE = Path(__file__).parent / "data" / "golden" / "stores" / "h4-xxh3_128-c4m+c4"
EXTRACT = ("SELECT json_extract(snapshot, '$.result_digest'), json_extract(snapshot, '$.state_deps'), "
           "json_extract(snapshot, '$.reads') FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=?")
#: what an older memolab's record names (its columns; not the aids)
OLDER_COLUMNS = [c for c in index_sql.EVAL_COLUMNS if c != "id"] + ["inline"]


def _columns(db: Path) -> set[str]:
    with sqlite3.connect(db) as c:
        return {r[1] for r in c.execute("PRAGMA table_info(evaluations)")}


def _truth(db: Path, key: tuple[str, ...]) -> tuple[object, ...]:
    with sqlite3.connect(db) as c:
        return tuple(c.execute(EXTRACT, key).fetchone())


def _read(store: Store, key: tuple[str, ...]) -> tuple[object, ...]:
    row = store.index.lookup(key, lean=True)
    assert row is not None, key
    return row["result_token"], row["state_deps"], row["reads"]


def _fields(snapshot: dict[str, object]) -> dict[str, object]:
    return {"started": 1.0, "finished": 2.0, "duration": 1.0, "host": "h", "python": "3", "versions": "{}",
            "snapshot": json.dumps(snapshot)}


def test_hit_aids_are_added_in_place_read_where_written_and_the_snapshot_elsewhere(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("manifest.json"))
    db = root / "index.sqlite"
    with sqlite3.connect(db) as c:
        keys = [tuple(r) for r in c.execute("SELECT fn, code, args, schema FROM evaluations WHERE status='done'")]
    assert keys and not set(index_sql.AIDS) & _columns(db)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the upgrade of the fixture's schema 5 to the current one is said)
        store = Store(root)
    try:
        # 1. no aid columns yet: the snapshot's JSON, as json_extract reads it
        for key in keys:
            assert _read(store, key) == _truth(db, key)
        assert store.index._lean_sql == index_sql._LOOKUP_LEAN_SQL
        assert not set(index_sql.AIDS) & _columns(db), "a read added columns"

        # 2. this memolab's first record adds them in place; the version an older memolab reads stays
        snap = {"deps": {}, "args": {}, "result": "1", "result_digest": ["ab" * 16],
                "state_deps": {"numpy.random": "cd" * 16}, "reads": {"files": [], "dirs": []}}
        new = ("golden:aided", "c" * 32, "a" * 32, keys[0][3])

        def boom(c: sqlite3.Connection) -> None:
            raise RuntimeError("a record that rolls back")

        with pytest.raises(RuntimeError):  # (its columns went with it: the next record adds them again)
            store.index.record(new, "", dict(_fields(snap), payload="p", inline=b""), {}, also=boom)
        assert not set(index_sql.AIDS) & _columns(db) and store.index.lookup(new, lean=True) is None
        store.save(new, "", 1, _fields(snap), {})
        assert set(index_sql.AIDS) <= _columns(db)
        with sqlite3.connect(db) as c:
            assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            aids = c.execute("SELECT hit_token, hit_states, hit_reads FROM evaluations WHERE fn=?", (new[0],)).fetchone()
            assert None not in aids and all(json.loads(a) for a in aids)
            assert c.execute("SELECT count(*) FROM evaluations WHERE hit_token IS NULL").fetchone()[0] == len(keys)
        plain = ("golden:plain", "c" * 32, "b" * 32, keys[0][3])
        store.save(plain, "", 2, _fields({"deps": {}, "args": {}, "result_digest": None, "state_deps": None}), {})
        assert store.index._lean_sql == index_sql._LOOKUP_AIDED_SQL
        for key in [*keys, new, plain]:  # aid-less rows read the snapshot, aided rows their aids: the same
            assert _read(store, key) == _truth(db, key), key
        assert _read(store, plain) == (None, None, None)
        assert json.loads(_read(store, new)[1]) == snap["state_deps"]

        # 3. an older memolab replaces the aided row, naming only its own columns: no stale aids
        with sqlite3.connect(db) as c:
            row = dict(zip(OLDER_COLUMNS, c.execute(f"SELECT {','.join(OLDER_COLUMNS)} FROM evaluations WHERE fn=?",
                                                    (new[0],)).fetchone(), strict=True))
            row["snapshot"] = json.dumps({"deps": {}, "args": {}, "result_digest": [], "state_deps": None})
            c.execute(f"INSERT OR REPLACE INTO evaluations({','.join(OLDER_COLUMNS)}) "
                      f"VALUES ({','.join('?' * len(OLDER_COLUMNS))})", [row[k] for k in OLDER_COLUMNS])
        assert _read(store, new) == _truth(db, new) == ("[]", None, None)
        # ... and its own lookup statement reads the file (aid columns and all) as before
        with sqlite3.connect(db) as c:
            for key in [*keys, new, plain]:
                got = c.execute(index_sql._LOOKUP_LEAN_SQL, key + key).fetchone()
                assert got is not None and got[-1] == 1 and tuple(got[-4:-1]) == _truth(db, key)
        # the values load back (the fixture's rows through their snapshot's aids)
        assert store.load(new, store.index.lookup(new, lean=True)) == 1
    finally:
        store.index.close()


def test_a_new_store_has_the_aids_and_a_snapshot_that_is_not_an_object_gets_none(tmp_path):
    assert index_sql.hit_aids('{"result_digest": null, "reads": {"files": []}}') == ["", "", '{"files":[]}']
    assert index_sql.hit_aids("[1]") is None and index_sql.hit_aids("{") is None and index_sql.hit_aids(None) is None
    assert index_sql.hit_aids('{"reads": "x"}') is None  # (not a list or object: left to json_extract)
    store = Store(tmp_path / "s")
    try:
        assert set(index_sql.AIDS) <= _columns(tmp_path / "s" / "index.sqlite")
    finally:
        store.index.close()
