"""Arguments a memoized body changes in place (issue 48 §1, §3; docs/cache-rules.md, "Arguments the
body changes"; ``memolab.inputs.mutations``).

``train(dl, model, loss_fn, opt)`` trains its arguments and returns nothing or a loss: a hit must
leave the caller's model, optimizer, scheduler, generator, arrays and objects as the body would, so
that the program goes on as the un-memoized one does. Every case runs in fresh processes: once
un-memoized (``MEMO_OFF=1``, the truth), then memoized twice (the first computes, the second hits),
and each memoized run must print what the un-memoized one prints.
"""
from __future__ import annotations

import pytest

from conftest import require

require("torch")
require("numpy")
require("pandas")

pytestmark = pytest.mark.preload("torch", "numpy")  # the runs fork from a server (tests/zygote.py)

SCRIPT = r'''
import hashlib, io, json, os, sys, warnings
import numpy as np
import torch
import memolab
from torch.utils.data import DataLoader, TensorDataset

OFF = os.environ.get("MEMO_OFF") == "1"
memo = (lambda f: f) if OFF else memolab.memo
out = {}


class Calls(list):
    pass


memolab.register_opaque(Calls)  # what the bodies computed: no part of their code's digest
computed = Calls()


def tb(t):
    return t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()


def digest(*objs):
    """sha256 of the state_dicts' tensors, bitwise."""
    h = hashlib.sha256()
    for o in objs:
        for k, v in sorted(o.state_dict().items(), key=lambda kv: str(kv[0])):
            h.update(str(k).encode())
            h.update(repr(v).encode() if not isinstance(v, (dict, list, torch.Tensor)) else b"")
            if isinstance(v, torch.Tensor):
                h.update(tb(v))
            elif isinstance(v, dict):  # an optimizer's state
                for kk, vv in sorted(v.items(), key=lambda kv: str(kv[0])):
                    h.update(str(kk).encode())
                    for name, t in sorted(vv.items()) if isinstance(vv, dict) else []:
                        h.update(name.encode())
                        h.update(tb(t) if isinstance(t, torch.Tensor)
                                 else repr(t).encode())
            else:
                h.update(repr(v).encode())
    return h.hexdigest()


# -- the issue's three steps, then again from the start (a hit on this process's memory) ----------
@memo
def step(model, opt):
    computed.append("step")
    loss = model(torch.ones(1, 2)).sum(); opt.zero_grad(); loss.backward(); opt.step()
    return loss.item()

torch.manual_seed(0); model = torch.nn.Linear(2, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
start = {k: v.clone() for k, v in model.state_dict().items()}
out["steps"] = [round(step(model, opt), 4) for _ in range(3)] + [round(model.weight.sum().item(), 4)]
out["grad"] = None if model.weight.grad is None else model.weight.grad.tolist()
model.load_state_dict(start)
out["steps_again"] = [round(step(model, opt), 4) for _ in range(3)] + [round(model.weight.sum().item(), 4)]

# -- HitSave's fashionMNIST shape: a synthetic dataset, BatchNorm, fused Adam, a scheduler --------
g = torch.Generator().manual_seed(1)
X, y = torch.randn(96, 1, 6, 6, generator=g), torch.randint(0, 4, (96,), generator=g)
dl = DataLoader(TensorDataset(X, y), batch_size=32)

@memo
def train(dataloader, model, loss_fn, optimizer, scheduler):
    computed.append("train")
    model.train()
    for xb, yb in dataloader:
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad(); loss.backward(); optimizer.step()
    scheduler.step()

@memo
def test(dataloader, model, loss_fn):
    computed.append("test")
    model.eval()
    total = 0.0
    with torch.no_grad():
        for xb, yb in dataloader:
            total += loss_fn(model(xb), yb).item()
    return total / len(dataloader)

torch.manual_seed(2)
net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                          torch.nn.Linear(16, 4))
adam = torch.optim.Adam(net.parameters(), lr=0.05, fused=True)
sched = torch.optim.lr_scheduler.StepLR(adam, step_size=1, gamma=0.5)
loss_fn = torch.nn.CrossEntropyLoss()
losses = []
for t in range(3):
    train(dl, net, loss_fn, adam, sched)
    losses.append(test(dl, net, loss_fn))
out["losses"] = losses
out["state"] = digest(net, adam, sched)
out["grads"] = [None if p.grad is None else tb(p.grad).hex()[:64] + str(p.grad.shape) for p in net.parameters()]
out["training"] = net.training
out["lr"] = adam.param_groups[0]["lr"]

# -- writes no version counter sees: BatchNorm's kernel, a write through .data --------------------
@memo
def calibrate(m, x):
    computed.append("calibrate")
    with torch.no_grad():
        m(x)  # in train mode: the running statistics are written by the kernel
    return 0


@memo
def nudge(m):
    computed.append("nudge")
    m.weight.data.add_(1.0)  # through .data: no version counter moves
    return 0


torch.manual_seed(4)
bn = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
x4 = torch.randn(8, 4)
for _ in range(2):
    calibrate(bn, x4)
nudge(bn[0]); nudge(bn[0])
out["bn"] = [tb(bn[1].running_mean).hex(), tb(bn[1].running_var).hex(), int(bn[1].num_batches_tracked)]
out["nudged"] = tb(bn[0].weight).hex()

# -- a body that returns its argument returns the caller's object ----------------------------------
@memo
def fit(m):
    computed.append("fit")
    with torch.no_grad():
        m.weight.add_(1.0)
    return m

@memo
def pair(m, k):
    computed.append("pair")
    return m, k * 2

lin = torch.nn.Linear(2, 2)
with torch.no_grad():
    lin.weight.fill_(0.5); lin.bias.fill_(0.0)
res = fit(lin)
out["returned_is_argument"] = res is lin
out["fit_weight"] = lin.weight.sum().item()
p = pair(lin, 3)
out["pair"] = [p[0] is lin, p[1]]

# -- numpy arrays, plain objects, containers, a torch.Generator, a numpy Generator -----------------
class Tally:
    def __init__(self):
        self.items = []
        self.count = 0
        self.seen = {}

@memo
def scale(a, tally, g, rng):
    computed.append("scale")
    a *= 2
    tally.items.append(float(a.sum())); tally.count += 1; tally.seen[len(tally.items)] = "x"
    return float(torch.rand(1, generator=g)) + float(rng.random())

arr = np.arange(6, dtype=np.float64)
view = arr[2:]
tally, gen, nrng = Tally(), torch.Generator().manual_seed(5), np.random.default_rng(7)
out["scaled"] = [scale(arr, tally, gen, nrng) for _ in range(2)]
out["arr"] = arr.tolist(); out["view"] = view.tolist()
out["tally"] = [tally.items, tally.count, sorted(tally.seen)]
out["after_gen"] = [float(torch.rand(1, generator=gen)), float(nrng.random())]

# -- a pandas DataFrame given a column and a value in place -------------------------------------------
import pandas as pd


@memo
def add_column(df):
    computed.append("add_column")
    df["c"] = df["a"] * 2
    df.loc[0, "a"] = 100
    return len(df)


frame = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]})
out["add_column"] = add_column(frame)
out["frame"] = frame.to_dict()

# -- a resumable loader a body takes two batches of: the next iter() goes on where the body stopped --
from memolab.torch import resumable


@memo
def head(r):
    computed.append("head")
    it = iter(r)
    return [float(next(it)[0].sum()) for _ in range(2)]


torch.manual_seed(3)
r = resumable(DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True))
out["head"] = head(r)
out["rest"] = [float(b[0].sum()) for b in r]
out["after_rest"] = float(torch.rand(1))

# -- what cannot be put back: warned at the caller's line, naming the path; not stored --------------
unstored = Calls()


class Holder:
    def __init__(self):
        self.it = None
        self.n = 0


@memo
def start(h):
    unstored.append("start")
    h.n += 1
    h.it = iter(range(3))  # a live iterator: no copy of it is the caller's
    return h.n


@memo
def first_batch(loader):
    unstored.append("first_batch")
    return float(next(iter(loader))[0].sum())  # persistent workers: the loader keeps its _iterator


@memo
def append(f):
    unstored.append("append")
    with open(f, "a") as fh:  # the argument's file, rewritten by the body: its key's content is gone
        fh.write("b\n")
    return 1


# -- issue 48 §3: a memolab.File argument and a body drawing from the global torch generator --------
@memo
def noisy(f):
    computed.append("noisy")
    with open(f) as fh:
        return float(torch.rand(1)) + len(fh.read())


with open("rows.txt", "w") as fh:
    fh.write("1,2,3\n")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["start"] = start(Holder())
    pdl = DataLoader(TensorDataset(X, y), batch_size=32, num_workers=1, persistent_workers=True)
    out["first_batch"] = first_batch(pdl)
    with open("log.txt", "w") as fh:
        fh.write("a\n")
    out["appended"] = append(memolab.File("log.txt"))
    out["noisy"] = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        out["noisy"].append(noisy(memolab.File("rows.txt")))
out["warnings"] = [[os.path.basename(w.filename), str(w.message)] for w in caught
                   if issubclass(w.category, memolab.MemolabWarning)]
out["computed"] = computed
out["unstored"] = unstored
print(json.dumps(out))
'''


def test_a_hit_leaves_the_arguments_as_the_body_left_them(project):
    """The issue's 3-step loop, HitSave's fashionMNIST shape (BatchNorm, fused Adam, StepLR: writes
    no version counter sees; the gradients), BatchNorm's statistics and a ``.data`` write alone,
    ``return model``, numpy arrays (with a view), plain objects, containers
    and generators: the second memoized process computes nothing and prints what the un-memoized run
    prints, the state_dicts' bytes included; a repeat of the 3 steps from the start in one process
    (answered from this process's memory in the second) too."""
    project.write("train.py", SCRIPT)
    truth = project.run_json("train.py", env={"MEMO_OFF": "1"})
    first = project.run_json("train.py")
    second = project.run_json("train.py")
    assert truth["steps"] == [-0.208, -0.508, -0.808, -0.226]
    for got in (first, second):
        for k, v in truth.items():
            if k not in ("computed", "warnings"):
                assert got[k] == v, f"{k}: {got[k]} != {v} (un-memoized)"
    # the 3 steps again from the start hit in the first process too (the rows it stored)
    assert first["computed"] == truth["computed"][3:]
    # the second process computes nothing: every call hits, from the store or from its memory
    assert second["computed"] == [], second["computed"]
    # what cannot be put back is computed in every process, with a warning at the caller's line
    for got in (first, second):
        assert got["unstored"] == ["start", "first_batch", "append"]
        assert [f for f, _ in got["warnings"]] == ["train.py"] * 3, got["warnings"]
        assert "args['h'].it" in got["warnings"][0][1] and "not stored" in got["warnings"][0][1]
        assert "args['loader']._iterator" in got["warnings"][1][1]
        # a File argument the body rewrote: not stored, as before
        assert "memolab.File/Dir argument changed" in got["warnings"][2][1]
    # §3: no "File changed" warning for a file that did not change, from the second seed on (the
    # body draws from the global generator: its key is routed by the generator's state)


FILE_AND_RNG = r'''
import json, random, warnings
import memolab


class Calls(list):
    pass


memolab.register_opaque(Calls)
calls = Calls()


@memolab.memo
def noisy(f):
    calls.append(1)
    with open(f) as fh:
        return random.random() + len(fh.read())


with open("rows.txt", "w") as fh:
    fh.write("1,2,3\n")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    values = []
    for seed in (0, 1, 2, 0):
        random.seed(seed)
        values.append(noisy(memolab.File("rows.txt")))
print(json.dumps({"values": values, "computed": len(calls),
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, memolab.MemolabWarning)]}))
'''


def test_a_file_argument_and_a_global_generator_store_every_seed(project):
    """Issue 48 §3: a ``memolab.File`` argument and a body drawing from a global generator. From the
    second seed on the call is routed to the key of its generator state; the check that the file did
    not change while the body ran compared the arguments with that routed key, warned "a
    memolab.File/Dir argument changed" and stored nothing, so every later process recomputed. Now
    each seed is stored once, silently, and a fresh process computes nothing."""
    project.write("noisy.py", FILE_AND_RNG)
    first = project.run_json("noisy.py")
    second = project.run_json("noisy.py")
    assert first["warnings"] == [] and second["warnings"] == [], (first["warnings"], second["warnings"])
    assert first["computed"] == 3  # seeds 0, 1, 2 (seed 0 again: a hit)
    assert second["computed"] == 0
    assert second["values"] == first["values"]


def test_put_back_rules_keep_the_callers_objects():
    """The rules ``memolab.inputs.mutations`` puts a stored state back with, in process: containers keep
    their identity (and a dict its stored order), a tuple of equal values stays the caller's, objects
    with ``__slots__`` and a ``deque`` take the stored items, a logger (rebuilt by its own
    ``__reduce__``) is replaced whole, and what cannot be put back is named by its path."""
    import collections
    import logging

    from memolab.inputs import mutations

    class Slotted:
        __slots__ = ("a", "b")

    class Box:
        pass

    live, stored = Box(), Box()
    live.items, stored.items = [1, {"x": 1}], [1, {"x": 2}, 3]
    live.order, stored.order = collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=3, a=1)
    live.pair, stored.pair = (1.5, "s"), (1.5, "s")
    live.q, stored.q = collections.deque([1]), collections.deque([2, 3])
    live.s, stored.s = Slotted(), Slotted()
    live.s.a, stored.s.a, stored.s.b = 1, 2, 3
    live.log = stored.log = logging.getLogger("memolab-test")
    live.gone, stored.new = 1, 2
    keep = (live.items, live.items[1], live.order, live.pair, live.q, live.s)
    assert mutations.put_back(live, stored, {}, "args['box']") is live
    assert (live.items, live.items[1], live.order, live.pair, live.q, live.s) == keep
    assert all(a is b for a, b in zip((live.items, live.items[1], live.order, live.pair, live.q, live.s), keep,
                                      strict=True))
    assert live.items == [1, {"x": 2}, 3] and list(live.order.items()) == [("b", 3), ("a", 1)]
    assert list(live.q) == [2, 3] and (live.s.a, live.s.b) == (2, 3)
    assert live.log is logging.getLogger("memolab-test")
    assert not hasattr(live, "gone") and live.new == 2
    holder = Box()
    holder.it = iter([1, 2])
    assert mutations.problems([("h", holder)]) == ("args['h'].it", "a live iterator")
    assert mutations.problems([("l", logging.getLogger("x"))])[0] == "args['l']"
