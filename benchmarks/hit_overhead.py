"""Cost of a cache hit: memolab vs joblib.Memory (vs HitSave when installed).

Two cases: a trivial function of a small int, and a function taking a 100 MB
numpy array. Every library gets a warm cache (one call first), then we time
repeated hits in this process and report medians. Each library's hits are
measured in its own child process of this one, so imports and caches do not
leak between them; all of it runs side by side in one process tree.

    python benchmarks/hit_overhead.py [--mb 100] [--repeat 200]
    python benchmarks/hit_overhead.py --hitsave-python /path/to/venv/bin/python
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

CHILD = r"""
import json, os, statistics, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
lib, mb, repeat, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.chdir(workdir)
big = np.random.default_rng(0).random(mb * 1_000_000 // 8)

if lib == "memolab":
    from memolab import memo, configure
    configure(store=os.path.join(workdir, "memolab-store"))
    deco = memo
elif lib == "joblib":
    from joblib import Memory
    deco = Memory(os.path.join(workdir, "joblib-cache"), verbose=0).cache
elif lib == "hitsave":
    os.environ.setdefault("HITSAVE_NO_CLOUD", "true")
    from hitsave import memo as deco

@deco
def trivial(x):
    return x + 1

@deco
def total(a):
    return float(a.sum())

def bench(fn, arg, n):
    fn(arg)  # warm: the miss, then the first hit loads from disk
    fn(arg)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn(arg)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)

out = {"trivial": bench(trivial, 1, repeat), "array": bench(total, big, max(5, repeat // 20))}
print(json.dumps(out))
"""


def run(lib: str, python: str, mb: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
        env = dict(os.environ, HITSAVE_LOCAL_CACHE_DIR=os.path.join(d, "hitsave"), XDG_CACHE_HOME=d,
                   XDG_CONFIG_HOME=d)
        script = os.path.join(d, "child.py")
        open(script, "w").write(CHILD)
        cp = subprocess.run([python, script, lib, str(mb), str(repeat), d], capture_output=True, text=True, env=env,
                            timeout=1800)
        if cp.returncode != 0:
            return {"error": cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else f"exit {cp.returncode}"}
        return json.loads(cp.stdout.strip().splitlines()[-1])


def fmt(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:,.1f} µs"
    return f"{s * 1e3:,.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=100, help="size of the array argument in MB (default 100)")
    ap.add_argument("--repeat", type=int, default=200, help="hits timed for the trivial case (default 200)")
    ap.add_argument("--rounds", type=int, default=5, help="child processes per library, interleaved (default 5)")
    ap.add_argument("--hitsave-python", help="an interpreter that has hitsave==0.3.12 installed")
    args = ap.parse_args()

    libs = [("memolab", sys.executable), ("joblib", sys.executable)]
    if args.hitsave_python:
        libs.append(("hitsave", args.hitsave_python))
    # Several rounds, libraries interleaved, median per case: one child process
    # can land on a slow moment of a shared machine and skew a single reading.
    rounds: Dict[str, List[dict]] = {lib: [] for lib, _ in libs}
    for _ in range(args.rounds):
        for lib, py in libs:
            rounds[lib].append(run(lib, py, args.mb, args.repeat))
    results = {}
    for lib, rs in rounds.items():
        ok = [r for r in rs if "error" not in r]
        results[lib] = ({case: statistics.median(r[case] for r in ok) for case in ("trivial", "array")}
                        if ok else rs[0])

    cols = [lib for lib, _ in libs]
    print(f"median cost of a cache hit (warm cache, same process), {args.mb} MB array; "
          f"median of {args.rounds} interleaved rounds")
    print()
    header = "| case | " + " | ".join(cols) + " | joblib / memolab |"
    print(header)
    print("|" + "---|" * (len(cols) + 2))
    for case, label in (("trivial", "trivial `f(x) = x + 1`"), ("array", f"`f(a)`, a = {args.mb} MB float64 array")):
        cells = []
        for lib in cols:
            r = results[lib]
            cells.append(fmt(r[case]) if case in r else f"failed: {r.get('error', '?')[:60]}")
        m, j = results["memolab"].get(case), results["joblib"].get(case)
        ratio = f"{j / m:,.1f}x" if m and j else "-"
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
