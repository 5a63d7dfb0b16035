"""Global random generators in keys (issue 34, item 2; docs/cache-rules.md, "Global random generators").

``torch.manual_seed(args.seed); train(cfg)`` must return seed 1's model for seed 1. Every
test compares a memoized run with the un-memoized function (``MEMO_OFF=1`` runs the body
itself), in fresh processes: the value, and what the program draws *after* the call (a
hit leaves the generators where the body left them).
"""
from __future__ import annotations

import pytest

from conftest import require

require("torch")
require("numpy")

pytestmark = pytest.mark.preload("torch", "numpy")

PRELUDE = r'''
import json, os, random, sys
import numpy as np
import torch
import memolab

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()
OFF = os.environ.get("MEMO_OFF") == "1"

def memo(**kw):
    def wrap(f):
        return f if OFF else memolab.memo(**kw)(f)
    return wrap

def draw_after():
    return [float(torch.rand(1)), float(np.random.rand()), random.random()]
'''


#: for the tests of ``random`` alone: a fresh process without numpy and torch starts in a
#: tenth of the time
LIGHT = PRELUDE.replace("import numpy as np\nimport torch\n", "").split("def draw_after")[0]


def _pair(project, script, *args):
    """(memoized, un-memoized) outputs of ``script`` run with ``args`` in fresh processes."""
    return project.run_json(script, *args), project.run_json(script, *args, env={"MEMO_OFF": "1"})


def test_a_body_drawing_from_a_global_generator_is_keyed_by_its_state(project):
    """One function per generator (torch, numpy, ``random``), run in the same fresh processes with
    the three generators seeded apart: each is keyed by its own generator's state, and by no other's
    (a change of torch's seed recomputes the torch function only)."""
    project.write("train.py", PRELUDE + '''
@memo()
def train_torch(n):
    calls.append("torch")
    return float(torch.randn(3).sum()) * n

@memo()
def train_numpy(n):
    calls.append("numpy")
    return float(np.random.randn(3).sum()) * n

@memo()
def train_random(n):
    calls.append("random")
    return random.gauss(0, 1) * n

t, n, r = (int(a) for a in sys.argv[1:4])
torch.manual_seed(t); np.random.seed(n); random.seed(r)
values = {"torch": train_torch(2), "numpy": train_numpy(2), "random": train_random(2)}
print(json.dumps({"value": values, "after": draw_after(), "calls": sorted(calls)}))
''')
    # seeds (torch, numpy, random) -> the functions that must compute there
    plan = [((0, 0, 0), ["numpy", "random", "torch"]), ((1, 0, 0), ["torch"]), ((1, 1, 1), ["numpy", "random"]),
            ((0, 0, 0), [])]
    truth = {seeds: project.run_json("train.py", *map(str, seeds), env={"MEMO_OFF": "1"}) for seeds, _ in plan}
    for seeds, computed in plan:
        got = project.run_json("train.py", *map(str, seeds))
        assert got["value"] == truth[seeds]["value"], f"seeds {seeds}: a result of other seeds"
        assert got["after"] == truth[seeds]["after"], f"seeds {seeds}: the program drew other numbers after the calls"
        assert got["calls"] == computed, (seeds, got["calls"])


def test_a_function_drawing_nothing_is_never_split_by_the_seed(project):
    project.write("pure.py", PRELUDE + '''
@memo()
def pure(n):
    calls.append(n)
    return [n * 2, sum(range(n))]

torch.manual_seed(int(sys.argv[1])); np.random.seed(int(sys.argv[1])); random.seed(int(sys.argv[1]))
print(json.dumps({"value": pure(5), "calls": len(calls), "after": draw_after()}))
''')
    first = project.run_json("pure.py", "0")
    second = project.run_json("pure.py", "1")
    assert first["calls"] == 1 and second["calls"] == 0
    assert second["after"] == project.run_json("pure.py", "1", env={"MEMO_OFF": "1"})["after"]


def test_a_body_that_seeds_before_drawing_hits_from_any_state(project):
    """``seed_everything(cfg.seed)`` at the top of ``train``: the caller's state does not
    matter — numpy's differs in every process (seeded from the OS) — so it hits."""
    project.write("seeded.py", PRELUDE + '''
def seed_everything(s):
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)

@memo()
def train(seed):
    calls.append(seed)
    seed_everything(seed)
    return float(torch.randn(4).sum()) + float(np.random.rand()) + random.random()

value = train(7)
print(json.dumps({"value": value, "calls": len(calls), "after": draw_after()}))
''')
    first = project.run_json("seeded.py")
    second = project.run_json("seeded.py")
    truth = project.run_json("seeded.py", env={"MEMO_OFF": "1"})
    assert first["calls"] == 1 and second["calls"] == 0
    assert second["value"] == truth["value"]
    assert second["after"] == truth["after"]  # the generators left where seed_everything + draws left them


def test_draws_undone_by_fork_rng_still_count(project):
    """``torch.random.fork_rng`` restores the state after drawing: the state at exit equals the
    state at entry, yet the result came from it."""
    project.write("fork.py", PRELUDE + '''
@memo()
def augment(n):
    calls.append(n)
    with torch.random.fork_rng():
        return float(torch.randn(n).sum())

torch.manual_seed(int(sys.argv[1]))
print(json.dumps({"value": augment(3), "calls": len(calls)}))
''')
    for seed in ("0", "1", "1"):
        got, truth = _pair(project, "fork.py", seed)
        assert got["value"] == truth["value"]
    assert project.run_json("fork.py", "0")["calls"] == 0


def test_nested_calls_and_in_process_repeats(project):
    """An inner call that draws makes its caller depend on the state too, hit or miss; in
    one process, reseeding between calls gives each seed its own result."""
    project.write("nested.py", PRELUDE + '''
@memo()
def inner(n):
    calls.append("inner")
    return float(torch.randn(n).sum())

@memo()
def outer(n):
    calls.append("outer")
    return inner(n) * 10

out = []
for seed in (0, 1, 0, 1):
    torch.manual_seed(seed)
    out.append([outer(3), float(torch.rand(1))])
torch.manual_seed(1)
first_inner = inner(3)  # computed by outer's body for seed 1: a hit here
print(json.dumps({"out": out, "calls": list(calls), "inner": first_inner}))
''')
    got = project.run_json("nested.py")
    truth = project.run_json("nested.py", env={"MEMO_OFF": "1"})
    assert got["out"] == truth["out"] and got["inner"] == truth["inner"]
    assert got["calls"] == ["outer", "inner", "outer", "inner"]  # seeds 0 and 1 once each
    again = project.run_json("nested.py")
    assert again["out"] == truth["out"] and again["calls"] == []


@pytest.mark.preload()  # torch imported after memolab: a real start
def test_an_unseeded_generator_is_as_good_as_another_a_seeded_one_counts(project):
    """torch seeds its generator from the OS at import: a program that never seeds gets other
    numbers in every process, so a result drawn unseeded serves any unseeded process (as
    without memolab); once the program seeds, the seed counts."""
    project.write("lazy.py", '''
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
    return float(torch.randn(n).sum())

import torch  # imported after memolab: its seed functions are watched from its first line
if sys.argv[1] == "reseeded":
    torch.manual_seed(5)
    torch.seed()  # back to the OS
elif sys.argv[1] != "unseeded":
    torch.manual_seed(int(sys.argv[1]))
print(json.dumps({"value": make(3), "calls": len(calls)}))
''')
    plain = project.run_json("lazy.py", "unseeded")
    again = project.run_json("lazy.py", "unseeded")
    assert plain["calls"] == 1 and again["calls"] == 0 and again["value"] == plain["value"]
    five = project.run_json("lazy.py", "5")
    truth = project.run_json("lazy.py", "5", env={"MEMOLAB_STORE": str(project.root / "other")})
    assert five["calls"] == 1 and five["value"] == truth["value"]
    assert project.run_json("lazy.py", "5")["calls"] == 0
    assert project.run_json("lazy.py", "reseeded")["calls"] == 0  # torch.seed(): unseeded again


def test_a_generator_imported_before_memolab_counts_by_its_state(project):
    """Whether torch was seeded before memolab was imported cannot be known: its generator
    counts by its exact state (never a result of another seed), so an unseeded program
    computes again in a new process."""
    project.write("early.py", PRELUDE.replace("import json, os, random, sys", "import json, os, random, sys, torch") + '''
@memo()
def noisy(n):
    calls.append(n)
    return float(torch.randn(n).sum())

if sys.argv[1] != "unseeded":
    torch.manual_seed(int(sys.argv[1]))
print(json.dumps({"value": noisy(3), "calls": len(calls)}))
''')
    assert project.run_json("early.py", "unseeded")["calls"] == 1
    assert project.run_json("early.py", "unseeded")["calls"] == 1
    for seed in ("3", "4", "3"):
        got, truth = _pair(project, "early.py", seed)
        assert got["value"] == truth["value"]
    assert project.run_json("early.py", "4")["calls"] == 0


def test_opting_out_ignores_the_generators(project):
    project.write("off.py", PRELUDE + '''
@memolab.memo(global_rng=False)
def noisy(n):
    calls.append(n)
    return float(torch.randn(n).sum())

torch.manual_seed(int(sys.argv[1]))
print(json.dumps({"value": noisy(3), "calls": len(calls)}))
''')
    a = project.run_json("off.py", "0")
    b = project.run_json("off.py", "1")
    assert b["calls"] == 0 and b["value"] == a["value"]  # what the user asked for


def test_explain_names_the_generator_state(project):
    project.write("why.py", PRELUDE + '''
@memolab.memo
def noisy(n):
    return float(torch.randn(n).sum())

torch.manual_seed(0)
noisy(3)
torch.manual_seed(1)
ex = noisy.explain(3)
print(json.dumps({"hit": ex.hit, "text": str(ex)}))
''')
    out = project.run_json("why.py")
    assert not out["hit"]
    assert "<global rng torch>" in out["text"], out["text"]


def test_other_threads_drawing_are_not_the_bodys_draws(project):
    """An event loop drawing from ``random`` in another thread (Dask's, tornado's) moves the
    state while a body computes: that is no draw of the body's. A draw by a thread the body
    starts itself is one."""
    project.write("threads.py", LIGHT + '''
import threading, time

stop = threading.Event()
ticks = Calls()  # opaque: a global the body reads is otherwise part of its code digest

def loop():
    while not stop.is_set():
        ticks.append(random.random())  # a background thread drawing all the time
        time.sleep(0.0005)

bg = threading.Thread(target=loop, daemon=True)
bg.start()
while len(ticks) < 3:
    time.sleep(0.001)

@memo()
def pure(n):
    calls.append("pure")
    end = time.monotonic() + 0.05
    while time.monotonic() < end or len(ticks) < 20:  # other thread's draws happen meanwhile
        time.sleep(0.001)
    return n * 2

@memo()
def in_a_thread(n):
    calls.append("in_a_thread")
    out = []
    t = threading.Thread(target=lambda: out.append(random.random()))
    t.start(); t.join()
    return out[0] * n

random.seed(int(sys.argv[1]))
out = {"pure": pure(2), "thread": in_a_thread(2), "calls": list(calls)}
stop.set()
print(json.dumps(out))
''')
    first = project.run_json("threads.py", "0")
    assert first["calls"] == ["pure", "in_a_thread"]
    other = project.run_json("threads.py", "1")
    assert other["calls"] == ["in_a_thread"]  # pure drew nothing of its own


def test_other_threads_drawing_through_methods_bound_early_or_begun_before_the_body(project):
    """``distributed``'s compression probe draws through a ``randint`` bound at import, and
    ``dask.sizeof`` samples in the event loop while a task's body starts: neither is a draw
    of the body's (CI: a Dask task computed twice). A draw of the body's own through a
    primitive no wrapper or class sees still counts while the other thread draws (a record
    is kept only if replaying it gives the state after it)."""
    project.write("early.py", LIGHT + '''
import threading, time
from random import randint, sample  # bound at import, as distributed.protocol.compression does
early = random._inst.random  # the C primitive itself, bound before memolab swapped anything

stop = threading.Event()
ticks = Calls()

def loop():
    while not stop.is_set():
        ticks.append(randint(0, 9))
        sample(range(100), 30)
        random.shuffle(list(range(50)))
        time.sleep(0)  # lets the main thread's stores have the interpreter back

def wait_ticks():
    t = len(ticks)
    while len(ticks) < t + 3:
        time.sleep(0.0005)

@memo()
def pure(n):
    calls.append("pure")
    wait_ticks()
    return n * 2

@memo()
def drawing(n):
    calls.append("drawing")
    wait_ticks()
    return early() * n

bg = threading.Thread(target=loop, daemon=True)
bg.start()
wait_ticks()
random.seed(int(sys.argv[1]))
out = {"pure": [pure(n) for n in range(12)], "drawing": [drawing(n) for n in range(12)]}
stop.set()
out["calls"] = {name: calls.count(name) for name in ("pure", "drawing")}
print(json.dumps(out))
''')
    first = project.run_json("early.py", "0")
    assert first["calls"] == {"pure": 12, "drawing": 12}
    other = project.run_json("early.py", "1")
    assert other["pure"] == first["pure"]
    # pure drew nothing of its own; every drawing body drew, whatever the other thread did
    assert other["calls"] == {"pure": 0, "drawing": 12}


def test_a_collection_while_other_threads_frames_are_read_does_not_hang(project):
    """A body's start reads the other threads' frames (``sys._current_frames``); a collection
    that frees a ``threading.local`` in there deadlocked CPython 3.11.7 (python/cpython#106883):
    the whole suite hung in a worker. Every collection here frees one and makes the next."""
    project.write("gc_hang.py", LIGHT + '''
import gc, threading, time

stop = threading.Event()

def loop():
    while not stop.is_set():
        random.random()
        time.sleep(0.001)

threading.Thread(target=loop, daemon=True).start()

class Regrow:
    def __del__(self):
        if not stop.is_set():  # (else the collections at exit never end)
            r = Regrow()
            r.me, r.local = r, threading.local()

r = Regrow()
r.me, r.local = r, threading.local()
del r
gc.set_threshold(1)

@memo()
def f(n):
    return n

out = [f(n) for n in range(30)]
stop.set()
gc.set_threshold(700)
print(json.dumps({"out": out, "gc": gc.isenabled()}))
''')
    assert project.run_json("gc_hang.py", timeout=60) == {"out": list(range(30)), "gc": True}
