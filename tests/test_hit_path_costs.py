"""What a hit costs, in what can be counted (issue 52 §2; timings are in benchmarks/hit_overhead.py).

One fresh process (audit hooks cannot be removed, so none is added to the test process): a
memoized body has run (so memolab's own audit hook is installed, as in every real process), then

- repeat hits and hits read from the store raise no ``builtins.id`` audit event (each one runs
  every audit hook of the process: a Python call), and read ``__code__`` once per hit;
- a hit opens no file, changes none, lists no folder, asks ``os.stat`` nothing (an inline
  result), asks the system for the working directory and nothing else, runs one SQLite statement
  (the point read, always the same text) and imports no module;
- the quiet code check (no namespace written since the last full check) still sees a
  function's ``__code__`` replaced and a global it reads rebound: the next call is a miss that
  returns the un-memoized truth.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r'''
    import collections, json, os, sys, threading
    from memolab import memo, configure
    from memolab.store import get_store
    configure(store=os.path.join(sys.argv[1], "store"), verbose=False)

    K = 1

    @memo
    def f(x):
        return x + K

    out = {"first": [f(3), f(3)]}  # a miss (its body runs: memolab's audit hook is installed), a hit
    events = collections.Counter()
    counting = [False]

    main = threading.get_ident()

    def hook(event, args):  # (the main thread's: the usage writer may run meanwhile)
        if counting[0] and threading.get_ident() == main:
            events[event if not event.startswith("object.") else f"{event} {args[1]}"] += 1

    sys.addaudithook(hook)
    stats = [0]
    posix = collections.Counter()

    def profile(frame, event, arg):  # (not a patch of os.stat: that would join every key as a plant)
        if event == "c_call" and counting[0]:
            if arg.__name__ in ("stat", "lstat", "fstat"):
                stats[0] += 1
            if getattr(arg, "__module__", None) == "posix":  # what Python asks the system for
                posix[arg.__name__] += 1
    store = get_store()
    statements = []
    store.index.conn().set_trace_callback(lambda s: statements.append(s) if counting[0] else None)

    def hits(n, from_store):  # in a function: the loop writes no global (the quiet code check)
        vals = []
        sys.setprofile(profile)
        for _ in range(n):
            if from_store:
                store.forget()
            counting[0] = True
            vals.append(f(3))
            counting[0] = False
        sys.setprofile(None)
        return vals

    def measure():  # (a function: a loop at module level would write globals, as a script's own loop does)
        hits(2, True)  # not counted: what the first hit from the store imports (the loader's modules)
        for name, from_store in (("repeat", False), ("store", True)):
            events.clear(); stats[0] = 0; statements.clear(); posix.clear()
            before = set(sys.modules)
            vals = hits(20, from_store)
            out[name] = {"values": sorted(set(vals)), "events": dict(events), "stats": stats[0],
                         "statements": len(statements), "imported": sorted(set(sys.modules) - before),
                         "sql": sorted({s.split(" FROM ")[0] for s in statements}), "posix": dict(posix)}

    measure()

    def quiet_then(change):
        hits(3, False)  # quiet: nothing written since the last full check
        change()
        return f(3)

    def new_code():
        f.fn.__code__ = (lambda x: x + 100).__code__

    out["global rebound"] = quiet_then(lambda: globals().__setitem__("K", 1000))
    out["code replaced"] = quiet_then(new_code)
    print(json.dumps(out))
''')


def test_a_hit_raises_no_id_event_touches_no_file_and_the_quiet_check_sees_changes(tmp_path):
    script = tmp_path / "hits.py"
    script.write_text(SCRIPT)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='hits'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")}
    cp = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out["first"] == [4, 4]
    for name in ("repeat", "store"):
        got = out[name]
        assert got["values"] == [4], (name, got)
        # one audited read a hit: the root function's ``__code__`` (no ``id()``, no open, no listing)
        assert got["events"] == {"object.__getattr__ __code__": 20}, (name, got)
        assert got["stats"] == 0, (name, got)
        assert got["imported"] == [], (name, got)
        # the one system call Python makes (the default store follows the working directory); SQLite's
        # own on a store hit, the two fcntl locks of a WAL read, are below Python (docs/performance.md)
        assert got["posix"] == {"getcwd": 20}, (name, got)
    assert out["repeat"]["statements"] == 0
    assert out["store"]["statements"] == 20  # the point read, once a hit: nothing written
    # one statement text (sqlite3's statement cache prepares it once, no PRAGMA or schema read beside
    # it): the lean lookup, the columns loading needs and not the snapshot itself
    (sql,) = out["store"]["sql"]
    assert sql.startswith("SELECT id,status,payload,payload_size,buffers,") and ",snapshot," not in sql, sql
    assert out["global rebound"] == 1003  # 3 + K, K rebound to 1000 after quiet hits
    assert out["code replaced"] == 103  # 3 + 100: the code that replaced ``f``'s ran
