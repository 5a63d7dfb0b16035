"""Code-digest cost on a synthetic user package.

Generates a package of ``--lines`` lines (default 20,000) in a temp dir: modules
of plain functions, classes with a base class, module constants, cross-module
``import``/``from . import`` calls, comprehensions and lambdas; an entry
function reaches every module. Then measures, in this process:

* first analysis: ``function_code(entry)`` with every memolab cache and
  ``linecache`` cleared (the package itself is already imported, as it is when
  a memoized function is first called);
* the same repeat call where PEP 509 dict version tags are not used (the
  fallback on other Pythons: every namespace slot compared);
* repeat call: ``function_code(entry)`` again (what every memoized call pays);
* for scale, what a peer that hashes only the function's own source
  (joblib-style ``inspect.getsource`` + md5) pays per call, and the cost of
  re-hashing a small mutable global.

Usage: python benchmarks/codegraph.py [--lines 20000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import linecache
import statistics
import sys
import tempfile
import time
from pathlib import Path


def generate(root: Path, lines: int, per_module: int = 500) -> int:
    """Write package ``synth`` under ``root``; returns the number of lines written."""
    pkg = root / "synth"
    pkg.mkdir()
    n_mod = max(1, round(lines / per_module))
    total = 0
    for m in range(n_mod):
        out = [f'"""Synthetic module {m}."""', "import math", "from . import consts",
               f"from . import m{(m + 1) % n_mod} as nxt", "", f"SCALE = {m + 1}", ""]
        body_lines = 9
        n_fn = max(1, (per_module - 20) // body_lines)
        for i in range(n_fn):
            callee = f"f{i + 1}(x)" if i + 1 < n_fn else "(chain(x) if x < 0 else 0)"
            out += [
                f"def f{i}(x):",
                f'    """Function {i} of module {m}."""',
                f"    ys = [math.sqrt(abs(v)) * SCALE for v in range(x % 7)]",
                f"    g = lambda z: z + consts.OFFSET + {i}",
                f"    if x > {i}:",
                f"        return {callee} + g(sum(ys))",
                f"    total = sum(g(v) for v in ys)",
                f"    return total + len(ys)",
                "",
            ]
        out += [
            f"class Base{m}:", "    def scale(self, x):", "        return x * SCALE", "",
            f"class Model{m}(Base{m}):", "    factor = 2", "", "    def forward(self, x):",
            "        return self.scale(x) * self.factor + f0(x)", "",
        ]
        # every module reaches the next one: the graph spans the whole package, with cycles
        out += ["def chain(x):", "    return nxt.f0(x)", ""]
        text = "\n".join(out) + "\n"
        (pkg / f"m{m}.py").write_text(text)
        total += text.count("\n")
    (pkg / "consts.py").write_text("OFFSET = 3\nNAMES = ('a', 'b')\n")
    imports = "\n".join(f"from . import m{m}" for m in range(n_mod))
    entry = f"{imports}\n\nMODULES = ({', '.join(f'm{m}' for m in range(n_mod))},)\n\n" \
            "def entry(x):\n" + "".join(f"    x += m{m}.f0(x) + m{m}.Model{m}().forward(x)\n" for m in range(n_mod)) + \
            "    return x\n"
    (pkg / "__init__.py").write_text(entry)
    return total + entry.count("\n") + 2


def median_time(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def per_call(fn, seconds: float = 0.5) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            fn()
        n += 1000
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()

    from memolab import codegraph

    with tempfile.TemporaryDirectory() as d:
        nlines = generate(Path(d), a.lines)
        sys.path.insert(0, d)
        synth = importlib.import_module("synth")
        entry = synth.entry

        def cold():
            codegraph.clear_caches()
            linecache.clearcache()
            return codegraph.function_code(entry)

        cv = cold()
        first = median_time(cold, a.repeat)
        cv = codegraph.function_code(entry)
        repeat = per_call(lambda: codegraph.function_code(entry))

        def joblib_style():
            return hashlib.md5(inspect.getsource(entry).encode()).hexdigest()

        own_src = per_call(joblib_style, 0.3)

        # a small mutable global is re-hashed on every call (a mutation must be seen)
        ns = {}
        exec(compile("CFG = {'lr': 0.1, 'layers': [64, 64]}\ndef g(x):\n    return x * CFG['lr']\n", "<bench>", "exec"), ns)
        codegraph.function_code(ns["g"])
        mutable = per_call(lambda: codegraph.function_code(ns["g"]))

        # the same repeat call where dict version tags are unavailable (not CPython 3.11-3.13):
        # every namespace slot the graph went through is compared
        from memolab.codegraph import dictversion

        saved = dictversion._works
        dictversion._works = False
        codegraph.clear_caches()
        codegraph.function_code(entry)
        repeat_notag = per_call(lambda: codegraph.function_code(entry))
        dictversion._works = saved

        n_user = sum(1 for k in cv.deps if not k.startswith(("pkg:", "python:")) and ":" in k)
        print(f"synthetic package: {nlines} lines, {len(list(Path(d, 'synth').glob('*.py')))} files, "
              f"{n_user} user symbols in the graph, {len(cv.deps)} dependencies in all")
        print()
        print(f"| {'measurement':<58} | {'time':>12} |")
        print(f"|{'-' * 60}|{'-' * 14}|")
        print(f"| {'memolab first analysis (code + graph), median of ' + str(a.repeat):<58} | {first * 1e3:>9.1f} ms |")
        print(f"| {'memolab repeat call (function_code)':<58} | {repeat * 1e6:>9.2f} µs |")
        print(f"| {'memolab repeat call, function reading a mutable global':<58} | {mutable * 1e6:>9.2f} µs |")
        print(f"| {'memolab repeat call without dict version tags (fallback)':<58} | {repeat_notag * 1e6:>9.2f} µs |")
        print(f"| {'peer: own source only (getsource + md5, no callees)':<58} | {own_src * 1e6:>9.2f} µs |")
        print()
        print(f"targets: first analysis < 1 s ({'met' if first < 1 else 'MISSED'}), "
              f"repeat < 20 µs ({'met' if repeat < 20e-6 else 'MISSED'})")


if __name__ == "__main__":
    main()
