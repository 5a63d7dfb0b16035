"""A hook registering in one thread while another thread's body begins (the lost single flight of
``test_team_dask``'s first test).

A Dask worker imports numpy and seeds its global generator (``np.random.seed()``) before
memolab's first call, and runs two task threads. The first memoized computation registers
numpy's generator (``hooks.LAZY_HOOKS["global_rng"]``); its proof that the state is unseeded
fails there, after 65 key twists: milliseconds. A hook is marked done as it starts, so the second
thread's body began without numpy in its entry states, found it registered at its end, and counted
it as drawn from: the result was stored under a dependency on an "unseeded" numpy that no later
call matched (the worker's numpy is seeded), and each later call of that key was routed to a key
of its own and computed again: a key computed two or three times across the workers, every value
right. The second thread now waits for the hook in flight (``hooks._await_running``).

The interleaving is forced, not hoped for: numpy's hook waits until the second thread has either
begun its body (the race) or is waiting for that hook (the fix), then registers; the second
body returns only once the registration is done.
"""
from __future__ import annotations

import json

from conftest import require

require("numpy")

SCRIPT = r'''
import json, os, sqlite3, sys, threading, time
import numpy as np
np.random.seed()  # as Dask's nanny does: imported and seeded before memolab's first call
import memolab
from memolab.inputs import rnglibs
from memolab.settings import hooks


class Shared:
    """What the body reads besides its argument: opaque to the code digest (it changes)."""


memolab.register_opaque(Shared)
run = Shared()
run.computed = []
entered, in_body, run.registered = threading.Event(), threading.Event(), threading.Event()
run.in_body = in_body
BOUND = run.bound = 120  # against a hang, not a timing: every wait below ends on its condition


@memolab.memo()
def square(k):
    run.computed.append(k)
    if threading.current_thread().name == "second":
        run.in_body.set()
        assert run.registered.wait(run.bound)
    return k * k


def waits_for_hook(thread):
    """Is ``thread`` waiting for another thread's hook to finish (``hooks._await_running``)?"""
    code = getattr(getattr(hooks, "_await_running", None), "__code__", None)
    f = sys._current_frames().get(thread.ident)
    while f is not None and code is not None:
        if f.f_code is code:
            return True
        f = f.f_back
    return False


if sys.argv[1] == "race":
    original = rnglibs.register_numpy

    def register_numpy():
        entered.set()
        deadline = time.monotonic() + BOUND
        while not (in_body.is_set() or waits_for_hook(second)):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        original()
        run.registered.set()

    rnglibs.register_numpy = register_numpy
    first = threading.Thread(target=square, args=(0,), name="first")
    second = threading.Thread(target=square, args=(1,), name="second")
    first.start()
    assert entered.wait(BOUND)  # the first thread registers numpy's generator now
    second.start()
    first.join(BOUND)
    second.join(BOUND)
    assert not first.is_alive() and not second.is_alive()

values = [square(0), square(1)]  # hits in this process (and in the next one)
with sqlite3.connect(os.path.join(os.environ["MEMOLAB_STORE"], "index.sqlite")) as c:
    deps = [r[0] for r in c.execute("SELECT json_extract(snapshot, '$.state_deps') FROM evaluations ORDER BY id")]
print(json.dumps({"computed": run.computed, "values": values, "deps": deps}))
'''


def test_a_body_begun_while_another_thread_registers_a_generator_is_not_keyed_by_it(project):
    project.write("race.py", SCRIPT)
    first = project.run_json("race.py", "race")
    # each key computed once, in its own thread; the calls after them hit (none routed elsewhere)
    assert sorted(first["computed"]) == [0, 1] and first["values"] == [0, 1], first
    # neither body drew from numpy: no result depends on its state
    assert first["deps"] == [None, None], first
    # a fresh process whose numpy is seeded otherwise (as another worker's) hits both
    again = project.run_json("race.py", "hit")
    assert again == {"computed": [], "values": [0, 1], "deps": [None, None]}, json.dumps(again)


IMPORT_SCRIPT = r'''
import json, os, sqlite3, sys, threading
import memolab

assert "numpy" not in sys.modules  # imported below by another thread, in the middle of both bodies


class Shared:
    """What the bodies read besides their argument: opaque to the code digest (it changes)."""


memolab.register_opaque(Shared)
run = Shared()
run.computed, run.began, run.imported, run.quiet = [], threading.Semaphore(0), threading.Event(), threading.Event()


@memolab.memo()
def quiet(k):  # draws nothing
    run.computed.append("quiet")
    run.began.release()
    assert run.imported.wait(120)
    return k


@memolab.memo()
def draws(k):  # draws from numpy's generator once another thread has imported it (and quiet is over:
    run.computed.append("draws")  # a numpy draw in any thread counts for every body in progress)
    run.began.release()
    assert run.imported.wait(120) and run.quiet.wait(120)
    return k + float(sys.modules["numpy"].random.rand())


def quiet_then_tell(k):
    quiet(k)
    run.quiet.set()


def importer():
    for _ in range(2):
        assert run.began.acquire(timeout=120)  # both bodies are computing
    import numpy  # noqa: F401  (its generator is registered now, by this thread)
    run.imported.set()


threads = [threading.Thread(target=quiet_then_tell, args=(1,)), threading.Thread(target=draws, args=(1,)),
           threading.Thread(target=importer)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
    assert not t.is_alive()
first = [quiet(1), draws(1)]  # hits
import numpy as np
np.random.seed(5)
after = [quiet(1), draws(1)]  # quiet hits whatever numpy's state; draws is keyed by it: computed again
with sqlite3.connect(os.path.join(os.environ["MEMOLAB_STORE"], "index.sqlite")) as c:
    deps = [[r[0].rpartition(":")[2], r[1]] for r in c.execute(
        "SELECT fn, json_extract(snapshot, '$.state_deps') FROM evaluations ORDER BY id")]
print(json.dumps({"computed": sorted(run.computed), "deps": deps, "same": first[0] == after[0] == 1}))
'''


def test_another_threads_import_in_the_middle_of_a_body_is_no_draw_of_that_body(project):
    """A generator another thread's (watched) import registers while a body computes: the body is
    judged from that state on, so one that never draws from it does not depend on it (it was: a
    later seed routed its calls to keys of their own, computed again); one that draws from it
    after the import still does."""
    project.write("imports.py", IMPORT_SCRIPT)
    out = project.run_json("imports.py")
    deps = {fn: json.loads(d) if d else None for fn, d in out["deps"][:2]}
    assert deps == {"quiet": None, "draws": {"numpy": "unseeded"}}, out
    assert out["computed"] == ["draws", "draws", "quiet"] and out["same"], out  # draws: keyed by the seed
    assert len(out["deps"]) == 3, out


#: two threads asking at once while the first runs a lazy registration (in both scripts below)
RACE = r'''
def inside(thread, fn):
    """Is ``thread`` inside ``fn`` (with the fix: waiting for the other thread's registration)?"""
    f = sys._current_frames().get(thread.ident)
    while f is not None:
        if f.f_code is fn.__code__:
            return True
        f = f.f_back
    return False


def race(module, name, ask, fixed, waiting_in):
    """``ask()`` in two threads, the first registering ``module.name`` (the lazy registration) until
    the second has asked too (the race) or, where the fix is there (``fixed``), waits for the
    registration inside ``waiting_in``; both answers, and a third asked after them."""
    entered, second_done, out = threading.Event(), threading.Event(), {}
    original = getattr(module, name)

    def slow(*args):
        entered.set()
        deadline = time.monotonic() + 120
        while not (second_done.is_set() or (fixed and inside(second, waiting_in))):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        original(*args)

    setattr(module, name, slow)
    first = threading.Thread(target=lambda: out.__setitem__("first", ask()))
    second = threading.Thread(target=lambda: (out.__setitem__("second", ask()), second_done.set()))
    first.start()
    assert entered.wait(120)
    second.start()
    for t in (first, second):
        t.join(120)
        assert not t.is_alive()
    return [out["first"], out["second"], ask()]
'''


HASH_SCRIPT = r'''
import json, sys, threading, time
import numpy as np
import memolab
from memolab.hashing import arrays, registry
''' + RACE + r'''


class Shared:
    """What the body reads besides its argument: opaque to the code digest (it changes)."""


memolab.register_opaque(Shared)
run = Shared()
run.computed = []


@memolab.memo()
def total(a):
    run.computed.append(threading.current_thread().name)
    return int(a.sum())


a = np.arange(10)
out = race(arrays, "register", lambda: total(a), hasattr(registry, "lazy_running"), registry.run_lazy)
print(json.dumps({"computed": len(run.computed), "evaluations": len(total.evaluations()), "value": out[2]}))
'''


def test_a_thread_hashing_while_another_registers_the_handlers_gets_the_same_key(project):
    """numpy's hashing handlers register as the first array is hashed (``registry.run_lazy``). A
    second thread hashing an array meanwhile found nothing pending, hashed it generically (another
    key: computed twice) and cached that handler; it now waits for the registration in flight."""
    project.write("hashes.py", HASH_SCRIPT)
    out = project.run_json("hashes.py")
    assert out == {"computed": 1, "evaluations": 1, "value": 45}, out


RESOLVE_SCRIPT = r'''
import hashlib, json, sys, threading, time
import numpy as np
import memolab  # noqa: F401
from memolab import pickling
from memolab.inputs import mutations
from memolab.numpy import restore
from memolab.pickling import arrays
''' + RACE + r'''

a = np.arange(100_000)  # big enough for its bytes to go out of band (a blob, read-only on load)
pickled = race(arrays, "register", lambda: hashlib.sha256(bytes(pickling.dumps_with_refs(a)[0])).hexdigest(),
               hasattr(pickling, "_resolving"), pickling._resolve)
rules = race(restore, "register", lambda: getattr(mutations.rule_of(np.ndarray), "__qualname__", None),
             hasattr(mutations, "_resolving"), mutations.rule_of)
print(json.dumps({"payloads": pickled, "rules": rules}))
'''


def test_threads_pickling_or_restoring_while_another_registers_get_its_reducer_and_rule(project):
    """numpy's reducer (pickling) and restoring rule register as the first array needs them. A
    second thread asking meanwhile found nothing pending and used (and cached, for the process if it
    came last) pickle's own handling and a rule that puts a stored array back by replacing the
    caller's slot instead of copying into the caller's array in place. It now waits."""
    project.write("resolves.py", RESOLVE_SCRIPT)
    out = project.run_json("resolves.py")
    # each thread's answer is the one the process settles on (numpy's own reducer and rule)
    assert len(set(out["payloads"])) == 1 and len(set(out["rules"])) == 1, out
    assert out["rules"][0] is not None and out["rules"][0] != "put_replace", out
