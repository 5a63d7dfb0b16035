"""One behaviour suite over every store behind ``store.protocols.MemoStore``.

Stores: ``local`` (``Store``), ``read-only`` (``ReadOnlyStore``: an index that can be
read, not written), ``unusable`` (``NoStore``), and the team store (``TeamStore``
holding a local ``Store``) over both team set-ups: ``team-sqlite+file`` and
``team-postgresql+s3`` (real PostgreSQL and moto S3, ``tests/servers``).

Where a store is expected to behave differently, the test says so with the
``DIFFERS`` table below and asserts the different behaviour, never skips it:

- ``read-only`` serves stored results; a miss raises ``StoreUnavailable`` from
  ``try_acquire`` (the memo layer computes without storing); it writes nothing, so a
  damaged row stays in the index (refused again on its next load).
- ``unusable`` serves nothing: ``lookup`` and ``try_acquire`` raise ``StoreUnavailable``;
  it has no ``save``/``load`` (no call reaches them).
- the team stores never compute lease-free (a miss also takes the team's lease), and a
  result saved by one machine is found by another through the team index.

The memoized-call tests run every store under both drivers (a plain function and
an ``async def``). The blob tests at the end run the local blob folder and the
team's blob stores (a folder, S3, fsspec) through what they share (``BlobReader``).
"""
from __future__ import annotations

import asyncio
import json
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memolab
from conftest import require
from memolab.errors import StoreMiss, StoreUnavailable
from memolab.settings import config
from memolab.store import ReadOnlyStore, Store
from memolab.store.health import NoStore
from memolab.store.protocols import BlobReader, EvaluationIndex, LayeredStore, LocalBlobs, MemoStore, RemoteBlobs

KEY = ("mod:f", "code", "args", "schema")
FIELDS = {"started": 1.0, "finished": 2.0, "duration": 1.0, "snapshot": "{}"}
KINDS = ["local", "read-only", "unusable", "team-sqlite+file", "team-postgresql+s3"]

#: how each degraded store differs (see the module doc); the team stores differ only in ``team``
DIFFERS: dict[str, str] = {
    "read-only": "serves hits; a miss raises StoreUnavailable; writes nothing",
    "unusable": "serves nothing: lookup and try_acquire raise StoreUnavailable",
}


def is_team(kind: str) -> bool:
    return kind.startswith("team-")


class Stores:
    """Makes stores of one kind: ``open(name, seed=value)`` is the store ``name`` with
    ``value`` stored under ``KEY`` first (for the read-only store: by a writable store
    of the same directory, before it is opened read-only)."""

    def __init__(self, kind: str, tmp_path: Path, remote: Any) -> None:
        self.kind, self.tmp_path, self.remote = kind, tmp_path, remote
        self.opened: list = []

    def open(self, name: str = "s", seed: Any = None) -> Any:
        root = self.tmp_path / name
        if self.kind == "unusable":
            root.write_text("a file where the store should be")
            return NoStore(root, StoreUnavailable("not-a-directory", f"{root} is a file"))
        if self.kind == "read-only":
            if seed is not None:
                save(Store(root), KEY, seed)
            else:
                Store(root)  # an index to read
            return ReadOnlyStore(root, StoreUnavailable("read-only", f"{root} cannot be written"))
        store = Store(root)
        if is_team(self.kind):
            from memolab.team.layered import layered

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # unsigned: warned once per process
                store = layered(store, self.remote)
            self.opened.append(store)
        if seed is not None:
            save(store, KEY, seed)
        return store

    def close(self) -> None:
        for s in self.opened:
            s.retire()


def save(store: Any, key: Any, value: Any) -> int:
    owner = store.owner_id()
    state, _ = store.try_acquire(key, owner, True)
    assert state == "owner"
    return store.save(key, owner, value, dict(FIELDS), {})


@pytest.fixture(params=KINDS)
def stores(request, tmp_path):
    kind = request.param
    remote = None
    if kind == "team-sqlite+file":
        (tmp_path / "team" / "blobs").mkdir(parents=True)
        remote = (f"sqlite://{tmp_path}/team/index.sqlite", f"file://{tmp_path}/team/blobs")
    elif kind == "team-postgresql+s3":
        remote = (request.getfixturevalue("postgres_dsn"), request.getfixturevalue("s3_bucket"))
    s = Stores(kind, tmp_path, remote)
    yield s
    s.close()


# -- the protocol ------------------------------------------------------------------------------

def test_every_store_satisfies_the_store_protocol(stores):
    store = stores.open()
    assert isinstance(store, MemoStore)
    if stores.kind == "unusable":
        assert not isinstance(store, LayeredStore)  # differs: nothing to save or load
        return
    assert isinstance(store, LayeredStore)
    assert isinstance(store.index, EvaluationIndex)
    assert isinstance(store.blobs, LocalBlobs)
    if is_team(stores.kind):
        assert not isinstance(store, Store)  # holds a local store, does not extend one
        assert isinstance(store.local, Store) and store.index is store.local.index
        assert isinstance(store.link.index, EvaluationIndex)
        assert isinstance(store.link.blobs, RemoteBlobs)


# -- a miss, a claim, a save, a hit -------------------------------------------------------------

def test_miss_claim_save_then_hit(stores):
    store = stores.open()
    owner = store.owner_id()
    if stores.kind == "unusable":
        with pytest.raises(StoreUnavailable):
            store.lookup(KEY)
        with pytest.raises(StoreUnavailable):
            store.try_acquire(KEY, owner)
        assert store.load_from_memory(KEY) == (False, None)
        return
    assert store.lookup(KEY) is None
    if stores.kind == "read-only":
        with pytest.raises(StoreUnavailable):  # differs: a miss is computed, not stored
            store.try_acquire(KEY, owner)
        with pytest.raises(StoreUnavailable):
            store.save(KEY, owner, {"a": 1}, dict(FIELDS), {})
        return
    assert store.try_acquire(KEY, owner) == ("owner", None)
    eval_id = store.save(KEY, owner, {"a": [1, 2]}, dict(FIELDS), {})
    row = store.lookup(KEY)
    assert row is not None and row["id"] == eval_id
    assert store.check_entry(KEY, row) is None
    assert store.load(KEY, row) == {"a": [1, 2]}
    assert store.load_from_memory(KEY) == (True, {"a": [1, 2]})
    state, again = store.try_acquire(KEY, "someone else")
    assert state == "hit" and again["id"] == eval_id


def test_stored_result_is_served_as_a_hit(stores):
    store = stores.open(seed=b"x" * 100)
    if stores.kind == "unusable":
        with pytest.raises(StoreUnavailable):  # differs: serves nothing
            store.lookup(KEY)
        return
    row = store.lookup(KEY)
    assert row is not None
    assert store.load(KEY, row) == b"x" * 100
    store.count_hit(row["id"])
    store.flush_hits()  # a read-only store keeps its counts to itself: never raises


def test_a_second_owner_waits_until_the_first_releases(stores):
    store = stores.open()
    if stores.kind in DIFFERS:
        with pytest.raises(StoreUnavailable):  # differs: no lease to take, the miss computes unstored
            store.try_acquire(KEY, "a")
        store.release(KEY, "a")  # never raises, holds nothing
        return
    assert store.try_acquire(KEY, "a") == ("owner", None)
    assert store.try_acquire(KEY, "b") == ("wait", None)
    store.release(KEY, "a")
    assert store.try_acquire(KEY, "b") == ("owner", None)
    store.release(KEY, "b")
    store.release(KEY, "b")  # twice, or without a lease: best effort, never raises
    store.release(KEY, "")


def test_force_claims_over_a_stored_result_and_replaces_it(stores):
    store = stores.open(seed=1)
    if stores.kind in DIFFERS:
        with pytest.raises(StoreUnavailable):
            store.try_acquire(KEY, "a", True)
        return
    assert store.try_acquire(KEY, store.owner_id())[0] == "hit"
    save(store, KEY, 2)
    assert store.load(KEY, store.lookup(KEY)) == 2


def test_a_damaged_row_is_refused_and_taken_out_of_use(stores):
    store = stores.open(seed={"v": 1})
    if stores.kind == "unusable":
        return  # differs: there is no row to damage
    if is_team(stores.kind):
        store.journal.drain()  # the team has the intact copy
    with sqlite3.connect(store.root / "index.sqlite") as c:
        c.execute("UPDATE evaluations SET inline = ? WHERE fn = ?", (b"garbage", KEY[0]))
    store.forget_key(KEY)
    row = store.lookup(KEY)
    with pytest.raises(StoreMiss):
        store.load(KEY, row)
    store.mark_corrupt(KEY, row, "damaged in a test")
    if stores.kind == "read-only":
        assert store.lookup(KEY) is not None  # differs: cannot write; refused again on the next load
        return
    if is_team(stores.kind):
        # differs: the damaged local copy is out of use, and the team's intact one replaces it
        row = store.lookup(KEY)
        assert row is not None and store.load(KEY, row) == {"v": 1}
        return
    assert store.lookup(KEY) is None  # out of use: the key recomputes
    assert store.try_acquire(KEY, store.owner_id())[0] == "owner"


def test_a_result_saved_is_found_by_a_fresh_store(stores):
    """The same directory opened afresh (another process); for a team store, another
    machine: a store of its own directory, finding it through the team."""
    store = stores.open(seed=[1, 2, 3])
    if stores.kind == "unusable":
        return  # differs: nothing is stored
    if is_team(stores.kind):
        store.journal.drain()  # uploaded in the background: wait for it
        other = stores.open("other-machine")
    elif stores.kind == "read-only":
        other = ReadOnlyStore(store.root, store.problem)
    else:
        other = Store(store.root)
    row = other.lookup(KEY)
    assert row is not None and other.load(KEY, row) == [1, 2, 3]


def test_clear_and_gc(stores):
    store = stores.open(seed=b"y" * 200000)  # in a blob file
    if stores.kind in DIFFERS:
        with pytest.raises(StoreUnavailable):  # differs: nothing may be deleted
            store.clear()
        with pytest.raises(StoreUnavailable):
            store.collect_garbage()
        if stores.kind == "read-only":
            assert store.collect_garbage(dry_run=True) == (0, 0)
        return
    assert store.collect_garbage() == (0, 0)
    assert store.clear() == 1
    assert store.lookup(KEY) is None or is_team(stores.kind)  # (a team store may import the team's row again)
    assert store.collect_garbage()[0] == 0  # clear collected the blob already


def test_only_the_local_store_computes_quick_misses_without_a_lease(stores):
    store = stores.open()
    if stores.kind == "unusable":
        assert not hasattr(store, "is_quick")  # differs: every call computes, no lease anyway
        return
    store.note_duration(KEY, 0.0)
    assert store.is_quick(KEY) is (stores.kind == "local" and config.settings().lease_free_below > 0)


def test_a_rider_runs_in_the_record_transaction(stores):
    """``ride_along``: a write made in the transaction that records the next result."""
    store = stores.open()
    if stores.kind in DIFFERS:
        return  # differs: nothing is recorded
    ran = []
    store.ride_along(lambda c: ran.append(c.execute("SELECT 1").fetchone()[0]))
    save(store, KEY, "v")
    store.ride_along(None)
    assert ran == [1]


# -- memoized calls through each store, under both drivers ------------------------------------------

@pytest.fixture(params=["sync", "async"])
def driver(request) -> str:
    return request.param


def test_memoized_calls(stores, driver, monkeypatch):
    store = stores.open()
    from conftest import Calls
    from memolab.calls.memo import MemoFunction

    ran = Calls()

    def body(x):
        ran.append(x)
        return {"x": x, "payload": json.dumps([x] * 3)}

    if driver == "async":
        async def g(x):
            return body(x)

        f = memolab.memo(g)
        call: Callable[[Any], Any] = lambda x: asyncio.run(f(x))  # noqa: E731
    else:
        def g(x):
            return body(x)

        f = call = memolab.memo(g)
    monkeypatch.setattr(MemoFunction, "store", lambda self: store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degraded stores warn once per problem
        assert call(1) == {"x": 1, "payload": "[1, 1, 1]"}
        assert call(1) == {"x": 1, "payload": "[1, 1, 1]"}
        assert call(2)["x"] == 2
    if stores.kind in DIFFERS:
        assert ran == [1, 1, 2]  # differs: computed every time, stored never
    else:
        assert ran == [1, 2]


# -- blob stores: the local folder and the team's (a folder, S3, fsspec) ----------------------------
#
# Expected to differ by design (``store.protocols``): the local folder is written by content
# (``put(data) -> (digest, size)``), a remote one under the digest the caller computed
# (``put(digest, data) -> bool``); an absent blob's ``size`` is 0 locally, None remotely.

BLOB_KINDS = ["local", "file", "s3", "fsspec-memory"]


@pytest.fixture(params=BLOB_KINDS)
def blobs(request, tmp_path):
    kind = request.param
    if kind == "local":
        from memolab.store.blobs import BlobFolder

        yield kind, BlobFolder(tmp_path / "b")
        return
    from memolab.team.blobs import open_blobs

    if kind == "file":
        (tmp_path / "tb").mkdir()
        url = (tmp_path / "tb").as_uri()
    elif kind == "s3":
        url = request.getfixturevalue("s3_bucket")
    else:
        require("fsspec")
        url = f"memory://memolab-conformance/{tmp_path.name}"
    rb = open_blobs(url)
    yield kind, rb
    close = getattr(rb, "close", None)
    if close is not None:
        close()


def put(kind: str, b: Any, data: bytes) -> str:
    from memolab.store.blobs import digest_bytes

    if kind == "local":
        digest, size = b.put(data)
        assert (digest, size) == (digest_bytes(data), len(data))
        return digest
    digest = digest_bytes(data)
    b.put(digest, data)
    return digest


def test_blob_store_protocols(blobs):
    kind, b = blobs
    assert isinstance(b, BlobReader)
    assert isinstance(b, LocalBlobs if kind == "local" else RemoteBlobs)


def test_blob_round_trip_size_and_delete(blobs):
    kind, b = blobs
    data = b"conformance" * 1000
    digest = put(kind, b, data)
    assert bytes(b.get(digest, len(data))) == data
    assert b.size(digest) == len(data)
    put(kind, b, data)  # content-addressed: putting it again changes nothing
    assert bytes(b.get(digest, len(data))) == data
    if kind == "local":
        b.delete(digest)
    else:
        b.delete([digest])  # differs: a remote store deletes in batches
    assert b.size(digest) == (0 if kind == "local" else None)  # differs: absent is 0 locally, None remotely
    with pytest.raises(StoreMiss):  # (CorruptBlob: missing)
        b.get(digest, len(data))


def test_a_blob_of_the_wrong_size_is_refused(blobs):
    kind, b = blobs
    data = b"z" * 5000
    digest = put(kind, b, data)
    with pytest.raises(StoreMiss):
        b.get(digest, len(data) + 1)


def test_a_file_read_by_path_is_checked_on_every_store(stores, tmp_path, monkeypatch):
    """The record of the files a body read rides in its row's snapshot: every store keeps it, and
    a hit through any of them (another machine's through the team) checks it (``memolab.inputs.reads``)."""
    from conftest import Calls
    from memolab.calls.memo import MemoFunction

    data = tmp_path / "rows.csv"
    data.write_text("x\n1\n")
    ran = Calls()

    def count(path):
        ran.append(path)
        with open(path) as f:
            return len(f.read().splitlines())

    f = memolab.memo(count)
    store = stores.open()
    monkeypatch.setattr(MemoFunction, "store", lambda self: store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degraded stores warn once per problem
        assert f(str(data)) == 2 and f(str(data)) == 2
        data.write_text("x\n1\n2\n")
        assert f(str(data)) == 3 and f(str(data)) == 3
    if stores.kind in DIFFERS:
        assert len(ran) == 4  # differs: computed every time, stored never
        return
    assert len(ran) == 2
    if is_team(stores.kind):
        store.journal.drain()
        other = stores.open("other-machine")  # a store of its own, finding the row through the team
        monkeypatch.setattr(MemoFunction, "store", lambda self: other)
        assert f(str(data)) == 3 and len(ran) == 2  # the same file, unchanged: the team's row is used
        data.write_text("x\n")
        assert f(str(data)) == 1 and len(ran) == 3
