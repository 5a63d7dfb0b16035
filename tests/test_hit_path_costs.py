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
from typing import Any

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
    calls = collections.Counter()
    counting_calls = [False]
    posix = collections.Counter()

    def profile(frame, event, arg):  # (not a patch of os.stat: that would join every key as a plant)
        if event == "c_call" and counting[0]:
            if arg.__name__ in ("stat", "lstat", "fstat"):
                stats[0] += 1
            if getattr(arg, "__module__", None) == "posix":  # what Python asks the system for
                posix[arg.__name__] += 1
        elif event == "call" and counting_calls[0] and counting[0]:  # (``f_code`` is audited: counted apart)
            calls[frame.f_code.co_qualname] += 1
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
        hits(1, False)  # nor the repeat hit that makes the entry of the repeat-hit table
        for name, from_store in (("repeat", False), ("store", True)):
            if from_store:
                hits(1, True)  # not counted: the table's entry finds its copy gone (a code check more, once)
            events.clear(); stats[0] = 0; statements.clear(); posix.clear()
            before = set(sys.modules)
            vals = hits(20, from_store)
            out[name] = {"values": sorted(set(vals)), "events": dict(events), "stats": stats[0],
                         "statements": len(statements), "imported": sorted(set(sys.modules) - before),
                         "sql": sorted({s.split(" FROM ")[0] for s in statements}), "posix": dict(posix)}
        hits(1, False)  # (the entry, dropped by the hits from the store, made again)
        counting_calls[0] = True
        hits(20, False)
        counting_calls[0] = False
        out["repeat"]["calls"] = dict(calls)
        calls.clear()
        counting_calls[0] = True
        hits(20, True)
        counting_calls[0] = False
        out["store"]["calls"] = dict(calls)

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
        # no audited event at all: the functions' ``__code__`` and defaults are read as raw bytes with
        # the graph's dict tags (``dictversion.func_view``; no ``id()``, no open, no listing)
        assert got["events"] == {}, (name, got)
        assert got["stats"] == 0, (name, got)
        assert got["imported"] == [], (name, got)
        # the one system call Python makes (the default store follows the working directory); SQLite's
        # own on a store hit, the two fcntl locks of a WAL read, are below Python (docs/performance.md)
        assert got["posix"] == {"getcwd": 20}, (name, got)
    assert out["repeat"]["statements"] == 0
    # a repeat hit is served by the repeat-hit table (``calls/fasthits``): 6 Python calls (17 in
    # 0.4.1, 7 in 0.4.2), none of binding, keying or unpickling (the full path: 35, to bind, hash, key, look up,
    # check, unpickle, restore, mark)
    repeat_calls = out["repeat"]["calls"]
    assert repeat_calls.get("FastTable.hit") == 20, repeat_calls
    assert not {"MemoFunction._prepare", "MemoFunction.bind", "hash_arguments", "memory_hit", "served",
                "Store.load_from_memory", "MemoFunction.code_version"} & set(repeat_calls), repeat_calls
    assert sum(repeat_calls.values()) <= 20 * 6, repeat_calls
    assert out["store"]["statements"] == 20  # the point read, once a hit: nothing written
    # a store hit: 34 Python calls as counted here, this script's statement trace callback among
    # them (56.6 before issue 52's fifth pass; docs/performance.md). Not among them: the
    # ``BoundArguments`` (``Call.bound`` makes it for a call that computes), the
    # lifecycle's generator and its driver (``first_look`` settles a hit), the memory's lock and
    # closure when it holds no copy (``has_copy``, asked by ``_prepare``), the read's and the
    # inline check's helpers (written out where they run); the key's signing asked without a call
    # (``signing.keyed``), the routing and expiry steps of a row that recorded no states and no
    # reads in a call that does not expire, ``accepted`` of a row found under the key, ``noted``
    # while the usage writer has nothing to do, ``code_version`` and ``code_digest`` of a function
    # keyed by its code, ``encoded_since`` when no file was hashed, and what a scalar result is
    # handed back through as it is (``globalrng.restore``, ``mutations.split``/``restore``,
    # ``upstream.mark``)
    store_calls = out["store"]["calls"]
    assert store_calls.get("first_look") == 20 and store_calls.get("Store.has_copy") == 20, store_calls
    assert not {"lifecycle", "drive_sync", "Store.load_from_memory", "_read", "_checked", "digest_bytes",
                "Store._unpickle", "memory_hit", "secret", "problem", "Call.reroute", "state_deps", "Call.expired",
                "stale", "Call.accepted", "Flusher.noted", "MemoFunction.code_version", "MemoFunction.code_digest",
                "encoded_since", "restore", "split", "mark", "active", "BoundArguments.__init__",
                "MemoFunction.bind"} & set(store_calls), store_calls
    assert sum(store_calls.values()) <= 20 * 35, store_calls
    # one statement text (sqlite3's statement cache prepares it once, no PRAGMA or schema read beside
    # it): the lean lookup, the columns loading needs and not the snapshot itself (its columns, binds
    # and plan: ``test_the_lean_lookup_reads_eleven_columns_binds_the_key_once_and_checks_it``)
    (sql,) = out["store"]["sql"]
    assert sql.startswith("SELECT CASE WHEN ev.fn=ix.fn ") and ", ev.snapshot " not in sql, sql
    assert out["global rebound"] == 1003  # 3 + K, K rebound to 1000 after quiet hits
    assert out["code replaced"] == 103  # 3 + 100: the code that replaced ``f``'s ran



GATE = textwrap.dedent(r'''
    import json, os, sys, threading, types
    from memolab import memo, configure
    from memolab.inputs import reads
    configure(store=os.path.join(sys.argv[1], "store"), verbose=False)
    # what the bodies share, kept where their code digests do not look (a module is keyed by name)
    box = sys.modules["gatebox"] = types.ModuleType("gatebox")
    box.path = os.path.join(sys.argv[1], "data.txt")
    box.a_runs, box.a_may_end, box.seen = threading.Event(), threading.Event(), []
    open(box.path, "w").write("one")

    @memo
    def a(x):
        g = sys.modules["gatebox"]
        g.a_runs.set()
        g.a_may_end.wait(60)
        return x

    @memo
    def b(x):
        g = sys.modules["gatebox"]
        g.seen.append(reads._gate.func is reads._hook)
        g.a_runs.wait(60)  # a's body records too
        g.a_may_end.set()
        g.thread.join(60)  # a's body ended: b's still records
        g.seen.append(reads._gate.func is reads._hook)
        with open(g.path) as fh:  # read after the other body ended: still seen
            return fh.read() + str(x)

    def main():
        out = {"idle before": not reads._hooked or reads._gate.func is reads._IDLE}
        box.thread = threading.Thread(target=a, args=(0,))
        box.thread.start()
        out["b"] = [b(1)]
        out["open in b, then after a ended"] = box.seen
        out["idle after"] = reads._gate.func is reads._IDLE
        with open(box.path, "w") as fh:
            fh.write("two")
        out["b"].append(b(1))  # the read was recorded: its file changed, so a miss
        print(json.dumps(out))

    main()
''')


def test_memolabs_audit_hook_runs_python_only_while_a_body_records(tmp_path):
    """The hook installed (``inputs/reads``) is a gate: ``_hook`` while any body records (in any
    thread), a C call otherwise (every audited event of the process then costs no Python frame: a
    repeat hit reads ``__code__``). It closes only when the last body ends: a read made by a body
    after another body ended is still recorded, so a change to that file is a miss."""
    script = tmp_path / "gate.py"
    script.write_text(GATE)
    cp = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                        timeout=300, env={k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")})
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out == {"idle before": True, "b": ["one1", "two1"], "open in b, then after a ended": [True, True, True, True],
                   "idle after": True}, out


# -- the repeat-hit table (``calls/fasthits``): the new truth after every change ----------------
#
# Each memoized function has a twin whose table is switched off (``_fast = None``): every case
# runs both, and the twin's values and body runs are the full path's answer. ``runs`` counts
# what each body appended to a log (a file written, not read: no read by path is recorded).
TWINS = textwrap.dedent(r"""
    import json, math, os, subprocess, sys
    from memolab import configure, hashing, memo
    from memolab.inputs.implicit import register_switches
    from memolab.store import get_store

    base, other = sys.argv[1], sys.argv[2]
    LOG, DATA = os.path.join(base, "log"), os.path.join(base, "data.txt")
    K = 1
    MODE = [None]
    TEMPLATE = '''
    @memo(env=["KNOB"])  # (its value joins the key: a body reading ``os.environ`` has no quiet code check)
    def L_{t}(x):  # a mutable result: unpickled afresh on every hit
        with open(LOG, "a") as fh: fh.write("L_{t} ")
        return [K, repr(x), type(x).__name__, math.copysign(1.0, x) if type(x) is float else None]

    @memo(env=["KNOB"])
    def S_{t}(x):  # an immutable result: the table shares it
        with open(LOG, "a") as fh: fh.write("S_{t} ")
        return f"{{K}}|{{x!r}}|{{type(x).__name__}}"

    @memo
    def N_{t}(x):  # a new nonce each time it computes
        with open(LOG, "a") as fh: fh.write("N_{t} ")
        return os.urandom(8).hex()

    @memo
    def R_{t}(x):  # reads a file by path: checked on every hit, never in the table
        with open(LOG, "a") as fh: fh.write("R_{t} ")
        with open(DATA) as fh:
            return fh.read() + str(x)
    '''
    for t in ("fast", "full"):
        exec(TEMPLATE.format(t=t), globals())
    for fn in (L_full, S_full, N_full, R_full):
        fn._fast = None  # the twin: the full path only
    with open(DATA, "w") as fh:
        fh.write("one")

    def runs():
        text = open(LOG).read() if os.path.exists(LOG) else ""
        return {name: text.split().count(name) for name in set(text.split())}

    out = {}

    def case(name, args, kinds="LS"):
        # three calls of each argument list, fast and full: values and body runs
        before = runs()
        got = {}
        for t in ("fast", "full"):
            for kind in kinds:
                fn = globals()[f"{kind}_{t}"]
                got[f"{kind}_{t}"] = [[fn(*a, **kw) for _ in range(3)] for a, kw in args]
        after = runs()
        out[name] = {"values": got, "runs": {k: after.get(k, 0) - before.get(k, 0) for k in after}}

    def pos(*a):
        return [(a, {})]

    def main():  # (a function: a loop at module level writes globals, which the code check sees)
        global K
        case("warm", pos(3))
        out["entries"] = len(L_fast._fast.entries) + len(S_fast._fast.entries)
        case("types", [((v,), {}) for v in (1, 1.0, True, 0.0, -0.0, 3, None, float("nan"), "3", b"3")])
        out["table"] = len(L_fast._fast.entries)
        case("by name", [((), {"x": 3})])
        copysign = math.copysign  # a name checked by identity (its type overrides ``==``)
        math.copysign = lambda a, b: 42.0
        case("library function rebound", pos(0.0), "L")
        math.copysign = copysign
        case("library function back", pos(0.0), "L")
        v = L_fast(3)
        v.append("junk")
        v[0] = "changed"
        out["mutated"] = [L_fast(3), L_full(3)]
        out["shared"] = S_fast(3) is S_fast(3)
        K = 1000
        case("global rebound", pos(3))
        K = 1
        case("global back", pos(3))
        os.environ["KNOB"] = "on"
        case("env switch", pos(3))
        del os.environ["KNOB"]
        case("env back", pos(3))
        home = os.getcwd()
        os.chdir(other)  # the default store follows the working directory
        case("other store", pos(3))
        os.chdir(home)
        case("home store", pos(3))
        os.environ["MEMOLAB_STORE"] = os.path.join(other, "by-env")
        case("store by env", pos(3))
        del os.environ["MEMOLAB_STORE"]
        case("store back", pos(3))
        configure(store=os.path.join(other, "configured"))
        case("store configured", pos(3))
        configure(store=None)
        case("configure back", pos(3))
        configure(version_sensitivity="exact")  # the code digest's sensitivity: asked again, the same digest
        case("sensitivity", pos(3))
        configure(version_sensitivity="minor")
        register_switches("lab", lambda: {"mode": MODE[0]} if MODE[0] else None)  # a library's switches
        case("switches default", pos(3))
        MODE[0] = "fast-math"
        case("switch flipped", pos(3))
        MODE[0] = None
        case("switch back", pos(3))
        case("warm N", pos(3), "N")
        nonce = {t: globals()[f"N_{t}"].fresh(3) for t in ("fast", "full")}
        case("after fresh", pos(3), "N")
        out["fresh"] = {t: [[nonce[t]] * 3] == out["after fresh"]["values"][f"N_{t}"] for t in nonce}
        for fn in (L_fast, L_full):
            fn.clear()
        case("after clear", pos(3), "L")
        # another process clears the store: this process's in-memory copy answers, fast or full alike
        subprocess.run([sys.executable, "-c", "from memolab.store import get_store; get_store().clear()"],
                       check=True)
        case("cleared elsewhere", pos(3))
        get_store().forget()  # what ``gc`` and ``clear`` in this process do first: the copies are dropped
        case("copies dropped", pos(3))
        case("reads", pos(3), "R")
        with open(DATA, "w") as fh:
            fh.write("two, longer")
        case("file changed", pos(3), "R")
        out["R entries"] = len(R_fast._fast.entries)
        codes = {}
        for t in ("fast", "full"):
            fn = globals()[f"L_{t}"].fn
            codes[t] = fn.__code__
            fn.__code__ = (lambda x: ["new code", x]).__code__
        case("code replaced", pos(3), "L")
        for t in ("fast", "full"):
            globals()[f"L_{t}"].fn.__code__ = codes[t]
        case("code back", pos(3), "L")
        for fn in (S_fast, S_full):
            fn.max_age = 3600.0  # an option set: the table is emptied, and expiry is judged on every hit
        out["after option"] = len(S_fast._fast.entries)
        case("max_age", pos(3), "S")
        out["max_age entries"] = len(S_fast._fast.entries)
        hashing.register_handler(int, lambda enc, obj: enc.write(b"Z" + str(obj).encode()))
        case("int handler", pos(3), "L")

    main()
    served = []  # a script's own loop writes its globals on every turn: the code check is then the full one
    hit = type(L_fast._fast).hit
    from memolab.calls.fasthits import MISS

    def counted(self, *a):
        got = hit(self, *a)
        if self is L_fast._fast:
            served.append(got is not MISS)
        return got

    type(L_fast._fast).hit = counted
    loop = {"fast": [], "full": []}
    for i in range(4):
        K = 1 + i // 2  # rebound on the third turn
        for t in ("fast", "full"):
            loop[t].append(globals()[f"L_{t}"](3))
    out["module loop"] = loop
    out["module loop served"] = served
    print(json.dumps(out))
""")


def test_the_repeat_hit_table_gives_what_the_full_path_gives_after_every_change(tmp_path):
    home, other = tmp_path / "home", tmp_path / "other"
    for d in (home, other):
        d.mkdir()
        (d / "pyproject.toml").write_text("[project]\nname='twins'\n")
    script = home / "twins.py"
    script.write_text(TWINS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_") and k != "KNOB"}
    cp = subprocess.run([sys.executable, str(script), str(home), str(other)], cwd=home, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])

    def same(case: str, kinds: str = "LS", values: bool = True) -> dict[str, Any]:
        """The function and its full-path twin gave the same values and ran as often; the fast one's."""
        got = out[case]
        for k in kinds:
            if values:
                assert got["values"][f"{k}_fast"] == got["values"][f"{k}_full"], (case, got)
            assert got["runs"].get(f"{k}_fast", 0) == got["runs"].get(f"{k}_full", 0), (case, got)
        return {"values": {k: got["values"][f"{k}_fast"] for k in kinds},
                "runs": {k: got["runs"].get(f"{k}_fast", 0) for k in kinds}}

    # a miss, the first hit from the store, then from memory (the table's from the third call)
    warm = same("warm")
    assert warm["values"]["L"] == [[[1, "3", "int", None]] * 3] and warm["runs"] == {"L": 1, "S": 1}
    assert out["entries"] == 2
    # 1, 1.0 and True are three keys, 0.0 and -0.0 two: each computed once, then served from its own entry
    types = same("types")
    assert [[c[2], c[3]] for c, *_ in types["values"]["L"]][:6] == [
        ["int", None], ["float", 1.0], ["bool", None], ["float", 1.0], ["float", -1.0], ["int", None]]
    assert [c[1] for c, *_ in types["values"]["L"]][6:] == ["None", "nan", "'3'", "b'3'"]
    assert types["runs"] == {"L": 9, "S": 9}  # (3 was computed by "warm"); a NaN hits as its key does
    assert out["table"] == 10
    assert same("by name")["runs"] == {"L": 0, "S": 0}
    assert same("library function rebound", "L")["values"]["L"] == [[[1, "0.0", "float", 42.0]] * 3]
    assert same("library function back", "L")["runs"] == {"L": 0}
    # a caller's change to a returned list never reaches the next hit; a str result is shared
    assert out["mutated"][0] == out["mutated"][1] == [1, "3", "int", None]
    assert out["shared"] is True
    rebound = same("global rebound")
    assert rebound["values"]["S"] == [["1000|3|int"] * 3] and rebound["runs"] == {"L": 1, "S": 1}
    assert same("global back")["runs"] == {"L": 0, "S": 0}
    switched = same("env switch")
    assert switched["runs"] == {"L": 1, "S": 1}  # a new key
    assert same("env back")["runs"] == {"L": 0, "S": 0}
    assert same("other store")["runs"] == {"L": 1, "S": 1}  # another store: computed there
    assert same("home store")["runs"] == {"L": 0, "S": 0}
    assert same("store by env")["runs"] == {"L": 1, "S": 1}
    assert same("store back")["runs"] == {"L": 0, "S": 0}
    assert same("store configured")["runs"] == {"L": 1, "S": 1}
    assert same("configure back")["runs"] == {"L": 0, "S": 0}
    assert same("sensitivity")["runs"] == {"L": 1, "S": 0}  # (L uses `math`: its version joins at "exact")
    assert same("switches default")["runs"] == {"L": 0, "S": 0}
    assert same("switch flipped")["runs"] == {"L": 1, "S": 1}  # the switches join the key
    assert same("switch back")["runs"] == {"L": 0, "S": 0}
    assert same("warm N", "N", values=False)["runs"] == {"N": 1}
    assert same("after fresh", "N", values=False)["runs"] == {"N": 0}  # fresh() computed it: later hits serve it
    assert out["fresh"] == {"fast": True, "full": True}
    assert same("after clear", "L")["runs"] == {"L": 1}
    assert same("cleared elsewhere")["runs"] == {"L": 0, "S": 0}
    assert same("copies dropped")["runs"] == {"L": 1, "S": 1}  # the store has no row left: computed again
    assert same("reads", "R")["values"]["R"] == [["one3"] * 3]
    changed = same("file changed", "R")
    assert changed["values"]["R"] == [["two, longer3"] * 3] and changed["runs"] == {"R": 1}
    assert out["R entries"] == 0
    assert same("code replaced", "L")["values"]["L"] == [[["new code", 3]] * 3]
    assert same("code back", "L")["runs"] == {"L": 0}
    assert out["after option"] == 0 and out["max_age entries"] == 0
    assert same("max_age", "S")["runs"] == {"S": 0}
    assert same("int handler", "L")["runs"] == {"L": 1}  # ints digested anew: a miss
    loop = out["module loop"]
    assert loop["fast"] == loop["full"] == [[1, "3", "int", None]] * 2 + [[2, "3", "int", None]] * 2
    # the table served the first two turns (each through the full code check), not the third (K
    # rebound: computed) nor the fourth (read from the store: its copy is made by that load)
    assert out["module loop served"] == [True, True, False, False]


# -- the point read of a hit: what it fetches, binds and checks ---------------------------------

def _two_rows(tmp_path: Any) -> tuple[Any, tuple[str, ...], tuple[str, ...]]:
    from memolab.store import Store

    a, b = ("mod:f", "code", "a" * 32, "schema"), ("mod:f", "code", "b" * 32, "schema")
    store = Store(tmp_path / "s")
    for k, v in ((a, {"v": 1}), (b, {"v": 2})):
        store.acquire(k, store.owner_id())
        store.save(k, store.owner_id(), v, {"started": 1.0, "finished": 2.0, "duration": 1.0,
                                            "snapshot": json.dumps({"result_digest": None})}, {})
    return store, a, b


def test_the_lean_lookup_reads_eleven_columns_binds_the_key_once_and_checks_it(tmp_path):
    # each column a hit fetches costs it ~2,000 instructions and each text it binds ~800
    # (docs/performance.md): the lean lookup fetches what loading and a hit's checks need
    from memolab.store import sqlite as sq

    store, a, _ = _two_rows(tmp_path)
    c = store.index.conn()
    sql = sq._LOOKUP_LEAN_SQL
    assert sql.count("?") == 4  # the key once: the key check compares the table row with the index entry
    # eleven columns, each named by one letter (a string Python keeps made: see ``_LOOKUP_LEAN_SQL``);
    # the first is the id of a row the read serves (the keys agree, the row is in use), else NULL
    assert [d[0] for d in c.execute(sql, a).description] == list("abcdefghijk")
    assert sql.startswith("SELECT CASE WHEN ev.fn=ix.fn AND ev.code=ix.code AND ev.args=ix.args "
                          "AND ev.schema=ix.schema AND ev.status='done' THEN ev.id END AS a, ev.payload AS b,"), sql
    assert sq.LEAN_COLUMNS == ("id", "status", "payload", "payload_size", "buffers", "inline", "started", "finished",
                               "duration", "result_token", "state_deps", "reads")
    # the index entry's key columns from a covering search of the unique index, the row by its rowid
    # (SQLite before 3.36 words it "SEARCH TABLE evaluations AS ix ...": the same plan)
    plan = [r[3].replace("TABLE evaluations AS ", "") for r in c.execute("EXPLAIN QUERY PLAN " + sql, a)]
    assert plan == ["SEARCH ix USING COVERING INDEX sqlite_autoindex_evaluations_1 (fn=? AND code=? AND args=? AND schema=?)",
                    "SEARCH ev USING INTEGER PRIMARY KEY (rowid=?)"], plan
    row = store.index.lookup(a, lean=True)
    assert row is not None and row["status"] == "done" and store.load(a, row) == {"v": 1}
    assert row == {k: v for k, v in store.index.lookup(a).items() if k in sq.LEAN_COLUMNS}  # what the full read says


def test_a_key_whose_index_entry_leads_to_another_keys_row_is_not_served_it(tmp_path):
    # A damaged index b-tree (or a table row changed under it) can lead a key to a row that
    # holds another key: the lookup compares the row's own key columns with the key, and
    # refuses, in the lean read of a hit as in the full one. Made here by editing the table's
    # page on disk: row a's ``args`` becomes a third key's, its index entry still says a.
    import sqlite3

    import pytest

    store, a, b = _two_rows(tmp_path)
    c = store.index.conn()
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = c.execute("SELECT rootpage FROM sqlite_master WHERE name='evaluations'").fetchone()[0]
    size = c.execute("PRAGMA page_size").fetchone()[0]
    path = store.index.path
    store.index.close()
    data = bytearray(path.read_bytes())
    page = data[(root - 1) * size:root * size]
    assert page.count(b"a" * 32) == 1  # row a's args, in the table's one (leaf) page
    data[(root - 1) * size:root * size] = page.replace(b"a" * 32, b"c" * 32)
    path.write_bytes(bytes(data))
    reader = type(store)(tmp_path / "s")
    for lean in (True, False):
        with pytest.raises(sqlite3.DatabaseError, match="row of another key"):
            reader.index.lookup(a, lean=lean)
        assert reader.index.lookup(("mod:f", "code", "c" * 32, "schema"), lean=lean) is None  # c has no index entry
        row = reader.index.lookup(b, lean=lean)
        assert row is not None and reader.load(b, row) == {"v": 2}


def test_a_scalar_result_has_a_leaf_only_by_its_type():
    """What ``calls/fasthits`` relies on to skip ``remember_loaded`` for a scalar result: the
    result walk finds a leaf in a plain scalar only when its exact type is a registered leaf."""
    from memolab.hashing import registry, results

    values = [0, 1.5, "s", b"b", True, None, 10**40, float("nan")]
    for v in values:
        out: list = []
        results._walk_leaves(v, out)
        assert out == [], v
    marker = object()
    try:
        registry.leaves[int] = marker  # type: ignore[assignment]  # (a stand-in leaf: only its identity is read)
        out = []
        results._walk_leaves(7, out)
        assert out == [(7, marker)]
    finally:
        registry.leaves.pop(int, None)


def test_the_lean_lookup_reads_a_row_it_does_not_serve_in_full(tmp_path):
    """The lean read's first column is NULL for a row out of use as for another key's row: the
    full read then says which. A row out of use is a miss that knows a row exists (the claim takes
    it over); a key with no row is a miss known absent; a row put back in use is served again."""
    store, a, b = _two_rows(tmp_path)
    index = store.index
    row = index.lookup(a, lean=True)
    assert row is not None and row["status"] == "done"
    for status in ("corrupt", "stale", "unloadable"):
        index.mark_corrupt(row["id"], "a test", status)
        assert index.lookup(a, lean=True) is None and index.lookup(a) is None
        assert not index.known_absent(a)  # (a row out of use: not absent)
        index.conn().execute("UPDATE evaluations SET status='done' WHERE id=?", (row["id"],))
        assert index.lookup(a, lean=True) == row
    assert index.lookup(("mod:f", "code", "c" * 32, "schema"), lean=True) is None
    assert index.known_absent(("mod:f", "code", "c" * 32, "schema"))
    assert store.load(b, index.lookup(b, lean=True)) == {"v": 2}


def test_binding_by_position_gives_what_the_signature_binds():
    """``bind``'s commonest way (every parameter by position) makes the arguments' dict in one
    display (``_positional_dict``): the same names, order and values as ``Signature.bind``."""
    import inspect

    from memolab import memo

    def none():
        return 0

    def one(x):
        return x

    def three(a, b=2, c=None):
        return a

    def odd_names(self_, __x, λ, return_=1):
        return __x

    for fn, args in ((none, ()), (one, (1,)), (three, (1, [2], "c")), (odd_names, (0, 1, 2, 3))):
        m = memo(fn)
        bound = m.bind(args, {})
        want = inspect.signature(fn).bind(*args)
        assert list(bound.arguments.items()) == list(want.arguments.items()), fn
        assert all(bound.arguments[k] is v for k, v in want.arguments.items())
        assert bound.args == args and bound.kwargs == {}
        # what a call past memory keeps instead (``Call.bound`` made of it when the body runs)
        assert list(m._arguments(args, {}).items()) == list(want.arguments.items())
    m = memo(three)
    assert m._arguments((1,), {"c": 3}) == {"a": 1, "b": 2, "c": 3}  # (by hand: keywords, defaults)
    assert list(m.bind((1,), {"c": 3}).arguments) == ["a", "b", "c"]


def test_the_signing_key_asked_without_a_call_says_what_secret_says(monkeypatch):
    from memolab.store import signing

    for value in (None, "", "k", "0"):
        if value is None:
            monkeypatch.delenv(signing.ENV, raising=False)
        else:
            monkeypatch.setenv(signing.ENV, value)
        assert bool(signing.keyed()) == (signing.secret() is not None), value


def test_a_store_hit_sets_no_field_a_miss_sets(tmp_path):
    """``Call``'s fields that a miss sets are class attributes until set: a store hit makes no
    ``__dict__`` entry, and a miss's writes land in its own call, never in the class."""
    from memolab import configure, memo
    from memolab.calls import call as callmod
    from memolab.calls.lifecycle import first_look

    configure(store=str(tmp_path / "store"))

    def g(x):
        return x * 2

    m = memo(g)
    assert m(4) == 8 and m(4) == 8
    m.store().forget()
    c, _ = m._prepare((4,), {}, False)
    assert c is not None and first_look(c) == (True, 8)
    assert c.__dict__ == {} and c.at is None  # (nor its ``BoundArguments``: made on first use)
    assert c.bound is c.bound and c.bound.arguments is c.arguments and c.bound.args == (4,)
    assert c.bound.signature is m.signature
    c.loads += 1
    c.via = ("k", [])
    assert (c.loads, callmod.Call.loads, callmod.Call.via) == (1, 0, None)
    d, _ = m._prepare((5,), {}, False)
    assert d is not None and d.loads == 0 and d.via is None and d.pending == [] and d.pending is not c.pending


def test_a_scalar_result_is_one_that_the_steps_call_load_skips_would_hand_back_as_it_is():
    """``Call.load`` hands a loaded value of an exact type in ``call._SCALARS`` back without
    ``globalrng.restore``, ``mutations.split``/``restore`` and ``upstream.mark``: each returns
    such a value as it is and marks nothing (a wrapper, ``Result`` or ``Post``, is never one)."""
    from memolab.calls import call as callmod
    from memolab.inputs import globalrng, mutations, upstream

    assert callmod._SCALARS <= set(upstream._ATOMS)  # (what ``mark`` leaves alone)
    assert not {globalrng.Result, mutations.Post} & callmod._SCALARS
    for v in (0, 1.5, 2j, True, "s", b"b", None):
        assert type(v) in callmod._SCALARS
        assert globalrng.restore(v) is v and mutations.split(v) == (v, None)
        assert mutations.restore(v, None, [("x", [1])]) is v
