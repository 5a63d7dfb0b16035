"""The store side of the serializer: index migration, refusals, memory hits."""
from __future__ import annotations

import importlib
import json
import sqlite3
import sys
import warnings

import numpy as np
import pytest

import memolab
from conftest import Calls, require
from memolab.calls.explain import last_miss
from memolab.store.sqlite import Index

OLD_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE evaluations(
    id INTEGER PRIMARY KEY AUTOINCREMENT, fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL,
    schema TEXT NOT NULL, status TEXT NOT NULL, payload TEXT, payload_size INTEGER, buffers TEXT, size INTEGER,
    started REAL, finished REAL, duration REAL, host TEXT, python TEXT, versions TEXT, snapshot TEXT,
    hits INTEGER NOT NULL DEFAULT 0, last_hit REAL, UNIQUE(fn, code, args, schema));
INSERT INTO evaluations(fn, code, args, schema, status, payload, payload_size, buffers)
    VALUES ('m:f', 'c', 'a', 's', 'done', 'd', 3, '[]');
"""


def test_old_index_files_gain_the_new_columns_in_place(tmp_path):
    path = tmp_path / "index.sqlite"
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    con.close()
    with pytest.warns(memolab.MemolabWarning, match="from schema 1 to"):  # an older store: migrated, said once
        idx = Index(path)
    row = idx.lookup(("m:f", "c", "a", "s"))
    assert row is not None and row["payload"] == "d"  # old rows survive
    assert row["code_refs"] is None and row["signature"] is None and row["reason"] is None
    Index(path)  # a second opener finds nothing left to do
    cols = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(evaluations)")]
    assert cols.count("signature") == 1


def test_memory_hit_notices_a_redefined_class(tmp_store, tmp_path, monkeypatch):
    mod = tmp_path / "nbclass.py"
    mod.write_text("class Cell:\n    def v(self):\n        return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runs = Calls()  # counts runs without joining the key

    @memolab.memo
    def make(kind):
        runs.append(kind)
        return getattr(importlib.import_module("nbclass"), kind)()

    assert make("Cell").v() == 1
    assert make("Cell").v() == 1  # loads from the store, then remembered
    assert make("Cell").v() == 1  # an in-process memory hit
    assert len(runs) == 1
    mod.write_text("class Cell:\n    def v(self):\n        return 2\n")
    del sys.modules["nbclass"]  # as a notebook re-running the cell that defines it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a code change is not damage: no warning
        assert make("Cell").v() == 2
    assert len(runs) == 2
    reasons = last_miss(make.store(), make.symbol)["reasons"]
    assert any("`nbclass:Cell` changed" in r for r in reasons), reasons
    monkeypatch.delitem(sys.modules, "nbclass", raising=False)


def test_buffers_are_recorded_per_blob_and_writes_stay_private(tmp_store):
    base = np.arange(1 << 16, dtype=np.float64)

    @memolab.memo
    def views():
        return base, base[10:20]

    views()
    (row,) = views.evaluations()
    assert len(json.loads(row["buffers"])) == 1 and json.loads(row["code_refs"]) == {}
    a, v = views()
    assert not a.flags.writeable and not v.flags.writeable  # numpy results come back read-only
    assert np.shares_memory(a, v) and v[0] == 10.0  # still views of one array after the load
    w = a.copy()
    w[10] = -1.0  # the way to modify a loaded result: copy it
    a2, v2 = views()
    assert a2[10] == 10.0 and v2[0] == 10.0


def test_torch_results_are_writable_but_writes_stay_private(tmp_store):
    torch = require("torch")
    base = torch.arange(1 << 16, dtype=torch.float64)

    @memolab.memo
    def views():
        return base, base[10:20]

    views()
    views.store().forget()
    t, v = views()
    t[10] = -1.0  # in place on a copy-on-write mapping: allowed ...
    assert v[0] == -1.0  # ... aliasing kept ...
    t2, v2 = views()
    assert t2[10] == 10.0 and v2[0] == 10.0  # ... and private: the blob and the next hit are untouched


def test_large_blobs_hash_while_writing_and_still_deduplicate(tmp_path):
    from memolab.store.blobs import _OVERLAP_MIN, BlobFolder, digest_bytes

    blobs = BlobFolder(tmp_path)
    data = np.random.default_rng(1).integers(0, 255, _OVERLAP_MIN + 12345, dtype=np.uint8)
    d1, n1 = blobs.put(data)
    d2, n2 = blobs.put(data.copy())  # same bytes again: written, found intact, discarded
    assert d1 == d2 == digest_bytes(data) and n1 == n2 == data.nbytes
    assert list(blobs) == [d1] and not list(blobs.tmp.iterdir())
    assert bytes(blobs.get(d1, n1, mapped=True, verify="always")) == data.tobytes()


def test_signatures_cover_the_snapshot_and_older_ones_still_load(monkeypatch):
    from memolab.store import signing

    monkeypatch.setenv(signing.ENV, "k")
    key = ("m:f", "c", "a", "s")
    row = {"payload": "p", "payload_size": 3, "buffers": "[]", "code_refs": "{}", "snapshot": '{"result_digest": ["aa"]}'}
    row["signature"] = signing.sign(key, row)
    assert row["signature"].startswith("hmac-sha256:") and signing.problem(key, row) is None
    assert signing.snapshot_trusted(row)
    forged = dict(row, snapshot='{"result_digest": ["bb"]}')
    assert "does not match" in signing.problem(key, forged)
    # A row signed before the snapshot was: still a valid result, but its
    # result digests are not believed (they could have been edited).
    old = dict(row, signature=signing._mac(b"k", key, row, v2=False))
    assert signing.problem(key, old) is None and not signing.snapshot_trusted(old)
    monkeypatch.delenv(signing.ENV)
    assert signing.snapshot_trusted(old)  # nothing is checked without a key


def test_a_result_whose_rebuild_raises_is_recomputed_not_raised(tmp_store, tmp_path, monkeypatch):
    # Library code is pickled by name and not digested: after an upgrade its
    # __setstate__ may reject the stored state (TypeError, KeyError, ...).
    # Simulated here by a switch. The call must recompute, with a warning
    # saying why, never raise the unpickling error to the caller.
    (tmp_path / "fragile.py").write_text(
        "import os\n"
        "class Box:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "    def __setstate__(self, st):\n"
        "        if os.environ.get('FRAGILE_BROKEN'):\n"
        "            raise TypeError('state from another version')\n"
        "        self.__dict__.update(st)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runs = Calls()

    @memolab.memo
    def make(kind):
        runs.append(kind)
        return getattr(importlib.import_module("fragile"), kind)(1)

    assert make("Box").v == 1 and make("Box").v == 1  # stored, then loaded and remembered
    monkeypatch.setenv("FRAGILE_BROKEN", "1")
    with pytest.warns(memolab.MemolabWarning, match="state from another version"):
        assert make("Box").v == 1  # the in-process copy fails to rebuild too: recomputed
    make.store().forget()
    with pytest.warns(memolab.MemolabWarning, match="state from another version"):
        assert make("Box").v == 1  # read from disk, fails to rebuild: recomputed
    assert len(runs) == 3
    monkeypatch.delitem(sys.modules, "fragile", raising=False)
