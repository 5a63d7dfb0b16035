"""Logs bundles (team/logs.py): how an evaluation's runs and logs travel between stores.

No servers here: a bundle is exported from one local store and imported into another,
as the team layer does with the bundle it finds in (or through) a team row.
"""
from __future__ import annotations

import os
import sqlite3
import zlib

import pytest

import memolab
from memolab import memo
from memolab.store import Store
from memolab.team import logs
from memolab.tracking import schema


@memo
def train(lr):
    for i in range(3):
        memolab.log.scalar("loss", lr / (i + 1))
    return lr * 10


def exported(tmp_path, n_points: int = 3) -> tuple:
    """A bundle of one evaluation with a run and ``loss`` scalars, and the evaluation's key."""
    memolab.configure(store=str(tmp_path / "a"))
    try:
        assert train(0.5) == 5.0
        st = train.store()
        memolab.log.flush()
        (ev,) = train.evaluations()
        data = logs.export(st.index, ev["id"])
        assert data is not None
        return data, ev
    finally:
        memolab.configure(store=str(tmp_path / "idle"))


def empty_store(tmp_path) -> Store:
    st = Store(tmp_path / "b")
    schema.ensure(st.index.conn())  # the tables exist: what an import leaves in them is seen
    return st


def test_import_attaches_runs_and_scalars_once(tmp_path):
    data, _ = exported(tmp_path)
    st = empty_store(tmp_path)
    assert logs.import_bundle(st.index, data, 7) == 1
    c = st.index.conn()
    assert not c.in_transaction
    ((run, eval_id, status),) = c.execute("SELECT id, eval_id, status FROM runs").fetchall()
    assert eval_id == 7 and status == "done"
    vals = [v for (v,) in c.execute("SELECT value FROM scalars WHERE run=? ORDER BY step", (run,))]
    assert vals == [0.5, 0.25, pytest.approx(0.5 / 3)]
    assert logs.import_bundle(st.index, data, 7) == 0  # idempotent per evaluation
    assert c.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_import_is_one_transaction(tmp_path):
    """A bundle that fails midway leaves nothing behind: the import is all or nothing
    (it once ran its DDL with executescript, which committed the import's transaction
    and left every row after it in autocommit: a failure kept a run without its logs,
    and the run's presence then stopped any later import of them)."""
    import json

    data, _ = exported(tmp_path)
    doc = json.loads(zlib.decompress(data))
    doc["tables"]["scalars"]["rows"][-1] = ["not", "a", "row"]  # fails once the run row is in
    bad = zlib.compress(json.dumps(doc).encode())
    st = empty_store(tmp_path)
    with pytest.raises((sqlite3.Error, ValueError, KeyError, IndexError, TypeError)):
        logs.import_bundle(st.index, bad, 7)
    c = st.index.conn()
    assert not c.in_transaction
    assert c.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert c.execute("SELECT count(*) FROM scalars").fetchone() == (0,)
    assert logs.import_bundle(st.index, data, 7) == 1  # the good bundle still imports in full


def test_schema_ensure_keeps_the_callers_transaction(tmp_path):
    c = sqlite3.connect(str(tmp_path / "x.sqlite"), isolation_level=None)
    c.execute("CREATE TABLE t(x)")
    c.execute("BEGIN IMMEDIATE")
    c.execute("INSERT INTO t VALUES (1)")
    schema.ensure(c)
    assert c.in_transaction
    c.execute("ROLLBACK")
    assert c.execute("SELECT count(*) FROM t").fetchone() == (0,)
    assert c.execute("SELECT count(*) FROM sqlite_master WHERE name='runs'").fetchone() == (0,)
    schema.ensure(c)
    schema.ensure(c)  # twice: nothing to do
    assert c.execute("SELECT count(*) FROM sqlite_master WHERE name='runs'").fetchone() == (1,)


def test_small_bundles_travel_inline_large_ones_as_blobs(tmp_path):
    data, _ = exported(tmp_path)
    assert len(data) <= logs.INLINE_MAX  # a run and three points: a few hundred bytes
    ref = logs.inline_ref(data)
    assert ref is not None and ref.startswith("z:")
    assert logs.parse_ref(ref) == (None, data)
    big = os.urandom(logs.INLINE_MAX + 1)
    assert logs.inline_ref(big) is None  # the caller stores it as a blob, named by its digest
    assert logs.inline_ref(big[:logs.INLINE_MAX]) is not None
    digest = "ab" * 32
    assert logs.parse_ref(digest) == (digest, None)


@pytest.mark.parametrize("junk", [None, "", "z:not base64!", "AB" * 32, "ab" * 31, "../../etc/passwd", "z"])
def test_a_logs_value_that_is_neither_names_nothing(junk):
    """Another client's damage is ignored (logs are best effort), and never read as a path."""
    assert logs.parse_ref(junk) == (None, None)
