"""The tensor identity cache against writes that move no version counter (issue 34, item 1).

Each route runs in a fresh process: a memoized ``evaluate`` is called on model or
optimizer state, the state is written the way training code writes it, and the
second call must return what the un-memoized function returns now. Every route here
returned the first call's value before the cache trusted only copy-on-write storages
(docs/torch.md, "Identity caches").
"""
from __future__ import annotations

import pytest

from conftest import require

torch = require("torch")

pytestmark = pytest.mark.preload("torch", "numpy")  # the runs fork from a server (tests/zygote.py)

SCRIPT = r'''
import copy, json, os, sys
import numpy as np
import torch
import memolab

route = sys.argv[1]

@memolab.memo
def evaluate(x):
    if isinstance(x, dict):
        return sum(float(v.double().sum()) for v in x.values())
    if isinstance(x, torch.nn.Module):
        return sum(float(v.double().sum()) for v in x.state_dict().values())
    return float(x.double().sum())

def step(model, opt):
    model(torch.randn(16, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))

if route == "state_dict after a fused AdamW step":
    x = model[0].state_dict()  # the Linear's: BatchNorm's step counter would move a version counter
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    evaluate(x)
    step(model, opt)
elif route == "exp_avg after a fused Adam step":
    opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
    step(model, opt)
    x = opt.state[model[0].weight]["exp_avg"]
    evaluate(x)
    step(model, opt)
elif route == "a module after a fused Adam step":
    x = model
    opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
    evaluate(x)
    step(model, opt)
elif route == "manual SGD through p.data":
    x = model[0].weight
    evaluate(x)
    x.data.add_(1.0)
elif route == "EMA of a model through .data":
    x = copy.deepcopy(model)
    evaluate(x)
    with torch.no_grad():
        for e, p in zip(x.parameters(), model.parameters()):
            e.data.mul_(0.5).add_(p.data + 1.0, alpha=0.5)
elif route == "BatchNorm running_mean after a forward in train mode":
    x = model[1].running_mean
    evaluate(x)
    model(torch.randn(16, 8))
elif route == "state_dict running_var after a forward in train mode":
    x = model.state_dict()["1.running_var"]
    evaluate(x)
    model(torch.randn(16, 8))
elif route == "a shared-memory tensor written by a forked child":
    x = torch.zeros(1000).share_memory_()
    evaluate(x)
    pid = os.fork()
    if pid == 0:
        x.add_(1.0)
        os._exit(0)
    os.waitpid(pid, 0)
elif route == "a set_ alias written through .data":
    base = torch.zeros(1000)
    x = torch.empty(0).set_(base.untyped_storage())
    evaluate(x)
    base.data.add_(1.0)
elif route == "written through numpy after the digest":
    x = torch.zeros(1000)
    evaluate(x)
    x.numpy()[:] = 2.0
elif route == "written through an earlier DLPack export":
    x = torch.zeros(1000)
    held = np.from_dlpack(x)
    evaluate(x)
    held[:] = 3.0
elif route == "written through an earlier DLPack export of a view":
    x = torch.zeros(1000)
    held = np.from_dlpack(x[10:])
    evaluate(x)
    held[:] = 3.0
elif route == "written through untyped_storage":
    x = torch.zeros(1000)
    evaluate(x)
    x.untyped_storage().fill_(1)
else:
    raise SystemExit(f"unknown route {route}")

got = evaluate(x)
print(json.dumps({"memoized": got, "truth": evaluate.fn(x)}))
'''

ROUTES = [
    "state_dict after a fused AdamW step",
    "exp_avg after a fused Adam step",
    "a module after a fused Adam step",
    "manual SGD through p.data",
    "EMA of a model through .data",
    "BatchNorm running_mean after a forward in train mode",
    "state_dict running_var after a forward in train mode",
    "a shared-memory tensor written by a forked child",
    "a set_ alias written through .data",
    "written through numpy after the digest",
    "written through an earlier DLPack export",
    "written through an earlier DLPack export of a view",
    "written through untyped_storage",
]


@pytest.mark.parametrize("route", ROUTES)
def test_a_write_no_version_counter_sees_is_a_miss(project, route):
    project.write("run.py", SCRIPT)
    out = project.run_json("run.py", route)
    assert out["memoized"] == out["truth"], route


O1_SCRIPT = r'''
import json
import torch
import memolab
from memolab.torch import tensors

@memolab.memo
def evaluate(model, opt):
    return sum(float(v.sum()) for v in model.state_dict().values())

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.BatchNorm1d(256), torch.nn.Linear(256, 4))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
model(torch.randn(8, 256)).sum().backward()
opt.step()
count = {"n": 0}
real = tensors.LEAF.digest
tensors.LEAF.digest = lambda t: count.__setitem__("n", count["n"] + 1) or real(t)
evaluate(model, opt)
first = count["n"]
evaluate(model, opt)
again = count["n"] - first
model.eval()  # Python-level state: walked on every call, never cached
evaluate(model, opt)
opt.step()  # foreach step: every parameter and moment written
evaluate(model, opt)
print(json.dumps({"first": first, "again": again, "after_step": count["n"] - first}))
'''


def test_an_unchanged_module_and_optimizer_are_keyed_without_rehashing(project):
    """What can be proven keeps the O(1) path: parameters, buffers and optimizer state whose
    storage stayed copy-on-write are not read again."""
    project.write("o1.py", O1_SCRIPT)
    out = project.run_json("o1.py")
    n_tensors = 6 + 1 + 2 * 6 + 6  # params + num_batches_tracked... (at least every param and moment)
    assert out["first"] >= 6 + 12  # every parameter and Adam moment hashed once
    assert out["again"] == 0  # unchanged: from the identity cache
    assert out["after_step"] >= 6 + 12  # a step wrote them all: rehashed
    assert out["first"] <= n_tensors + 10


def test_a_state_dict_of_live_parameters_is_rehashed_not_trusted():
    """A ``state_dict()`` alias shares its storage with a live parameter: nobody can rule out
    a raw address handed out through the parameter, so its digest is recomputed each call
    (the cost is in benchmarks/torch_objects.py), unless the parameter itself was proven."""
    from memolab import hashing
    from memolab.torch import tensors

    lin = torch.nn.Linear(64, 64)
    sd = lin.state_dict()
    assert tensors._track(sd["weight"]) is None  # two tensors on one storage: not adopted
    hashing.hash_value(sd)
    assert tensors._stamp(sd["weight"]) is None
    # the parameter hashed first (a module argument): its storage is adopted, and the alias
    # made afterwards shares that proof
    lin2 = torch.nn.Linear(64, 64)
    hashing.hash_value(lin2)
    assert tensors._stamp(lin2.state_dict()["weight"]) is not None


def test_adopting_a_storage_keeps_its_address_and_its_numbers():
    """Making a storage copy-on-write changes nothing the program can see: the data pointer
    stays where it was after the first write, and training gives bitwise the same numbers."""
    from memolab import hashing

    def train(adopt):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 1))
        opt = torch.optim.AdamW(m.parameters(), lr=0.05, fused=True)
        ptrs = [p.data_ptr() for p in m.parameters()]
        if adopt:
            hashing.hash_value(m)
            assert all(torch._C._is_cow_tensor(p) for p in m.parameters())
        for _ in range(5):
            if adopt:
                hashing.hash_value(m)
            m(torch.randn(32, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().clone() for p in m.parameters()], ptrs, [p.data_ptr() for p in m.parameters()]

    plain, _, _ = train(False)
    adopted, before, after = train(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, adopted, strict=False))
    assert before == after
