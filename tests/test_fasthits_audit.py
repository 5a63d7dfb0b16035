"""An adversarial review of the repeat-hit table (``calls/fasthits``): every case runs a memoized
function and its twin whose table is off (``_fast = None``, the full path), in one fresh process,
and the two must give equal values, equal body runs and equal bookkeeping (hit counts, lineage,
the generators' states after the call), as tests/test_hit_path_costs.py's twins do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

AUX = textwrap.dedent(r"""
    from memolab import memo
    X = 1

    def helper(x):
        return x * X

    @memo
    def in_module(x):
        with open(LOG, "a") as fh: fh.write("in_module ")
        return [X, x]
""")

#: the repeat-hit tables of a script's functions, counting the hits they answered (``SERVED``): put
#: in each script at its ``# @COUNTED`` line
COUNTED = textwrap.dedent(r"""
    SERVED = [0]  # repeat hits the tables answered
    from memolab.calls.fasthits import MISS, FastTable

    class Counted(FastTable):  # (a subclass, not a patch of memolab's: a patch joins every code digest)
        __slots__ = ()

        def hit(self, *a):
            got = super().hit(*a)
            SERVED[0] += got is not MISS
            return got
""")

AUDIT = textwrap.dedent(r"""
    import functools, importlib, json, os, random, subprocess, sys, threading
    from memolab import configure, memo
    from memolab.hashing import identity
    from memolab.store import get_store

    base, sub = sys.argv[1], sys.argv[2]
    sys.path.insert(0, base)
    LOG = os.path.join(base, "log")
    import auxmod
    auxmod.LOG = LOG
    K = 1

    # @COUNTED


    def helper(x):
        return x + 1

    def plain_deco(f):  # a library decorator without functools.wraps
        def wrapper(*a, **kw):
            return f(*a, **kw)
        return wrapper

    def make_closure(t):
        cell = 10

        @memo
        def CL(x):
            with open(LOG, "a") as fh: fh.write(f"CL_{t} ")
            return [cell, x]
        def rebind(v):
            nonlocal cell
            cell = v
        return CL, rebind

    TEMPLATE = '''
    @memo
    def A_{t}(x, y=2):  # a mutable result, a default, a helper and a global
        with open(LOG, "a") as fh: fh.write("A_{t} ")
        return [x, y, K, helper(x)]

    @memo
    def F_{t}(x):  # an immutable scalar result (shared by the table)
        with open(LOG, "a") as fh: fh.write("F_{t} ")
        return float(K * 2) + helper(0)

    @memo
    def SEED_{t}(x):  # seeds the global generator: a hit must leave it as the body did
        with open(LOG, "a") as fh: fh.write("SEED_{t} ")
        random.seed(x)
        return random.random()

    @memo
    def DRAW_{t}(x):  # draws from the global generator's state: routed by it, never in the table
        with open(LOG, "a") as fh: fh.write("DRAW_{t} ")
        return random.random() + x

    @memo
    def INNER_{t}(x):
        with open(LOG, "a") as fh: fh.write("INNER_{t} ")
        return [x * 100]

    @memo
    def OUTER_{t}(x):  # a body that calls another memoized function
        with open(LOG, "a") as fh: fh.write("OUTER_{t} ")
        return INNER_{t}(x)[0] + 1

    @memo
    def USE_{t}(v):  # takes another's result: its input edge (lineage) names where v came from
        with open(LOG, "a") as fh: fh.write("USE_{t} ")
        return len(v)

    @memo
    def MOD_{t}(x):  # reads a module's attribute
        with open(LOG, "a") as fh: fh.write("MOD_{t} ")
        return [auxmod.X, auxmod.helper(x)]

    @memo
    def D_{t}(x, y=1):
        with open(LOG, "a") as fh: fh.write("D_{t} ")
        return [x, y]

    @memo
    def KW_{t}(x, *, z=5):
        with open(LOG, "a") as fh: fh.write("KW_{t} ")
        return [x, z]

    @memo
    def T_{t}(x):  # echoes its argument's type and value
        with open(LOG, "a") as fh: fh.write("T_{t} ")
        return [type(x).__name__, repr(x)[:40], len(repr(x))]

    @memo
    @plain_deco
    def W_{t}(x):  # memoized over a wrapper without functools.wraps
        with open(LOG, "a") as fh: fh.write("W_{t} ")
        return [x, "w"]

    @plain_deco
    @memo
    def V_{t}(x):  # a wrapper without functools.wraps stacked on top
        with open(LOG, "a") as fh: fh.write("V_{t} ")
        return [x, "v"]

    class Model_{t}:
        def __init__(self, k):
            self.k = k

        @memo
        def m(self, x):
            with open(LOG, "a") as fh: fh.write("M_{t} ")
            return [self.k, x]

    def _p_{t}(a, x):
        with open(LOG, "a") as fh: fh.write("P_{t} ")
        return [a, x]
    P_{t} = memo(functools.partial(_p_{t}, 1))
    '''
    for t in ("fast", "full"):
        exec(TEMPLATE.format(t=t), globals())
        globals()[f"CL_{t}"], globals()[f"rebind_{t}"] = make_closure(t)
    for n in ("A", "F", "SEED", "DRAW", "INNER", "OUTER", "USE", "MOD", "D", "KW", "T", "W", "CL", "P"):
        globals()[f"{n}_full"]._fast = None  # the twin: the full path only
    V_full.__closure__[0].cell_contents._fast = None  # (the memo under the wrapper)
    Model_full.m._fast = None
    for m in (A_fast, F_fast, SEED_fast, DRAW_fast, INNER_fast, OUTER_fast, USE_fast, MOD_fast, D_fast, KW_fast, T_fast,
              W_fast, CL_fast, V_fast.__closure__[0].cell_contents, Model_fast.m, auxmod.in_module):
        m._fast = Counted()

    def runs():
        text = open(LOG).read() if os.path.exists(LOG) else ""
        return {name: text.split().count(name) for name in set(text.split())}

    out = {}

    def case(name, kinds, args, after=None, setup=None):
        # five calls of each argument list (a miss, a hit from the store, from memory, then the
        # table), fast then full: values and body runs (``after``: what to record after each
        # call, e.g. the global generator's next draw; ``setup``: run before each twin)
        before, served = runs(), SERVED[0]
        got = {}
        for t in ("fast", "full"):
            if setup:
                setup()
            for kind in kinds.split(","):
                fn = globals()[f"{kind}_{t}"]
                got[f"{kind}_{t}"] = [[[fn(*a, **kw), after() if after else None] for _ in range(5)] for a, kw in args]
        now = runs()
        out[name] = {"values": json.loads(json.dumps(got, default=repr)),  # (as they were: a result may be changed later)
                     "runs": {k: now.get(k, 0) - before.get(k, 0) for k in now}, "served": SERVED[0] - served}

    def pos(*a):
        return [(a, {})]

    def table(kind):
        memo_fn = globals()[f"{kind}_fast"]
        return len(memo_fn._fast.entries) if memo_fn._fast is not None else None

    def main():
        global K
        # -- settings and environment flipped between calls ---------------------------------
        case("warm", "A,F", pos(3))
        out["A table"] = table("A")
        configure(verbose=2)
        case("verbose", "A,F", pos(3))
        configure(verbose=None)
        identity.lineage = False
        case("lineage off", "A,F", pos(3))
        identity.lineage = True
        case("lineage on", "A,F", pos(3))
        for var, value in (("MEMOLAB_VERSION_SENSITIVITY", "exact"), ("MEMOLAB_INLINE_MAX", "0"),
                           ("MEMOLAB_CODE_CACHE", "0"), ("MEMOLAB_STORE_SHARING", "group")):
            os.environ[var] = value
            case(f"env {var}", "A,F", pos(3))
            del os.environ[var]
        configure(version_sensitivity="exact")
        case("configured sensitivity", "A,F", pos(3))
        configure(version_sensitivity="minor")
        case("sensitivity back", "A,F", pos(3))
        home = os.getcwd()
        os.chdir(sub)  # a subfolder of the same project: the same store
        case("chdir same store", "A,F", pos(3))
        os.chdir(home)
        team = os.path.join(base, "team")
        configure(remote="sqlite:///" + os.path.join(team, "index.db"), remote_blobs="file://" + team)
        case("team store configured", "A,F", pos(3))
        configure(remote=None, remote_blobs=None)
        case("team store gone", "A,F", pos(3))
        os.environ["MEMOLAB_REMOTE"] = "sqlite:///" + os.path.join(team, "index2.db")
        os.environ["MEMOLAB_REMOTE_BLOBS"] = "file://" + team + "2"
        case("team store by env", "A,F", pos(3))
        del os.environ["MEMOLAB_REMOTE"], os.environ["MEMOLAB_REMOTE_BLOBS"]
        case("team env gone", "A,F", pos(3))
        # -- thread ---------------------------------------------------------------------------
        box = {}
        th = threading.Thread(target=lambda: box.update({t: [globals()[f"A_{t}"](3) for _ in range(5)]
                                                          for t in ("fast", "full")}))
        th.start(); th.join()
        out["thread"] = box
        # -- generators -----------------------------------------------------------------------
        case("seed", "SEED", pos(5), after=random.random)
        out["SEED table"] = table("SEED")
        case("draw", "DRAW", pos(5), after=random.random, setup=lambda: random.seed(1))
        out["DRAW table"] = table("DRAW")
        # -- nested, lineage ------------------------------------------------------------------
        case("nested", "OUTER", pos(4))
        for t in ("fast", "full"):
            globals()[f"INNER_{t}"].clear()
        case("inner cleared", "OUTER", pos(4))
        get_store().forget()
        case("inner forgotten", "OUTER", pos(4))
        for t in ("fast", "full"):
            globals()[f"INNER_{t}"].fn.__code__ = (lambda x: [x * 1000]).__code__
        case("inner code changed", "OUTER", pos(4))
        for t in ("fast", "full"):
            globals()[f"INNER_{t}"].fn.__code__ = (lambda x: [x * 100]).__code__
        records = {}
        for t in ("fast", "full"):
            for _ in range(5):
                globals()[f"INNER_{t}"](8)  # (the fast one's table answers from the fourth call)
            globals()[f"OUTER_{t}"](8)  # computed: its body's inner call is a hit (the table's, fast)
            snap = json.loads(globals()[f"OUTER_{t}"].evaluations()[0]["snapshot"])
            records[t] = [[c[0].replace(t, "T"), c[4]] for c in snap["reads"]["calls"]]
        out["outer's record"] = records
        uses = {}
        for t in ("fast", "full"):
            a = globals()[f"A_{t}"]
            a(7); a(7)
            v = a(7)  # a table hit (fast): its lineage must be marked as the full path marks it
            globals()[f"USE_{t}"](v)
            snap = json.loads(globals()[f"USE_{t}"].evaluations()[0]["snapshot"])
            uses[t] = [(e["path"], e["fn"].replace(t, "T"), e["by"]) for e in snap.get("inputs", [])]
        out["lineage edges"] = uses
        # -- code: globals, modules, closures, defaults, redefinition, reload ----------------
        K = 5
        case("global rebound", "A,F", pos(3))
        K = 1
        exec("def helper(x):\n    return x + 2", globals())  # redefined under the same name
        case("helper redefined", "A,F", pos(3))
        exec("def helper(x):\n    return x + 1", globals())
        case("helper back", "A,F", pos(3))
        case("module attr", "MOD", pos(3))
        auxmod.X = 7  # a module's attribute replaced
        case("module attr replaced", "MOD", pos(3))
        auxmod.helper = lambda x: -x
        case("module function replaced", "MOD", pos(3))
        case("closure", "CL", pos(3))
        rebind_fast(11); rebind_full(11)
        case("closure rebound", "CL", pos(3))
        case("defaults", "D", pos(3))
        for t in ("fast", "full"):
            globals()[f"D_{t}"].fn.__defaults__ = (9,)
        case("defaults changed", "D", pos(3))
        for t in ("fast", "full"):
            globals()[f"D_{t}"].fn.__defaults__ = (1,)
        case("defaults back", "D", pos(3))
        for t in ("fast", "full"):
            globals()[f"D_{t}"].fn.__defaults__ = ([5],)  # not a plain scalar: no table any more
        case("default list", "D", pos(3))
        out["D table"] = D_fast._fast
        for t in ("fast", "full"):
            globals()[f"D_{t}"].fn.__defaults__[0].append(6)  # changed in place: keyed on every call
        case("default list changed", "D", pos(3))
        case("kwdefaults", "KW", pos(3))
        for t in ("fast", "full"):
            globals()[f"KW_{t}"].fn.__kwdefaults__ = {"z": 7}
        case("kwdefaults changed", "KW", pos(3))
        case("wrapped", "W,V", pos(3))
        for t in ("fast", "full"):
            inner = globals()[f"W_{t}"].fn.__closure__[0].cell_contents
            inner.__code__ = (lambda x: [x, "w2"]).__code__
            inner = globals()[f"V_{t}"].__closure__[0].cell_contents.fn
            inner.__code__ = (lambda x: [x, "v2"]).__code__
        case("wrapped code changed", "W,V", pos(3))
        out["P has table"] = P_fast._fast is not None
        case("partial", "P", pos(3))
        models = {}
        for t in ("fast", "full"):
            m = globals()[f"Model_{t}"](1)
            models[t] = [m.m(3) for _ in range(3)]
            m.k = 2
            models[t] += [m.m(3) for _ in range(3)]
        out["method"] = models
        mods = []
        for _ in range(3):
            mods.append(auxmod.in_module(3))
        path = auxmod.__file__
        src = open(path).read()
        with open(path, "w") as fh:
            fh.write(src.replace("X = 1", "X = 2"))
        old = auxmod.in_module
        importlib.invalidate_caches()
        importlib.reload(auxmod)
        auxmod.LOG = LOG
        mods += [auxmod.in_module(3) for _ in range(3)] + [old(3) for _ in range(3)]
        out["reload"] = mods
        # -- argument types -------------------------------------------------------------------
        class I(int):
            pass

        class S(str):
            pass

        big = 10 ** 400
        case("types", "T", [((v,), {}) for v in (
            1, True, I(1), "a", S("a"), big, big + 1, -big, 2 ** 63, 2 ** 64, "x" * 256, "x" * 257, "x" * 256 + "y",
            b"x" * 257, "é" * 256, "\ud800", 1e308, 5e-324, float("inf"))])
        # -- bookkeeping ----------------------------------------------------------------------
        store = get_store()
        store.flush_hits()
        out["hits"] = {t: sorted(r["hits"] for r in globals()[f"{k}_{t}"].evaluations())
                       for t in ("fast", "full") for k in ("A",)}
        out["explain"] = {t: str(globals()[f"A_{t}"].explain(3)).splitlines()[0].replace(t, "T")
                          for t in ("fast", "full")}
        # -- a forked child: its own pid-scoped store ------------------------------------------
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            before, served = runs(), SERVED[0]
            got = {t: [globals()[f"A_{t}"](3) for _ in range(5)] for t in ("fast", "full")}
            now = runs()
            os.write(w, json.dumps({"values": got, "runs": {k: now.get(k, 0) - before.get(k, 0) for k in now
                                                            if now.get(k, 0) != before.get(k, 0)},
                                    "served": SERVED[0] - served, "same store": A_fast.store() is store}).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        out["fork"] = json.loads(data)

    main()
    print(json.dumps(out, default=repr))
""")


def test_the_table_answers_as_the_full_path_in_every_audited_case(tmp_path):
    home = tmp_path / "home"
    (home / "sub").mkdir(parents=True)
    (home / "pyproject.toml").write_text("[project]\nname='audit'\n")
    (home / "auxmod.py").write_text(AUX)
    script = home / "audit.py"
    script.write_text(AUDIT.replace("# @COUNTED\n", COUNTED))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")}
    cp = subprocess.run([sys.executable, str(script), str(home), str(home / "sub")], cwd=home, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])

    def same(case: str) -> dict[str, Any]:
        got = out[case]
        kinds = {k.rsplit("_", 1)[0] for k in got["values"]}
        for k in kinds:
            assert got["values"][f"{k}_fast"] == got["values"][f"{k}_full"], (case, got)
            assert got["runs"].get(f"{k}_fast", 0) == got["runs"].get(f"{k}_full", 0), (case, got)
        return {"values": {k: got["values"][f"{k}_fast"] for k in kinds},
                "runs": {k: got["runs"].get(f"{k}_fast", 0) for k in kinds}}

    cases = [n for n, v in out.items() if isinstance(v, dict) and "values" in v and n != "fork"]
    assert len(cases) == 40
    for name in cases:
        same(name)
    # the table answered where its conditions hold (the agreement above is not of two full paths)
    served = {n: out[n]["served"] for n in cases}
    for name in ("verbose", "lineage off", "lineage on", "env MEMOLAB_INLINE_MAX", "env MEMOLAB_VERSION_SENSITIVITY",
                 "chdir same store", "team store configured", "team store by env", "seed", "global rebound",
                 "helper redefined", "module attr replaced", "closure rebound", "defaults changed",
                 "wrapped code changed", "types"):
        assert served[name] > 0, (name, served)
    # and never where they do not: generator states, a body's record of what it used, a partial
    assert served["draw"] == served["nested"] == served["inner code changed"] == served["partial"] == 0, served
    assert out["DRAW table"] == 0 and out["SEED table"] == 1 and out["P has table"] is False
    # what the full path computes again after each change, the table computes too
    assert same("global rebound")["runs"] == same("helper redefined")["runs"] == {"A": 1, "F": 1}
    assert same("module attr replaced")["values"]["MOD"][0][-1][0] == [7, 21]
    assert same("module function replaced")["values"]["MOD"][0][-1][0] == [7, -3]
    assert same("closure rebound")["values"]["CL"][0][-1][0] == [11, 3]
    # new defaults assigned (``fn.__defaults__ = (9,)``) are bound: computed with them, as the function would
    changed = same("defaults changed")
    assert changed["values"]["D"][0][-1][0] == [3, 9] and changed["runs"] == {"D": 1}, changed
    assert same("defaults back")["runs"] == {"D": 0}
    assert same("default list")["values"]["D"][0][-1][0] == [3, [5]] and out["D table"] is None
    assert same("default list changed")["values"]["D"][0][-1][0] == [3, [5, 6]]
    assert same("kwdefaults changed")["values"]["KW"][0][-1][0] == [3, 7]
    assert same("wrapped code changed")["values"]["W"][0][-1][0] == [3, "w2"]
    assert same("wrapped code changed")["values"]["V"][0][-1][0] == [3, "v2"]
    assert same("inner code changed")["runs"]["OUTER"] == 1
    # a seeded body's hit leaves the generator where the body left it
    seeded = same("seed")["values"]["SEED"][0]
    assert len({json.dumps(v) for v in seeded}) == 1
    types = same("types")
    assert types["runs"]["T"] == 19  # each of the 19 arguments its own key (I(1) and S("a") included)
    assert out["thread"]["fast"] == out["thread"]["full"]
    assert out["outer's record"]["fast"] == out["outer's record"]["full"] == [["__main__:INNER_T", None]]
    assert out["lineage edges"]["fast"] == out["lineage edges"]["full"] == [["v", "__main__:A_T", "object"]]
    assert out["method"]["fast"] == out["method"]["full"] == [[1, 3]] * 3 + [[2, 3]] * 3
    assert out["reload"] == [[7, 3]] * 3 + [[2, 3]] * 6
    assert out["hits"]["fast"] == out["hits"]["full"]
    assert out["explain"]["fast"] == out["explain"]["full"] == "audit.py:A_T: hit"
    fork = out["fork"]
    assert fork["values"]["fast"] == fork["values"]["full"] == [[3, 2, 1, 4]] * 5
    assert fork["runs"] == {} and fork["same store"] is False and fork["served"] == 3  # its own store's copies


# torch's switches (``implicit.parts``: read on every table hit), entered and left between calls,
# some thread-local (autocast, grad mode): a call from another thread sees that thread's own.
TORCH = textwrap.dedent(r"""
    import json, os, sys, threading
    import torch
    from memolab import memo

    LOG = os.path.join(sys.argv[1], "log")
    # @COUNTED

    TEMPLATE = '''
    @memo
    def Z_{t}(x):
        with open(LOG, "a") as fh: fh.write("Z_{t} ")
        return [x, str(torch.get_default_dtype()), torch.is_autocast_enabled("cpu"), torch.is_grad_enabled(),
                torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision()]
    '''
    for t in ("fast", "full"):
        exec(TEMPLATE.format(t=t), globals())
    Z_full._fast = None
    Z_fast._fast = Counted()

    def runs():
        text = open(LOG).read() if os.path.exists(LOG) else ""
        return {name: text.split().count(name) for name in set(text.split())}

    out = {}

    def case(name, where=None):
        before, served = runs(), SERVED[0]
        got = {}
        for t in ("fast", "full"):
            fn = globals()[f"Z_{t}"]
            if where is None:
                got[t] = [fn(3) for _ in range(5)]
            else:
                box = []
                th = threading.Thread(target=lambda: box.extend(fn(3) for _ in range(5)))
                th.start()
                th.join()
                got[t] = box
        now = runs()
        out[name] = {"values": json.loads(json.dumps(got, default=repr)),  # (as they were: a result may be changed later)
                     "runs": {k: now.get(k, 0) - before.get(k, 0) for k in now}, "served": SERVED[0] - served}

    case("defaults")
    torch.set_default_dtype(torch.float64)
    case("default dtype")
    torch.set_default_dtype(torch.float32)
    case("dtype back")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        case("autocast")
        case("another thread in autocast", "thread")
    case("autocast left")
    with torch.no_grad():
        case("no_grad")
    torch.use_deterministic_algorithms(True)
    case("deterministic")
    torch.use_deterministic_algorithms(False)
    torch.set_float32_matmul_precision("medium")
    case("matmul precision")
    torch.set_float32_matmul_precision("highest")
    case("all back")
    print(json.dumps(out))
""")


def test_the_table_answers_as_the_full_path_under_torch_switches(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname='audit'\n")
    script = tmp_path / "torch_audit.py"
    script.write_text(TORCH.replace("# @COUNTED\n", COUNTED))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")}
    cp = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    for name, got in out.items():
        assert got["values"]["fast"] == got["values"]["full"], (name, got)
        assert got["runs"].get("Z_fast", 0) == got["runs"].get("Z_full", 0), (name, got)
    runs = {n: g["runs"].get("Z_fast", 0) for n, g in out.items()}
    served = {n: g["served"] for n, g in out.items()}
    for name in ("default dtype", "autocast", "no_grad", "deterministic", "matmul precision"):
        assert runs[name] == 1 and served[name] == 0, (name, runs, served)  # a switch flipped: a new key
    for name in ("dtype back", "another thread in autocast", "autocast left", "all back"):
        assert runs[name] == 0 and served[name] >= 4, (name, runs, served)  # (the other thread's is off)
