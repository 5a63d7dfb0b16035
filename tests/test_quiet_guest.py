"""memolab as a quiet guest in the user's process (issue 51; docs/architecture.md, "What memolab
installs in the process").

``import memolab`` patches nothing: random, numpy and torch keep their own functions and
classes, and ``sys.meta_path`` is as it was. Each mechanism is installed at the first memoized
call that needs it, and a seed made before then through a function memolab had not wrapped
yet is still seen. A trivial miss starts one thread (the log flusher, which a SIGTERM needs),
not three; the SIGTERM handler only notes the signal; every swallowed exception is logged at
DEBUG with its traceback.
"""
from __future__ import annotations

import signal
import sqlite3
import sys
import time

import pytest

from conftest import require

GUEST = r'''
import atexit, importlib.util, json, sys, threading, zipfile
meta = list(sys.meta_path)
import memolab
out = {"meta_after_import": sys.meta_path == meta, "atexit_import": atexit._ncallbacks()}

import random
import numpy as np
import torch
import torch.random

seeds = {"random.seed": random.seed, "random.setstate": random.setstate, "np.random.seed": np.random.seed,
         "np.random.set_state": np.random.set_state, "torch.manual_seed": torch.manual_seed,
         "torch.seed": torch.seed, "torch.set_rng_state": torch.set_rng_state,
         "torch.random.manual_seed": torch.random.manual_seed, "random.random": random.random}
out["wrapped_after_import"] = sorted(n for n, f in seeds.items() if hasattr(f, "__memolab_wraps__"))
out["random_class"] = type(random._inst) is random.Random
out["meta_after_libraries"] = sys.meta_path == meta

# bound before memolab wraps anything, called after: still seen (issue 51, §1)
from torch import manual_seed
from numpy.random import seed as np_seed

class Calls(list):
    pass

memolab.register_opaque(Calls)
calls = Calls()

@memolab.memo
def f(x):
    return x + 1

@memolab.memo
def t_draw(n):
    calls.append("t")
    return torch.randn(n).tolist()

@memolab.memo
def n_draw(n):
    calls.append("n")
    return np.random.rand(n).tolist()

threads = lambda: sorted(t.name for t in threading.enumerate())
before = {"threads": threads(), "atexit": atexit._ncallbacks()}
f(1)
out["trivial_miss"] = {"before": before, "after": {"threads": threads(), "atexit": atexit._ncallbacks()}}
out["wrapped_after_first_call"] = hasattr(torch.manual_seed, "__memolab_wraps__")

from memolab.inputs import globalrng
out["states_first"] = globalrng.current(["torch", "numpy", "random"])
unseeded = [t_draw(3), n_draw(3)]
manual_seed(7)  # the functions torch and numpy had before memolab wrapped them
np_seed(7)
out["states_seeded"] = globalrng.current(["torch", "numpy"])
out["after_seed"] = [t_draw(3), n_draw(3)]
out["truth"] = [torch.randn(3, generator=torch.Generator().manual_seed(7)).tolist(),
                np.random.RandomState(7).rand(3).tolist()]
out["calls"] = list(calls)

# a loader memolab did not make is never modified (the watcher is in sys.meta_path by now)
z = sys.argv[1]
with zipfile.ZipFile(z, "w") as zf:
    zf.writestr("datasets/__init__.py", "X = 1\n")
sys.path.insert(0, z)
spec = importlib.util.find_spec("datasets")
out["zip_loader"] = [type(spec.loader).__name__, "exec_module" in vars(spec.loader)]
print(json.dumps(out))
'''


def test_import_patches_nothing_and_the_first_call_installs_what_it_needs(project):
    require("torch")
    require("numpy")
    project.write("guest.py", GUEST)
    out = project.run_json("guest.py", str(project.root / "fake.zip"))
    assert out["meta_after_import"] and out["meta_after_libraries"]
    assert out["atexit_import"] == 0
    assert out["wrapped_after_import"] == [] and out["random_class"]
    assert out["wrapped_after_first_call"]
    # the trivial miss: the log flusher (what a SIGTERM needs), no heartbeat, no sampler
    miss = out["trivial_miss"]
    assert miss["before"]["threads"] == ["MainThread"]
    assert miss["after"]["threads"] == ["MainThread", "memolab-log-flusher"]
    assert miss["after"]["atexit"] - miss["before"]["atexit"] <= 3  # store, logs, logging's own
    # torch and numpy imported after memolab and never seeded: proven unseeded; random keeps no
    # record that could prove it: by its state
    assert out["states_first"]["torch"] == out["states_first"]["numpy"] == "unseeded"
    assert out["states_first"]["random"] != "unseeded"
    # seeded through functions bound before memolab wrapped them: seen, the seed's own numbers
    assert "unseeded" not in out["states_seeded"].values()
    assert out["after_seed"] == out["truth"]
    assert out["calls"] == ["t", "n", "t", "n"]
    assert out["zip_loader"] == ["zipimporter", False]


SIGTERM_IN_FLUSH = r'''
import threading, time
import memolab
from memolab.tracking import sink

real = sink.Sink._write

def slow_write(self, items):
    # the main thread holds the sink's lock, inside a flush, when SIGTERM comes
    if threading.current_thread() is threading.main_thread() and any(it[0] == sink.SCALAR for it in items):
        open("in_flush", "w").close()
        time.sleep(3)
    real(self, items)

sink.Sink._write = slow_write

@memolab.memo
def train(lr):
    print("starting", lr, flush=True)
    memolab.log.scalar("loss", 1.0)
    memolab.log.flush()
    time.sleep(60)
    return lr

train(0.1)
'''


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_sigterm_during_a_flush_under_its_lock_marks_the_run_and_dies_of_it(project):
    """The handler used to flush from signal context: interrupting the main thread inside a
    flush, it waited 5 s for the lock that very thread held, and the run stayed "running".
    Now it only notes the signal; a thread writes once the main thread's flush is done."""
    import memolab

    project.write("job.py", SIGTERM_IN_FLUSH)
    p = project.start("job.py", ready="in_flush")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)  # the bound: the flush (3 s) + the thread's wait (5 s at most)
    assert p.returncode == -signal.SIGTERM, err
    (r,) = memolab.runs("train", store=str(project.store))
    assert r.status == "interrupted" and r.error == "SIGTERM"
    assert r.output == "starting 0.1\n" and r.metrics == {"loss": 1.0}


FAULT = r'''
import logging, sys
import memolab

records = []

class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)

if sys.argv[1] == "handler":
    log = logging.getLogger("memolab")
    log.setLevel(logging.DEBUG)
    log.addHandler(Keep())

@memolab.memo
def g(x):
    return x * 2

print(g(int(sys.argv[2])))
if sys.argv[1] == "handler":
    faults = [r for r in records if r.levelno == logging.DEBUG and r.exc_info and "disk says no" in str(r.exc_info[1])]
    print(len(faults), type(faults[0].exc_info[1]).__name__ if faults else None, faults[0].getMessage() if faults else None)
'''


def test_a_store_fault_memolab_goes_on_without_leaves_its_traceback_at_debug(project):
    """The store refuses the run's rows (a trigger raising, as a full or damaged disk would):
    the call still returns its value, and the fault is on the ``memolab`` logger at DEBUG with
    its traceback — through a handler of the program's, or on stderr with MEMOLAB_VERBOSE=2."""
    project.write("fault.py", FAULT)
    project.run("fault.py", "plain", "1")  # the store and its log tables exist
    with sqlite3.connect(project.store / "index.sqlite") as c:
        c.execute("CREATE TRIGGER no_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    got = project.run("fault.py", "handler", "2").stdout.split("\n")
    assert got[0] == "4"
    n, kind, message = got[1].split(" ", 2)
    assert int(n) >= 1 and kind == "IntegrityError" and "failed; memolab went on without it" in message
    loud = project.run("fault.py", "plain", "3", env={"MEMOLAB_VERBOSE": "2"})
    assert loud.stdout.split("\n")[0] == "6"
    assert "Traceback (most recent call last)" in loud.stderr and "disk says no" in loud.stderr


def test_the_self_tests_of_what_reads_internals_pass_here(project):
    """``make selftest``: each mechanism that reads interpreter or torch internals, tested afresh."""
    cp = project.run("-m", "memolab.cli.selftest")
    lines = dict(line.split(None, 1) for line in cp.stdout.strip().splitlines())
    assert set(lines) == {"dict-version-tags", "function-slots", "type-bases", "threading-register-atexit",
                          "torch-copy-on-write", "torch-seed-queue"}
    assert all(v == "ok" or v.startswith("skipped") for v in lines.values()), cp.stdout


LASTING = r'''
import json, os, sqlite3, threading, time
import memolab

names = lambda: sorted(t.name for t in threading.enumerate())

@memolab.memo
def quick(x):
    return x

def lease_beat(conn):
    row = conn.execute("SELECT heartbeat FROM leases").fetchone()
    return row[0] if row else None

@memolab.memo
def lasting(x):
    conn = sqlite3.connect(os.environ["MEMOLAB_STORE"] + "/index.sqlite")
    first = lease_beat(conn)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if {"memolab-heartbeat", "memolab-system-metrics"} <= set(names()) and lease_beat(conn) != first:
            break
        time.sleep(0.02)
    return {"threads": names(), "beat_moved": lease_beat(conn) != first}

quick(1)
out = {"quick": names(), "lasting": lasting(1)}
print(json.dumps(out))
'''


def test_threads_start_when_their_work_is_due(project):
    """A quick computation starts the log flusher alone; one that lasts gets its lease's
    heartbeat (started by the flusher's round once held a heartbeat interval, beating at once)
    and the system sampler (once it ran half a sampling interval)."""
    project.write("lasting.py", LASTING)
    out = project.run_json("lasting.py", env={"MEMOLAB_SYSTEM_METRICS": "2.5", "MEMOLAB_HEARTBEAT": "0.3"})
    assert out["quick"] == ["MainThread", "memolab-log-flusher"]
    assert {"memolab-heartbeat", "memolab-system-metrics"} <= set(out["lasting"]["threads"])
    assert out["lasting"]["beat_moved"]


def test_a_lease_taken_while_the_flusher_is_held_up_beats_on_a_thread_of_its_own(tmp_path, monkeypatch):
    """The flusher's round starts heartbeats; while it has made none for 3 intervals (a write
    waiting on a busy database), a lease must not wait for it: its store beats at once."""
    from memolab import store
    from memolab.tracking import sink

    st = store.Store(tmp_path / "s")
    key, owner = ("f", "c", "a", "s"), "me"
    assert sink.ensure_ticking()  # the flusher runs and has ticked lately
    monkeypatch.setattr(sink, "_ticked", time.monotonic() - 10 * sink.INTERVAL)
    assert not sink.ensure_ticking()
    st.hold(key, owner)
    try:
        assert st._beat is not None and st._beat.is_alive()
    finally:
        st.release(key, owner)
        st._beat_stop.set()
