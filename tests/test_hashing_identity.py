"""Identity caches: reused only where a change would be detected; every unsafe case rehashes.

Each test that shows a cache *hit* proves it by a counter of leaf digests
actually computed; each unsafe case mutates the object and checks the digest
follows the new content (equal to the digest of a fresh copy).
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import memolab
from conftest import require
from memolab.hashing import hash_value as H, identity


@pytest.fixture
def computed(leaf_digests):
    return leaf_digests(np.zeros(1))


def frozen(values) -> np.ndarray:
    """A read-only array over immutable memory (bytes)."""
    return np.frombuffer(np.asarray(values, dtype=np.float64).tobytes(), dtype=np.float64)


# -- numpy --------------------------------------------------------------------------------

def test_array_over_immutable_memory_is_hashed_once(computed):
    a = frozen(range(1000))
    d = H(a)
    assert computed["n"] == 1
    for _ in range(3):
        assert H(a) == d
    assert computed["n"] == 1
    assert H(a) == H(np.arange(1000, dtype=np.float64))  # same digest as a writeable copy


def test_writeable_array_rehashes_after_setitem(computed):
    a = np.zeros(1000)
    d = H(a)
    a[0] = 1
    assert H(a) != d and H(a) == H(a.copy())
    assert computed["n"] >= 3  # never served from the cache


def test_readonly_flag_alone_is_not_trusted(computed):
    a = np.zeros(100)
    a.flags.writeable = False
    d = H(a)
    a.flags.writeable = True  # the owner may flip it back...
    a[0] = 7
    a.flags.writeable = False  # ...and hide the change
    assert H(a) != d and H(a) == H(a.copy())


def test_readonly_view_of_writeable_array_rehashes(computed):
    base = np.zeros(100)
    view = base[10:]
    view.flags.writeable = False
    d = H(view)
    base[50] = 3
    assert H(view) != d


def test_inplace_reshape_and_dtype_change_the_stamp():
    a = frozen(range(12))
    d = H(a)
    a.shape = (3, 4)
    assert H(a) != d and H(a) == H(np.arange(12.0).reshape(3, 4))
    b = frozen(range(4))
    d = H(b)
    b.dtype = np.int64
    assert H(b) != d


def test_users_readonly_mmap_is_not_trusted(tmp_path, computed):
    p = tmp_path / "x.bin"
    p.write_bytes(np.zeros(100).tobytes())
    m = np.memmap(p, dtype=np.float64, mode="r")
    d = H(m)
    with open(p, "r+b") as f:  # another writer changes the file under the mapping
        f.write(np.ones(1).tobytes())
    assert H(m) != d


def test_mutated_list_inside_dataset_object_rehashes(computed):
    class Dataset:
        def __init__(self):
            self.data = frozen(range(1000))
            self.labels = [0, 1, 2]

    ds = Dataset()
    d = H(ds)
    ds.labels.append(3)
    d2 = H(ds)
    assert d2 != d
    assert computed["n"] == 1  # the array leaf still came from the cache
    ds.data = frozen(range(1001))
    assert H(ds) != d2


def test_freed_object_and_reused_id_never_match(computed):
    # Make ids collide: free an array and allocate others until one lands on its id. The
    # buffers are made first, so each try allocates one array object (the freed one's size):
    # another thread (pytest-xdist's) may take the freed slot, so a round can be tried again.
    bufs = [np.asarray([float(i)] * 64).tobytes() for i in range(64)]
    hit = None
    keep = []
    for _ in range(50):
        a = np.frombuffer(bufs[0], dtype=np.float64)
        H(a)
        old_id = id(a)
        assert identity.stats()[0] >= 1
        del a
        gc.collect()
        assert old_id not in identity._entries  # entry dropped by the weakref callback
        for i in range(1, 400):
            b = np.frombuffer(bufs[1 + i % (len(bufs) - 1)], dtype=np.float64)  # never a's content
            if id(b) == old_id:
                hit = b
                break
            keep.append(b)
        if hit is not None:
            break
    assert hit is not None, "could not provoke an id reuse"
    assert not np.array_equal(hit, np.frombuffer(bufs[0], dtype=np.float64))
    assert H(hit) == H(np.array(hit))  # hashed by its own content


def test_reused_id_with_a_live_stale_entry_does_not_match():
    # Even if an entry outlived its object (no callback yet), the weakref check refuses it.
    class Box:
        pass

    a = Box()
    identity.remember(a, ("s",), b"x" * 16)
    ref = identity._entries[id(a)].ref
    identity._entries[id(a)].ref = weakref.ref(Box())  # a dead reference under a's id
    assert identity.lookup(a, ("s",)) is None
    identity._entries[id(a)].ref = ref
    assert identity.lookup(a, ("s",)) == b"x" * 16
    assert identity.lookup(a, ("other",)) is None


def test_identity_cache_can_be_switched_off(monkeypatch, computed):
    monkeypatch.setattr(identity, "enabled", False)
    a = frozen(range(10))
    H(a)
    H(a)
    assert computed["n"] == 2


# -- results loaded from the store ------------------------------------------------------

def test_loaded_result_is_hashed_in_o1_under_its_stored_digest(tmp_store, computed):
    @memolab.memo
    def load(n):
        return np.arange(n, dtype=np.float32) * 2

    @memolab.memo
    def total(ds):
        return float(ds.sum())

    fresh = load(200_000)
    assert fresh.flags.writeable  # the computed object itself is not trusted
    load.store().forget()  # force a load from disk (memory-mapped blobs)
    ds = load(200_000)
    assert not ds.flags.writeable
    assert identity.origin_of(ds) is not None  # id -> evaluation
    n = computed["n"]
    assert total(ds) == float(fresh.sum())
    assert total(ds) == float(fresh.sum())
    assert computed["n"] == n  # never rehashed: the stored digest was used

    # an in-memory hit returns a new object, registered the same way
    again = load(200_000)
    assert again is not ds and identity.origin_of(again) is not None
    H(again)
    assert computed["n"] == n
    assert H(ds) == H(again) == H(fresh)  # and it is the digest the content has


def test_loaded_tuple_of_arrays_is_registered_leaf_by_leaf(tmp_store, computed):
    @memolab.memo
    def split(n):
        x = np.arange(n, dtype=np.float64)
        return x[: n // 2].copy(), {"test": x[n // 2:].copy()}

    ref_train, ref_test = split(100_000)
    split.store().forget()
    train, test = split(100_000)
    n = computed["n"]
    d_train, d_test = H(train), H(test["test"])
    assert computed["n"] == n
    assert d_train == H(ref_train) and d_test == H(ref_test["test"])


def test_loaded_result_in_a_new_process(project):
    project.write("pipe.py", """
        import json, numpy as np, memolab
        from memolab import hashing
        from memolab.hashing import identity

        @memolab.memo
        def load(n):
            return np.arange(n, dtype=np.float32)

        ds = load(100_000)
        leaf = hashing._leaves[np.ndarray]
        print(json.dumps({"origin": identity.origin_of(ds), "cached": identity.lookup(ds, leaf.stamp(ds)) is not None,
                          "digest": hashing.hash_value(ds), "copy": hashing.hash_value(np.array(ds))}))
    """)
    first = project.run_json("pipe.py")
    second = project.run_json("pipe.py")
    # computed: its evaluation is known (lineage), but nothing vouches for its digest
    assert first["origin"] == 1 and not first["cached"]
    assert second["origin"] is not None and second["cached"]
    assert second["digest"] == second["copy"] == first["digest"]


# -- torch --------------------------------------------------------------------------------

torch = require("torch")


@pytest.fixture
def tcomputed(leaf_digests):
    return leaf_digests(torch.zeros(1))


def test_unchanged_tensor_is_hashed_once(tcomputed):
    t = torch.arange(1000.0)
    d = H(t)
    assert H(t) == d and H([t, 1]) == H([t.clone(), 1])
    assert tcomputed["n"] == 2  # t once, the clone once


@pytest.mark.parametrize("op", [
    lambda t: t.add_(1),
    lambda t: t.__setitem__(3, 5.0),
    lambda t: torch.add(torch.ones_like(t), 1, out=t),
    lambda t: t[10:20].mul_(3),  # through a view
    lambda t: t.detach().zero_(),  # detach shares the version counter
    lambda t: t.copy_(torch.randn_like(t)),
    lambda t: t.resize_(10),
    lambda t: t.unsqueeze_(0),
])
def test_inplace_tensor_ops_rehash(op, tcomputed):
    t = torch.arange(1000.0)
    d = H(t)
    with torch.no_grad():
        op(t)
    assert H(t) != d
    assert H(t) == H(t.clone())


def test_parameters_are_never_taken_from_the_cache(tcomputed):
    p = torch.nn.Parameter(torch.zeros(100))
    d = H(p)
    p.data.add_(1)  # bypasses the version counter
    assert H(p) != d


def test_module_buffers_changed_by_kernels_rehash():
    bn = torch.nn.BatchNorm1d(4)
    d = H(bn)
    v = bn.running_mean._version
    bn(torch.randn(8, 4))
    assert bn.running_mean._version == v  # the counter did not move (measured pitfall)...
    assert H(bn) != d  # ...but the module digest follows the new running stats


def test_tensor_sharing_memory_with_numpy_rehashes():
    arr = np.zeros(100, dtype=np.float32)
    t = torch.from_numpy(arr)
    d = H(t)
    arr[0] = 1  # invisible to t._version
    assert H(t) != d


def test_tensor_exported_with_numpy_after_caching_rehashes(tcomputed):
    t = torch.zeros(100)
    d = H(t)
    H(t)
    assert tcomputed["n"] == 1  # cached...
    t.numpy()[0] = 1  # ...then written through a numpy view, which t._version misses
    assert H(t) != d and H(t) == H(t.clone())


def test_inference_tensors_have_no_version_and_rehash():
    with torch.inference_mode():
        t = torch.zeros(100)
    d = H(t)
    with torch.inference_mode():
        t.add_(1)
    assert H(t) != d


def test_loaded_tensor_results_are_trusted_until_something_could_write(tmp_store, tcomputed):
    """A loaded tensor is a private (copy-on-write) mapping of its blob: its stored digest
    is trusted while the page table shows no page of it written, and any write (here a
    ``t.numpy()`` write, invisible to ``t._version``) ends that."""
    from memolab.torch import tensors

    @memolab.memo
    def make(n):
        return torch.arange(n, dtype=torch.float32)

    expected = H(make(50_000).clone())
    make.store().forget()
    t = make(50_000)
    assert tensors._stamp(t) is not None
    n = tcomputed["n"]
    d = H(t)
    assert d == expected and tcomputed["n"] == n  # the stored digest, nothing hashed
    assert tensors._stamp(t) is not None  # hashing read it: no page written
    t.numpy()[0] = -5
    assert tensors._stamp(t) is None
    assert H(t) != d and H(t) == H(t.clone())
    u = make(50_000)  # another load: its own lazy clone, unaffected by the write to t
    assert H(u) == expected and float(u[0]) == 0.0
