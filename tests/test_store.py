"""The embedded store: blobs, index, leases."""
from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import Calls
from memolab import CorruptBlob, configure
from memolab.store import Store
from memolab.store.blobs import BlobFolder, digest_bytes

settings.register_profile("memolab", deadline=None)  # (no timing asserted: a loaded machine's first example
settings.load_profile("memolab")  # may take longer than hypothesis's 200 ms deadline)

KEY = ("mod:f", "code", "args", "schema")


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "s")


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.binary(max_size=5000))
def test_blob_round_trip(tmp_path, data):
    b = BlobFolder(tmp_path / "b")
    d, n = b.put(data)
    assert n == len(data) and d == digest_bytes(data)
    assert bytes(b.get(d, n)) == data
    assert bytes(b.get(d, n, mapped=True)) == data
    assert b.put(data) == (d, n)  # idempotent


def test_blob_damage_is_detected_and_quarantined(tmp_path):
    b = BlobFolder(tmp_path / "b")
    d, n = b.put(b"x" * 1000)
    p = b.path(d)
    os.chmod(p, 0o644)
    p.write_bytes(b"x" * 999 + b"y")
    with pytest.raises(CorruptBlob, match="does not match its digest"):
        b.get(d, n)
    assert not p.exists() and list(b.quarantine_dir.iterdir())
    with pytest.raises(CorruptBlob, match="missing"):
        b.get(d, n)
    b.put(b"x" * 1000)  # storing the same bytes again repairs it
    assert bytes(b.get(d, n)) == b"x" * 1000


def test_blob_stamp_skips_rehash_but_not_size_check(store):
    d, n = store.blobs.put(b"abc" * 1000)
    assert store.index.get_stamp(d) is not None
    p = store.blobs.path(d)
    os.chmod(p, 0o644)
    with open(p, "ab") as f:
        f.write(b"!")
    with pytest.raises(CorruptBlob, match="bytes, expected"):
        store.blobs.get(d, n)


def test_writes_leave_no_partial_files(store):
    store.blobs.put(os.urandom(1 << 20))
    assert list(store.blobs.tmp.iterdir()) == []
    for f in store.blobs.dir.rglob("*"):
        if f.is_file():
            assert f.stat().st_mode & 0o222 == 0  # blobs are read-only


def test_lease_claim_wait_and_takeover(store):
    configure(lease_ttl=0.5)
    try:
        assert store.index.claim(KEY, "a", 0.5) == ("owner", None)
        assert store.index.claim(KEY, "b", 0.5) == ("wait", None)
        assert store.index.claim(KEY, "a", 0.5) == ("owner", None)  # re-entrant for the same owner
        store.index.heartbeat([(KEY, "a")])
        assert store.index.claim(KEY, "b", 0.5) == ("wait", None)
        time.sleep(0.6)  # no heartbeat: stale
        assert store.index.claim(KEY, "b", 0.5) == ("owner", None)
        assert store.index.claim(KEY, "a", 0.5) == ("wait", None)
        store.index.release(KEY, "a")  # not the owner any more: no effect
        assert store.index.claim(KEY, "a", 0.5) == ("wait", None)
    finally:
        configure(lease_ttl=10.0)


def test_save_load_and_hit_counts(store):
    owner = store.owner_id()
    assert store.acquire(KEY, owner) == ("owner", None)
    i = store.save(KEY, owner, {"a": [1, 2]}, {"started": 1.0, "finished": 2.0, "duration": 1.0, "snapshot": "{}"}, {})
    state, row = store.acquire(KEY, "someone else")
    assert state == "hit" and row["id"] == i
    assert store.load(KEY, row) == {"a": [1, 2]}
    assert store.load_from_memory(KEY) == (True, {"a": [1, 2]})
    store.flush_hits()
    assert store.index.evaluations(where="id=?", params=(i,))[0]["hits"] == 1
    assert store.index.conn().execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0


def test_collect_garbage_keeps_referenced_blobs(store):
    owner = store.owner_id()
    store.acquire(KEY, owner)
    store.save(KEY, owner, b"keep" * 100000, {"snapshot": "{}"}, {})
    orphan, _ = store.blobs.put(b"orphan")
    n, size = store.collect_garbage()
    assert n == 1 and size == 6
    assert not store.blobs.path(orphan).exists()
    state, row = store.acquire(KEY, owner)
    assert store.load(KEY, row) == b"keep" * 100000


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20))
def test_store_format_round_trips_any_plain_value(tmp_path_factory, value):
    s = Store(tmp_path_factory.mktemp("s"))
    owner = s.owner_id()
    s.acquire(KEY, owner)
    s.save(KEY, owner, value, {"snapshot": "{}"}, {})
    fresh = Store(s.root)  # a second handle, as another process would open it
    state, row = fresh.acquire(KEY, "other")
    assert state == "hit"
    assert fresh.load(KEY, row) == value


def test_gc_spares_blobs_of_a_computation_in_flight(store):
    """A writer puts blobs before it records the evaluation: gc must not take them."""
    owner = store.owner_id()
    assert store.acquire(KEY, owner) == ("owner", None)
    fresh, _ = store.blobs.put(b"being saved right now")  # put, not yet recorded
    assert store.collect_garbage() == (0, 0)
    assert store.blobs.path(fresh).exists()
    store.release(KEY, owner)  # nothing in flight any more
    assert store.collect_garbage() == (1, len(b"being saved right now"))
    assert not store.blobs.path(fresh).exists()


def test_reusing_a_stored_blob_marks_it_recent(store):
    d, n = store.blobs.put(b"old bytes")
    old = time.time() - 7200
    os.utime(store.blobs.path(d), (old, old))
    store.index.set_stamp(d, BlobFolder._stamp(store.blobs.path(d).stat()))
    assert store.blobs.put(b"old bytes") == (d, n)  # deduplicated ...
    assert store.blobs.mtime(d) > time.time() - 60  # ... and touched, so gc sees it as in use
    assert bytes(store.blobs.get(d, n)) == b"old bytes"


def _open_files(under) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(under))
        except OSError:
            pass
    return n


def test_a_store_let_go_or_closed_holds_no_open_files(tmp_store):
    """A Store the program no longer references is freed with its index's three files (the
    exit flush used to keep every Store alive); ``close_open_stores`` closes the shared ones
    under a directory, and a later call opens its store again."""
    import gc

    import memolab
    from memolab.store import close_open_stores

    s = Store(tmp_store.parent / "let-go")
    s.index.conn()
    assert _open_files(tmp_store.parent / "let-go") == 3
    del s
    gc.collect()
    assert _open_files(tmp_store.parent / "let-go") == 0

    runs = Calls()

    @memolab.memo
    def inc(x):
        runs.append(x)
        return x + 1

    assert inc(1) == 2
    assert _open_files(tmp_store) >= 3
    assert close_open_stores(tmp_store.parent) == 1
    assert _open_files(tmp_store) == 0
    assert inc(1) == 2 and runs == [1]  # a hit; the store it came from is open again:
    assert _open_files(tmp_store) >= 3
