"""The state a call runs under and the draws it makes (issue 47, sections 0 and 2): a
``DataLoader``'s base seed without workers joins no key (``memolab.torch.loaderseed``);
autocast, grad mode and the default device are switches of the key
(``memolab.torch.numerics``); a library decorator's arguments count by value
(``memolab.codegraph.decorators``). Each test runs fresh processes (docs/torch.md,
docs/cache-rules.md, docs/code-dependencies.md)."""
from __future__ import annotations

import pytest

from conftest import require

require("torch")

# torch imported before memolab: its generator counts by its exact state, as in most scripts
LOADERS = r'''
import json, sys
import torch
import memolab
from torch.utils.data import DataLoader, TensorDataset

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()
mode = sys.argv[1]
if mode.startswith("seeded"):
    torch.manual_seed(0)
ds = TensorDataset(torch.arange(16.0))

@memolab.memo
def firsts(dl):
    calls.append("firsts")
    return [float(b[0][0]) for b in dl]

@memolab.memo
def then_draws(dl):
    calls.append("then_draws")
    out = [float(b[0][0]) for b in dl]
    return out + [float(torch.rand(1))]

@memolab.memo
def reads_seed(dl):
    calls.append("reads_seed")
    it = iter(dl)
    return it._base_seed % 1000

@memolab.memo
def reseeds(dl):
    calls.append("reseeds")
    out = [float(b[0][0]) for b in dl]
    torch.manual_seed(1)  # after the loader's base seed, before any draw of its own
    return out + [float(torch.rand(1))]

@memolab.memo
def outer(dl):
    calls.append("outer")
    return firsts(dl)  # a hit inside: its base seed drawn again, no draw of this body either

class Eager(torch.utils.data.Sampler):
    """Draws its order from the global generator in ``iter()`` itself, before the base seed."""

    def __len__(self):
        return 16

    def __iter__(self):
        return iter(torch.randperm(16).tolist())

out = {}
if mode == "unseeded":
    plain = DataLoader(ds, batch_size=4)
    shuffled = DataLoader(ds, batch_size=4, shuffle=True)
    workers = DataLoader(ds, batch_size=8, num_workers=1)
    out["plain"] = firsts(plain)
    out["shuffled"] = firsts(shuffled)
    out["why shuffled"] = str(firsts.explain(shuffled))
    out["workers"] = firsts(workers)
    out["why workers"] = str(firsts.explain(workers))
    out["eager"] = firsts(DataLoader(ds, batch_size=4, sampler=Eager()))
    out["reseeds"] = reseeds(plain)
    out["outer"] = outer(plain)
else:
    run = (lambda f, *a: f.__wrapped__(*a)) if mode == "seeded truth" else (lambda f, *a: f(*a))
    out["firsts"] = run(firsts, DataLoader(ds, batch_size=2))
    out["then_draws"] = run(then_draws, DataLoader(ds, batch_size=8))
    out["reads_seed"] = run(reads_seed, DataLoader(ds, batch_size=8))
    out["after"] = float(torch.rand(1))  # where the bodies left the global generator
out["calls"] = calls
print(json.dumps(out))
'''


@pytest.mark.preload("torch", "numpy")  # its scripts import torch first: forked runs (tests/zygote.py)
def test_loader_base_seed_without_workers_joins_no_key(project):
    project.write("loaders.py", LOADERS)
    first = project.run_json("loaders.py", "unseeded")
    assert first["calls"] == ["firsts"] * 4 + ["reseeds", "outer"] and first["plain"] == [0, 4, 8, 12]
    again = project.run_json("loaders.py", "unseeded")  # another unseeded process
    # a plain loader hits; a shuffling one orders its batches with the global generator, a worker is
    # seeded by it, a sampler draws from it eagerly: each keyed by its state (a miss here); why is said
    assert again["calls"] == ["firsts"] * 3 and again["plain"] == first["plain"]
    assert again["reseeds"] == first["reseeds"]  # the base seed, then a seed: no draw of the caller's state
    assert "the loader shuffles with the global torch generator: seed it, or give the DataLoader a generator" \
        in again["why shuffled"], again["why shuffled"]
    assert "the loader seeds its worker processes from the global torch generator" in again["why workers"], \
        again["why workers"]
    # seeded: hits, and each leaves the global generator where the body does (the truth, un-memoized);
    # a body reading the base seed depends on it
    truth = project.run_json("loaders.py", "seeded truth")
    computed = project.run_json("loaders.py", "seeded")
    hit = project.run_json("loaders.py", "seeded")
    assert computed["calls"] == ["firsts", "then_draws", "reads_seed"] and hit["calls"] == []
    for out in (computed, hit):
        assert dict(out, calls=[]) == dict(truth, calls=[])


SWITCHES = r'''
import json, sys
import memolab

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()

@memolab.memo
def make(n):
    calls.append(n)
    import torch
    a = torch.ones(n, n, requires_grad=True) / 3
    y = a @ a
    return [str(y.dtype), str(y.device), y.requires_grad, y.is_inference()]

out = {"before torch": make.key(3)[2]}
import torch

def call(name):
    out[name] = make(3)
    out[name + " key"] = make.key(3)[2]

call("plain")
with torch.autocast("cpu"):
    call("autocast")
with torch.autocast("cpu", dtype=torch.float16):
    call("autocast f16")
with torch.no_grad():
    call("no_grad")
with torch.inference_mode():
    call("inference")
torch.set_default_device("meta")
call("meta")
torch.set_default_device(None)
call("after")  # every state back at its default: the key of ``plain``
out["calls"] = len(calls)
print(json.dumps(out))
'''


def test_autocast_grad_mode_and_default_device_join_the_key_and_code_outside_keys_as_before(project):
    project.write("states.py", SWITCHES)
    first = project.run_json("states.py")
    assert first["calls"] == 6  # each state its own evaluation; ``after`` hit ``plain``
    assert first["plain"] == ["torch.float32", "cpu", True, False]
    assert first["autocast"][0] == "torch.bfloat16" and first["autocast f16"][0] == "torch.float16"
    assert first["no_grad"] == ["torch.float32", "cpu", False, False]
    assert first["inference"] == ["torch.float32", "cpu", False, True]
    assert first["meta"][1] == "meta"
    # outside them the key is the one made before torch was imported (no switch joins it), after
    # a state was entered and left too, and in another process
    assert first["before torch"] == first["plain key"] == first["after key"]
    again = project.run_json("states.py")
    assert again["calls"] == 0 and dict(again, calls=6) == first


HELPERS = '''
import functools
import torch

@torch.autocast("cpu", dtype=torch.bfloat16)
def helper(a):
    return a @ a

@torch.no_grad()
def doubled(a):
    return a * 2

class Net(torch.nn.Module):
    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(self, a):
        return a @ a

@torch.compile(backend="eager", dynamic=False)
def compiled(a):
    return a + 1

@functools.partial(torch.compile, backend="eager", dynamic=False)
def compiled_by_partial(a):
    return a + 2
'''

MAIN = '''
import json
import torch
import memolab
import helpers

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()

@memolab.memo
def via_helper(n):
    calls.append("via_helper")
    return str(helpers.helper(torch.ones(n, n)).dtype)

@memolab.memo
def via_grad(n):
    calls.append("via_grad")
    return helpers.doubled(torch.ones(n, requires_grad=True)).requires_grad

@memolab.memo
def via_module(net, n):
    calls.append("via_module")
    return str(net(torch.ones(n, n)).dtype)

@memolab.memo
def via_compiled(n):
    calls.append("via_compiled")
    return float(helpers.compiled(torch.ones(n)).sum())

@memolab.memo
def via_partial(n):
    calls.append("via_partial")
    return float(helpers.compiled_by_partial(torch.ones(n)).sum())

@memolab.memo
@torch.autocast("cpu", dtype=torch.bfloat16)
def itself(n):
    calls.append("itself")
    a = torch.ones(n, n)
    return str((a @ a).dtype)

out = [via_helper(3), via_grad(3), via_module(helpers.Net(), 3), via_compiled(3), via_partial(3), itself(3)]
print(json.dumps({"out": out, "calls": sorted(calls)}))
'''


@pytest.mark.preload("torch", "numpy")  # its scripts import torch first: forked runs (tests/zygote.py)
def test_library_decorator_arguments_count(project):
    project.write("helpers.py", HELPERS)
    project.write("main.py", MAIN)
    first = project.run_json("main.py")
    assert first["out"] == ["torch.bfloat16", False, "torch.bfloat16", 3.0 * 2, 3.0 * 3, "torch.bfloat16"]
    assert project.run_json("main.py")["calls"] == []
    project.write("helpers.py", HELPERS.replace("dtype=torch.bfloat16", "dtype=torch.float16")
                  .replace("torch.no_grad()", "torch.enable_grad()").replace("dynamic=False", "dynamic=True"))
    project.write("main.py", MAIN.replace("dtype=torch.bfloat16", "dtype=torch.float16"))
    edited = project.run_json("main.py")
    assert edited["out"] == ["torch.float16", True, "torch.float16", 3.0 * 2, 3.0 * 3, "torch.float16"]
    assert edited["calls"] == sorted(["via_helper", "via_grad", "via_module", "via_compiled", "via_partial", "itself"])
    assert project.run_json("main.py")["calls"] == []


def test_a_result_without_replayed_draws_pickles_as_before():
    # rows whose body made no neutral draw keep the form every memolab reads
    import pickle

    from memolab.inputs import globalrng

    plain = globalrng.Result(1, {"torch": "d"}, {})
    assert plain.__reduce__()[1] == (1, {"torch": "d"}, {})
    back = pickle.loads(pickle.dumps(globalrng.Result(2, {}, {}, {"torch": ["torch.loader_base_seed"]})))
    assert (back.value, back.replay) == (2, {"torch": ["torch.loader_base_seed"]})
    assert pickle.loads(pickle.dumps(plain)).replay == {}
