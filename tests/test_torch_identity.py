"""Identity caches for memoized torch results (docs/torch.md, "Identity caches").

A dataset, loader or tensor returned by a memoized call is hashed in O(1) on
later calls (counted: no tensor digest computed) until it changes; every
mutation route makes the key follow the new content (equal to a fresh copy's).
"""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")
np = require("numpy")

import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

import memolab  # noqa: E402
from conftest import Calls  # noqa: E402, require
from memolab import hashing  # noqa: E402
from memolab.hashing import hash_value as H  # noqa: E402


@pytest.fixture
def digests(leaf_digests):
    """Counts tensor digests actually computed (identity-cache misses)."""
    return leaf_digests(torch.zeros(1))


class Images(Dataset):
    """A user dataset: tensors plus plain Python attributes."""

    def __init__(self, n):
        self.x = torch.randn(n, 8)
        self.y = torch.arange(n)
        self.names = [f"img{i}" for i in range(4)]
        self.scale = 1.0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i] * self.scale, self.y[i]


@memolab.memo
def load_images(n):
    torch.manual_seed(0)
    return Images(n)


@memolab.memo
def make_loader(n):
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.arange(n)), batch_size=16, shuffle=True,
                      generator=torch.Generator().manual_seed(0))


@memolab.memo
def make_tensor(n):
    return torch.arange(float(n))


@memolab.memo
def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))


def _o1(value, digests):
    n = digests["n"]
    hashing.hash_arguments([("v", value)])
    hashing.hash_arguments([("v", value)])
    return digests["n"] == n


@pytest.mark.parametrize("make", [lambda: load_images(1000), lambda: make_loader(1000), lambda: make_tensor(1000)],
                         ids=["dataset", "loader", "tensor"])
def test_result_in_the_computing_process_is_hashed_in_o1(tmp_store, digests, make):
    value = make()
    assert _o1(value, digests)
    assert H(value) == H(_copy(value))  # and the digest is the content's


def test_module_results_are_rehashed_no_stamp_proves_them_unchanged(tmp_store, digests):
    net = make_net()
    n = digests["n"]
    H(net)
    assert digests["n"] > n  # parameters (p.data writes) and buffers (kernels) bypass the version counter
    d = H(net)
    with torch.no_grad():
        for p in net.parameters():
            p.data.add_(1)
    assert H(net) != d


def _copy(value):
    import copy

    return copy.deepcopy(value)


# -- every mutation route is a miss --------------------------------------------------------

def _tensor_routes():
    def setitem(t):
        t[3] = 7.0

    def numpy_view(t):
        t.numpy()[5] = -1.0  # invisible to the version counter; flips the storage's resizable flag

    def data_assign(t):
        t.data = torch.zeros_like(t)

    return {"inplace": lambda t: t.mul_(2), "setitem": setitem, "numpy view": numpy_view,
            "data assignment": data_assign}


@pytest.mark.parametrize("route", sorted(_tensor_routes()))
def test_tensor_result_mutation_routes_miss(tmp_store, route):
    calls = Calls()

    @memolab.memo
    def total(t):
        calls.append(1)
        return float(t.sum())

    t = make_tensor(1000)
    total(t)
    total(t)
    assert len(calls) == 1
    d = H(t)
    _tensor_routes()[route](t)
    assert H(t) != d and H(t) == H(t.clone())
    assert total(t) == float(t.sum()) and len(calls) == 2


@pytest.mark.parametrize("route", ["tensor in place", "numpy view", "attribute rebound", "list appended",
                                   "scalar attribute"])
def test_dataset_result_mutation_routes_miss(tmp_store, route):
    ds = load_images(200)
    d = H(ds)
    if route == "tensor in place":
        ds.x[0, 0] += 1
    elif route == "numpy view":
        ds.y.numpy()[0] = 99
    elif route == "attribute rebound":
        ds.x = ds.x.clone() * 2
    elif route == "list appended":
        ds.names.append("img-extra")
    elif route == "scalar attribute":
        ds.scale = 2.0
    assert H(ds) != d
    assert H(ds) == H(_copy(ds))


def test_loader_result_dataset_mutation_misses(tmp_store):
    dl = make_loader(100)
    d = H(dl)
    dl.dataset.tensors[0][0, 0] = 123.0
    assert H(dl) != d and H(dl) == H(_copy(dl))


def test_batchnorm_buffers_of_a_returned_module_miss(tmp_store):
    net = make_net()
    net.train()
    d = H(net)
    net(torch.randn(8, 4))  # running stats updated in the kernel, version counters unmoved
    assert H(net) != d
    bn = net[1]
    d = H(net)
    F.batch_norm(torch.randn(8, 4), bn.running_mean, bn.running_var, training=True)
    assert H(net) != d


# -- the process that loads the result from the store --------------------------------------

@pytest.mark.preload("torch", "numpy")  # its script imports torch (numpy) before memolab: forked runs (tests/zygote.py)
def test_loaded_results_in_a_new_process(project):
    """Loaded numpy leaves (read-only blob mappings) and torch tensors (lazy clones) are O(1)."""
    project.write("pipe.py", """
        import json, numpy as np, torch, memolab
        from memolab import hashing
        from memolab.torch import tensors

        class Frames(torch.utils.data.Dataset):
            def __init__(self, n):
                self.x = np.arange(n, dtype=np.float32)
                self.t = torch.arange(float(n))
            def __len__(self):
                return len(self.x)

        @memolab.memo
        def load(n):
            return Frames(n)

        counts = {"np": 0, "torch": 0}
        real_np, real_t = hashing._leaves.get, tensors.LEAF.digest
        ds = load(100_000)
        leaf_np = hashing._leaves[np.ndarray]
        np_digest = leaf_np.digest
        leaf_np.digest = lambda a: counts.__setitem__("np", counts["np"] + 1) or np_digest(a)
        tensors.LEAF.digest = lambda t: counts.__setitem__("torch", counts["torch"] + 1) or real_t(t)
        d1 = hashing.hash_value(ds)
        d2 = hashing.hash_value(ds)
        before = dict(counts)
        ds.t.numpy()[0] = -1.0   # a write no version counter sees
        d3 = hashing.hash_value(ds)
        print(json.dumps({"counts": before, "same": d1 == d2, "after_write": d3 != d2}))
    """)
    first = project.run_json("pipe.py")
    second = project.run_json("pipe.py")
    assert first["counts"]["np"] == 2  # computed, writeable array: never trusted
    assert first["counts"]["torch"] == 0  # computed tensor: digested when stored, then its stamp vouches
    assert second["counts"] == {"np": 0, "torch": 0}  # loaded: served from the stored digests
    assert second["same"] and second["after_write"] and first["after_write"]


@pytest.mark.parametrize("route", sorted(_tensor_routes()))
def test_loaded_tensor_mutation_routes_miss(tmp_store, route):
    make_tensor(100_000)
    make_tensor.store().forget()  # the next call loads from the store (an out-of-band blob)
    t = make_tensor(100_000)
    from memolab.torch import tensors

    assert tensors._stamp(t) is not None  # trusted until written
    d = H(t)
    _tensor_routes()[route](t)
    assert H(t) != d and H(t) == H(t.clone())


def test_loaded_dataset_and_loader_are_o1_and_follow_mutations(tmp_store, digests):
    load_images(300)
    make_loader(300)
    load_images.store().forget()
    ds, dl = load_images(300), make_loader(300)
    assert _o1(ds, digests) and _o1(dl, digests)
    d = H(dl)
    dl.dataset.tensors[1][0] = 77
    assert H(dl) != d and H(dl) == H(_copy(dl))
    d = H(ds)
    ds.x.mul_(2)
    assert H(ds) != d and H(ds) == H(_copy(ds))


def test_a_loaded_tensor_is_a_private_mapping_of_its_blob(tmp_store, blob_results):
    """No copy at load: each hit maps the blob copy-on-write; a write to one hit reaches neither
    the blob nor another hit, and the identity cache trusts a hit until a page of it is written."""
    from memolab.torch import tensors

    make_tensor(200_000)
    make_tensor.store().forget()
    t = make_tensor(200_000)
    u = make_tensor(200_000)  # another hit: its own mapping
    assert tensors._mapping_of(t.untyped_storage()) is not None
    assert t.untyped_storage().data_ptr() != u.untyped_storage().data_ptr()
    d = H(t)
    assert tensors._stamp(t) is not None  # unwritten: O(1)
    t.numpy()[7] = -1.0  # a write no version counter sees
    assert tensors._stamp(t) is None and H(t) != d and H(t) == H(t.clone())
    assert float(u[7]) == 7.0  # the other hit is untouched
    make_tensor.store().forget()
    assert float(make_tensor(200_000)[7]) == 7.0  # and so is the blob
