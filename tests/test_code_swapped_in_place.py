"""A function's code or defaults written in place, with no namespace written, after a graph is warm
(issue 52 §2's audit of the repeat hit; docs/code-dependencies.md, "Known limits").

Hot reloaders (jurigged), tests' patches and hand-made ones (``helper.__defaults__ = (5,)``) write a
function's code or defaults in place, and ``Child.__bases__ = (Other,)`` writes no dict either: up
to 0.4.2 a warm graph returned the old result for each (only the memoized function's own
``__code__`` was checked). IPython's ``%autoreload`` patches the old objects a notebook holds the
same way, but also rebinds their names in the module's dict, which the graph watches: kept as a
case. Each case is made after three calls (the graph armed, the stamp set, the repeat-hit table
filled), in one fresh process, and each call is compared with the un-memoized truth, through the
repeat-hit table and through the full path (a twin whose table is off), at module level and in a
loop that writes a global every turn (the full check, not the quiet one)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import require

MODEL = textwrap.dedent("""
    import functools

    def helper(x, k=1):
        return x + k

    def logged(f):
        @functools.wraps(f)
        def wrapper(*a, **k):
            return f(*a, **k)
        return wrapper

    class Net:
        scale = 2

        @functools.cached_property
        def cached(self):
            return 20

        @logged
        def wrapped(self, x):
            return x + 30

        def forward(self, x, k=1):
            return x * 2 + k

        @staticmethod
        def stat(x):
            return x - 1

        @classmethod
        def klass(cls, x):
            return x - 2

        @property
        def prop(self):
            return 10

    class One:
        def extra(self):
            return 1

    class Two:
        def extra(self):
            return 2

    class Child(One):
        pass
""")

SCRIPT = textwrap.dedent(r"""
    import importlib, json, os, sys
    base = sys.argv[1]
    sys.path.insert(0, base)
    from memolab import configure, memo
    from memolab.codegraph import dictversion
    if sys.argv[2] == "attributes":  # an interpreter whose function layout is not verified: read as attributes
        dictversion._funcs_work = dictversion._types_work = False
    configure(store=os.path.join(base, "store"), verbose=False)
    import model
    from model import Child, Net, Two, helper

    def other(x, k=1):
        return x + 1000 + k

    def kwonly(x, *, k=1):
        return x + k

    def via_helper(x):
        return helper(x)

    def via_forward(x):
        return Net().forward(x)

    def via_stat(x):
        return Net.stat(x)

    def via_klass(x):
        return Net.klass(x)

    def via_prop(x):
        return Net().prop + x

    def via_kwonly(x):
        return kwonly(x)

    def via_bases(x):
        return Child().extra() + x

    def via_cached(x):
        return Net().cached + x

    def via_wrapped(x):
        return Net().wrapped(x)

    def by_version(x, k=1):  # keyed by its version alone: no code graph, its defaults bound into the key
        return x + k

    TRUTH = {f.__name__: f for f in (via_helper, via_forward, via_stat, via_klass, via_prop, via_kwonly, via_bases,
                                       via_cached, via_wrapped, by_version)}
    FAST = {n: memo(f) for n, f in TRUTH.items() if n != "by_version"}
    FAST["by_version"] = memo(by_version, code="version", version=1)
    FULL = {}
    for n, f in TRUTH.items():
        FULL[n] = memo(f, version=None) if n != "by_version" else memo(by_version, code="version", version=1)
        FULL[n]._fast = None  # the twin: the full path only

    def warm():
        for n in TRUTH:
            for _ in range(3):
                FAST[n](3), FULL[n](3)

    def check(case):
        got = {n: [FAST[n](3), FULL[n](3), TRUTH[n](3)] for n in TRUTH}
        bad = {n: v for n, v in got.items() if len(set(v)) != 1}
        out[case] = bad

    def in_a_loop(case, change):  # a global written every turn: the full check
        global TURN
        seen = []
        for TURN in range(4):
            if TURN == 2:
                change()
            seen.append({n: [FAST[n](3), FULL[n](3), TRUTH[n](3)] for n in TRUTH})
        out[case] = {n: v for turn in seen for n, v in turn.items() if len(set(v)) != 1}

    out = {}
    warm()
    check("warm")

    def code(f, g):
        f.__code__ = g.__code__

    cases = {
        "helper.__code__": lambda: code(helper, other),
        "helper.__defaults__": lambda: setattr(helper, "__defaults__", (100,)),
        "memoized function's __defaults__": lambda: setattr(by_version, "__defaults__", (800,)),
        "kwonly.__kwdefaults__": lambda: setattr(kwonly, "__kwdefaults__", {"k": 200}),
        "Net.forward.__code__": lambda: code(Net.forward, lambda self, x, k=1: x * 20 + k),
        "Net.forward.__defaults__": lambda: setattr(Net.forward, "__defaults__", (300,)),
        "staticmethod __code__": lambda: code(Net.__dict__["stat"].__func__, lambda x: x - 50),
        "classmethod __code__": lambda: code(Net.__dict__["klass"].__func__, lambda cls, x: x + 400),
        "property fget __code__": lambda: code(Net.__dict__["prop"].fget, lambda self: 500),
        "Child.__bases__": lambda: setattr(Child, "__bases__", (Two,)),
        "cached_property func __code__": lambda: code(Net.__dict__["cached"].func, lambda self: 900),
        "decorated method __code__": lambda: code(Net.__dict__["wrapped"].__wrapped__, lambda self, x: x + 950),
    }
    for case, change in cases.items():
        warm()
        change()
        check(case)
    # the same kinds of write, seen by the full check (a global written on every turn)
    in_a_loop("loop: helper.__code__", lambda: code(helper, lambda x, k=1: x + 600 + k))
    in_a_loop("loop: Net.forward.__defaults__", lambda: setattr(Net.forward, "__defaults__", (700,)))

    # IPython's %autoreload: the module edited on disk, reloaded, the old objects patched in place
    from IPython.extensions import autoreload
    warm()
    path = os.path.join(base, "model.py")
    src = open(path).read()
    st = os.stat(path)
    open(path, "w").write(src.replace("return x + k", "return x + 7 * k").replace("x * 2 + k", "x * 9 + k"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    autoreload.superreload(model)
    assert helper is not model.helper and Net is not model.Net  # the script still holds the old objects
    check("%autoreload")
    out["autoreload truth"] = [TRUTH["via_helper"](3), TRUTH["via_forward"](3)]
    out["views"] = dictversion.func_view(helper) is not None and dictversion.mro_view(Child) is not None
    print(json.dumps(out))
""")


@pytest.mark.parametrize("read", ["views", "attributes"])
def test_code_or_defaults_written_in_place_are_seen_by_the_next_call(tmp_path, read):
    require("IPython.extensions.autoreload")
    (tmp_path / "model.py").write_text(MODEL)
    script = tmp_path / "swaps.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")}
    cp = subprocess.run([sys.executable, str(script), str(tmp_path), read], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out.pop("views") is (read == "views")
    # the old objects run the reloaded code, with its defaults (``superreload`` patches both)
    assert out.pop("autoreload truth") == [3 + 7 * 1, 3 * 9 + 1]
    # every case: the memoized call (through the table and through the full path) equals the truth
    assert out == {case: {} for case in out}, out
    assert len(out) == 16, sorted(out)


def test_a_slot_many_functions_go_through_is_checked_once_and_every_function_once(tmp_path, monkeypatch):
    # 200 functions calling ``math.sqrt`` (a builtin, whose type overrides ``==``: checked by identity)
    # go through one slot: the per-call check is one identity test, not 200 (it was 200 up to 0.4.2)
    from memolab import codegraph

    src = "import math\n\n" + "".join(f"def h{i}(x):\n    return math.sqrt(x) + h{i + 1}(x)\n\n" for i in range(200)) \
        + "def h200(x):\n    return x\n"
    (tmp_path / "many_sqrt.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    import many_sqrt

    for _ in range(3):
        codegraph.function_code(many_sqrt.h0)
    root = codegraph.function_root(many_sqrt.h0)
    assert [obj for _, name, obj in root.same if name == "sqrt"] == [math.sqrt]
    assert len(root.graph.func_checks) == 201  # each function's code and defaults: once
    assert root.fviews is not None and len(root.fviews) == 201 and root.stamp is not None


FIRST = textwrap.dedent(r"""
    import json, os, sys
    from memolab import configure, memo
    configure(store=os.path.join(sys.argv[1], "store"), verbose=False)

    @memo
    def f(x, k=1):
        return x + k

    f(3)
    first = "_ctypes" in sys.modules
    f(3), f(3), f(3)
    print(json.dumps([first, f._defaults_src[3] is not None, "_ctypes" in sys.modules]))
""")


def test_the_views_are_made_once_a_graph_is_checked_again_not_on_a_first_call(tmp_path):
    # a script whose only call is a hit must not load ``_ctypes`` (about 0.6 ms) to make views it never reads
    script = tmp_path / "first.py"
    script.write_text(FIRST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMOLAB_")}
    for _ in range(2):  # a miss, then (a new process) a first call that is a hit
        cp = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        assert json.loads(cp.stdout.strip().splitlines()[-1]) == [False, True, True]
