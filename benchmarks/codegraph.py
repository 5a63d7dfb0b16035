"""Code-digest cost on a synthetic user package, memolab and joblib side by side.

Generates packages of ``--lines`` lines (default 20,000) in a temp dir: modules
of plain functions, classes (a base class and subclasses with class
attributes), module constants, cross-module ``import``/``from . import``
calls, comprehensions and lambdas; an entry function reaches every module and
every class. One package per class count in ``--classes`` (default 80 and
500). Then measures, in this process:

* first analysis: ``function_code(entry)`` with every memolab cache and
  ``linecache`` cleared (the package itself is already imported, as it is when
  a memoized function is first called);
* repeat call: ``function_code(entry)`` again, what every memoized call pays
  to know that no code it depends on changed: every module namespace and
  class dict the graph went through (one gather of their version tags where
  CPython allows);
* the same repeat call where dict version tags are unavailable (other
  Pythons): every namespace slot and every class compared one by one;
* a function reading a small mutable global, which is re-hashed on each call;
* joblib.Memory's per-call code check (``MemorizedFunc._check_previous_func_code``
  once the function is in its in-process ``_FUNCTION_HASHES``): it compares
  ``id``/``hash`` of the function and ``hash(func.__code__)``, i.e. the
  memoized function's *own* code object only. It does not see an edited
  helper, a rebound global or a patched class; memolab's check does.

Every row is timed in interleaved rounds (each round runs every row once, for
about ``--seconds`` each) and printed as median and min–max over the rounds.

Usage: python benchmarks/codegraph.py [--lines 20000] [--classes 80 500] [--rounds 7]
"""
from __future__ import annotations

import argparse
import importlib
import linecache
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path


def generate(root: Path, name: str, lines: int, classes: int, per_module: int = 500) -> int:
    """Write package ``name`` under ``root``; returns the number of lines written."""
    pkg = root / name
    pkg.mkdir()
    n_mod = max(1, round(lines / per_module))
    total = 0
    for m in range(n_mod):
        n_cls = classes // n_mod + (1 if m < classes % n_mod else 0)
        out = [f'"""Synthetic module {m}."""', "import math", "from . import consts",
               f"from . import m{(m + 1) % n_mod} as nxt", "", f"SCALE = {m + 1}", ""]
        cls_lines: list = []
        if n_cls:
            cls_lines += [f"class Base{m}:", "    def scale(self, x):", "        return x * SCALE", ""]
        for j in range(1, n_cls):
            cls_lines += [f"class Model{m}_{j}(Base{m}):", f"    factor = {j}", "",
                          "    def forward(self, x):", "        return self.scale(x) * self.factor + f0(x)", ""]
        users = [f"Model{m}_{j}().forward(x)" for j in range(1, n_cls)] or (["Base{m}().scale(x)"] if n_cls else [])
        cls_lines += ["def models(x):", f"    return {' + '.join(users) if users else '0'}", ""]
        body_lines = 9
        n_fn = max(1, (per_module - 20 - len(cls_lines)) // body_lines)
        for i in range(n_fn):
            callee = f"f{i + 1}(x)" if i + 1 < n_fn else "(chain(x) if x < 0 else 0)"
            out += [
                f"def f{i}(x):",
                f'    """Function {i} of module {m}."""',
                "    ys = [math.sqrt(abs(v)) * SCALE for v in range(x % 7)]",
                f"    g = lambda z: z + consts.OFFSET + {i}",
                f"    if x > {i}:",
                f"        return {callee} + g(sum(ys))",
                "    total = sum(g(v) for v in ys)",
                "    return total + len(ys)",
                "",
            ]
        out += cls_lines
        # every module reaches the next one: the graph spans the whole package, with cycles
        out += ["def chain(x):", "    return nxt.f0(x)", ""]
        text = "\n".join(out) + "\n"
        (pkg / f"m{m}.py").write_text(text)
        total += text.count("\n")
    (pkg / "consts.py").write_text("OFFSET = 3\nNAMES = ('a', 'b')\n")
    imports = "\n".join(f"from . import m{m}" for m in range(n_mod))
    entry = f"{imports}\n\nMODULES = ({', '.join(f'm{m}' for m in range(n_mod))},)\n\n" \
            "def entry(x):\n" + "".join(f"    x += m{m}.f0(x) + m{m}.models(x)\n" for m in range(n_mod)) + \
            "    return x\n"
    (pkg / "__init__.py").write_text(entry)
    return total + entry.count("\n") + 2


def per_call(fn, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(200):
            fn()
        n += 200
    return (time.perf_counter() - t0) / n


def clone(fn: types.FunctionType) -> types.FunctionType:
    """Another function object with the same code and globals: its own memolab graph."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def fmt(ts: list, unit: str) -> str:
    scale = {"ms": 1e3, "µs": 1e6}[unit]
    med = statistics.median(ts) * scale
    return f"{med:.2f} {unit} ({min(ts) * scale:.2f}–{max(ts) * scale:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--classes", type=int, nargs="+", default=[80, 500])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.2, help="time per row per round")
    a = ap.parse_args()

    from memolab import codegraph
    from memolab.codegraph import dictversion

    try:
        import joblib
    except ImportError:
        joblib = None

    rows: dict = {}  # label -> (callable, unit)
    order: list = []
    info: list = []
    keep: list = []

    def row(label: str, fn, unit: str = "µs") -> None:
        rows[label] = (fn, unit, [])
        order.append(label)

    with tempfile.TemporaryDirectory() as d:
        sys.path.insert(0, d)
        entries = {}
        for n_cls in a.classes:
            name = f"synth_c{n_cls}"
            nlines = generate(Path(d), name, a.lines, n_cls)
            entries[n_cls] = importlib.import_module(name).entry
            cv = codegraph.function_code(entries[n_cls])
            codegraph.function_code(entries[n_cls])  # (tags are read from a graph's second check on)
            n_user = sum(1 for k in cv.deps if not k.startswith(("pkg:", "python:")) and ":" in k)
            views = codegraph._function_roots[entries[n_cls]].views
            info.append(f"{name}: {nlines} lines, {len(list(Path(d, name).glob('*.py')))} files, {n_cls} classes, "
                        f"{n_user} user symbols in the graph; a repeat call gathers "
                        f"{len(views) if views is not None else 'no'} views (namespace and class dict tags, "
                        "class bases, function code and defaults)")

        big = max(a.classes)
        entry = entries[big]

        def cold():
            codegraph.clear_caches()
            linecache.clearcache()
            codegraph.function_code(entry)
            for e in entries.values():  # leave every graph warm for the repeat rows
                codegraph.function_code(e)
            build_notag()
            codegraph.function_code(ns["g"])

        def first():
            codegraph.clear_caches()
            linecache.clearcache()
            t = time.perf_counter()
            codegraph.function_code(entry)
            dt = time.perf_counter() - t
            cold()
            return dt

        for n_cls, e in entries.items():
            row(f"memolab repeat call, {a.lines // 1000}k lines, {n_cls} classes", lambda e=e: codegraph.function_code(e))

        # the fallback where dict version tags are unavailable: a clone has its own graph, built without them
        notag = clone(entry)

        def build_notag():  # (and each timed call: tags off there too, its graph is armed at its second check)
            saved = dictversion._works
            dictversion._works = False
            try:
                codegraph.function_code(notag)
            finally:
                dictversion._works = saved

        build_notag()
        row(f"memolab repeat call without version tags (other Pythons), {big} classes", build_notag)

        # a small mutable global is re-hashed on every call (a mutation must be seen)
        ns: dict = {}
        exec(compile("CFG = {'lr': 0.1, 'layers': [64, 64]}\ndef g(x):\n    return x * CFG['lr']\n", "<bench>", "exec"), ns)
        codegraph.function_code(ns["g"])
        row("memolab repeat call, function reading a mutable global", lambda: codegraph.function_code(ns["g"]))

        if joblib is not None:
            mem = joblib.Memory(os.path.join(d, "joblib"), verbose=0)
            jf = mem.cache(clone(entry))
            # the first check in a process writes the function's code to its store and fills
            # _FUNCTION_HASHES (what joblib's first call does); every later call pays the rest
            jf._check_previous_func_code()
            assert jf._check_previous_func_code()
            keep.append(jf)
            row(f"joblib {joblib.__version__} per-call code check (own __code__ hash only)",
                lambda: jf._check_previous_func_code())

        cold()
        first_ts: list = []
        for _ in range(a.rounds):
            first_ts.append(first())
            for label in order:
                fn, unit, ts = rows[label]
                fn()
                ts.append(per_call(fn, a.seconds))

    print("\n".join(info))
    print(f"{a.rounds} interleaved rounds; median (min–max over rounds). Load average at the end: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores.")
    print()
    w = max(len(x) for x in order + ["memolab first analysis"]) + 2
    print(f"| {'measurement':<{w}} | {'median (min–max)':>26} |")
    print(f"|{'-' * (w + 2)}|{'-' * 28}|")
    print(f"| {f'memolab first analysis, {big} classes':<{w}} | {fmt(first_ts, 'ms'):>26} |")
    for label in order:
        fn, unit, ts = rows[label]
        print(f"| {label:<{w}} | {fmt(ts, unit):>26} |")
    rep = statistics.median(rows[order[len(a.classes) - 1]][2])
    print()
    print(f"targets: first analysis < 1 s ({'met' if statistics.median(first_ts) < 1 else 'MISSED'}), "
          f"repeat call at {big} classes < 5 µs ({'met' if rep < 5e-6 else 'MISSED'})")


if __name__ == "__main__":
    main()
