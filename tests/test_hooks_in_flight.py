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
