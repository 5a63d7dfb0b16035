"""Cost of a cache hit, layer by layer: memolab vs joblib.Memory (vs HitSave when installed).

Every row is the same work for every library:

* **in-process repeat**: the same call again in the same process. memolab
  serves it from its in-process copy; joblib.Memory and HitSave have no such
  layer and read their store again (so this row is each library's cheapest hit).
* **hit read from the store**: the key is not in this process's memory
  (memolab's in-process copies are dropped before every call), so each library
  looks the key up in its store and loads the result from disk.
  Its second row is the fastest of 5 consecutive blocks of those calls in each
  round (the same statistic for every library): this machine's speed swings
  about 1.7x in blocks of seconds, and a child process may run at either.
  Its third row runs memolab and joblib.Memory in one process, in alternating
  blocks of 25 hits (a pair of blocks lasts milliseconds, so both run at the
  same speed); its ratio is the median over rounds of the median over block
  pairs of joblib's block median over memolab's.
  The last column of every row is the same kind of ratio across processes:
  joblib's child over memolab's child of the same round (run back to back),
  median (min–max) over rounds.
* **first call of a fresh process**: a new interpreter whose first call is a
  hit (the store was filled by an earlier process): store open, code digest,
  argument hash, lookup, load, and whatever the library imports lazily on the
  way. Measured inside the process, from after ``import`` to after the call.
* **import + first call**: the same process, from before ``import`` of the
  library to after its first call (interpreter start-up excluded).

Cases: a trivial function of a small int, and a function taking a ``--mb`` MB
numpy array (argument hashing dominates there). Each library runs in its own
child processes, ``--rounds`` rounds, libraries interleaved within a round;
each figure is the median over rounds of each round's median, with the spread
(min–max over rounds). Children write bytecode caches like any user's run
(``PYTHONDONTWRITEBYTECODE`` is dropped), after one untimed warm-up child.

    python benchmarks/hit_overhead.py [--mb 100] [--repeat 300] [--rounds 5]
    python benchmarks/hit_overhead.py --hitsave-python /path/to/venv/bin/python
    python benchmarks/hit_overhead.py --first-only --rounds 21   # the two first-call rows alone
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import time
T0 = time.perf_counter()
import json, os, statistics, sys, warnings
lib, mb, repeat, workdir, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
os.chdir(workdir)
warnings.simplefilter("ignore")
t_import = time.perf_counter()
if lib == "memolab":
    from memolab import memo, configure
    configure(store=os.path.join(workdir, "memolab-store"))
    deco = memo
elif lib == "paired":  # both libraries wrap the same functions below (source lines included)
    from memolab import memo, configure
    from joblib import Memory
    configure(store=os.path.join(workdir, "memolab-store"))
    deco = lambda fn: fn
elif lib == "joblib":
    from joblib import Memory
    deco = Memory(os.path.join(workdir, "joblib-cache"), verbose=0).cache
elif lib == "hitsave":
    os.environ.setdefault("HITSAVE_NO_CLOUD", "true")
    from hitsave import memo as deco
t_imported = time.perf_counter()

@deco
def trivial(x):
    return x + 1

@deco
def total(a):
    return float(a.sum())

if lib == "paired":
    # Both libraries in one process, in alternating blocks of calls: this machine's
    # speed swings about 1.7x in blocks of seconds, and a block pair lasts a few
    # milliseconds, so both libraries of a pair run at the same speed.
    from memolab.store import get_store
    pairs = {"memolab": memo(trivial), "joblib": Memory(os.path.join(workdir, "joblib-cache"), verbose=0).cache(trivial)}
    forget = get_store().forget
    block, n_blocks = 25, max(4, repeat // 25)
    meds = {"memolab": [], "joblib": []}
    for f in pairs.values():
        f(3), f(3)  # warm: hits (the stores were filled by the other children)
    for b in range(n_blocks):
        for lib_ in (("memolab", "joblib") if b % 2 == 0 else ("joblib", "memolab")):
            f, ts = pairs[lib_], []
            for _ in range(block):
                forget()  # memolab's in-process copies dropped: every hit reads the store
                t = time.perf_counter()
                f(3)
                ts.append(time.perf_counter() - t)
            meds[lib_].append(statistics.median(ts))
    print(json.dumps({"paired_memolab": statistics.median(meds["memolab"]),
                      "paired_joblib": statistics.median(meds["joblib"]),
                      "paired_ratio": statistics.median(j / m for m, j in zip(meds["memolab"], meds["joblib"]))}))
    sys.exit(0)
import resource
faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
t, c = time.perf_counter(), time.thread_time()
trivial(1)  # a hit, unless mode == "fill"
t_first, c_first = time.perf_counter() - t, time.thread_time() - c
out = {"first": t_first, "first_cpu": c_first, "import_first": time.perf_counter() - t_import,
       "first_faults": resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults}
if mode == "measure":
    import numpy as np
    big = np.random.default_rng(0).random(mb * 1_000_000 // 8)
    if lib == "memolab":
        from memolab.store import get_store
        forget = get_store().forget
    else:
        forget = lambda: None  # no in-process layer: every hit reads the store

    def bench(fn, arg, n, from_store, key):
        fn(arg)  # warm: the miss (or a hit from the store)
        fn(arg)
        ts = []
        for _ in range(n):
            if from_store:
                forget()
            t = time.perf_counter()
            fn(arg)
            ts.append(time.perf_counter() - t)
        out[key] = statistics.median(ts)
        # the fastest of 5 consecutive blocks: this machine's speed swings in blocks of
        # seconds, and a child may run at either speed (the same statistic for every library)
        k = max(1, n // 5)
        out[key + "_fastest"] = min(statistics.median(ts[i:i + k]) for i in range(0, n - k + 1, k))

    n_big = max(5, repeat // 20)
    bench(trivial, 2, repeat, False, "repeat_trivial")
    bench(trivial, 3, repeat, True, "store_trivial")
    bench(total, big, n_big, False, "repeat_array")
    bench(total, big, n_big, True, "store_array")
print(json.dumps(out))
"""

ROWS = [
    ("repeat_trivial", "in-process repeat, trivial `f(x) = x + 1`"),
    ("store_trivial", "hit read from the store, trivial"),
    ("store_trivial_fastest", "hit read from the store, trivial: the fastest of 5 blocks of a round"),
    ("repeat_array", "in-process repeat, `f(a)`, a = {mb} MB float64 array"),
    ("store_array", "hit read from the store, `f(a)`, {mb} MB array"),
    ("first", "first call of a fresh process (a hit), trivial"),
    # (the same call's CPU time: on a loaded machine, what the wall time adds is waiting for a core)
    ("first_cpu", "first call of a fresh process (a hit), trivial: CPU time of the calling thread"),
    ("import_first", "import + first call of a fresh process, trivial"),
    # (a count: each fault is a few microseconds of the kernel's, more in a virtual machine)
    ("first_faults", "first call of a fresh process (a hit), trivial: page faults (minor) of the calling thread"),
]


def child_env(workdir: str) -> dict[str, str]:
    env = dict(os.environ, HITSAVE_LOCAL_CACHE_DIR=os.path.join(workdir, "hitsave"), XDG_CACHE_HOME=workdir,
               XDG_CONFIG_HOME=workdir)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's run has bytecode caches: so do we
    return env


def run(lib: str, python: str, workdir: str, mb: int, repeat: int, mode: str) -> dict:
    script = os.path.join(workdir, "child.py")
    cp = subprocess.run([python, script, lib, str(mb), str(repeat), workdir, mode], capture_output=True, text=True,
                        env=child_env(workdir), timeout=1800)
    if cp.returncode != 0:
        return {"error": cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else f"exit {cp.returncode}"}
    return json.loads(cp.stdout.strip().splitlines()[-1])


def fmt(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:,.1f} µs"
    return f"{s * 1e3:,.2f} ms"


def summary(values: list[float], count: bool = False) -> str:
    if not values:
        return "failed"
    m = statistics.median(values)
    if count:  # (page faults: a count, not a time)
        return f"{m:,.0f} ({min(values):,.0f}–{max(values):,.0f})"
    return f"{fmt(m)} ({fmt(min(values))}–{fmt(max(values))})"


def summary_ratio(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f}x ({min(values):,.1f}–{max(values):,.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=100, help="size of the array argument in MB (default 100)")
    ap.add_argument("--repeat", type=int, default=300, help="hits timed per round for the trivial case (default 300)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, libraries interleaved in each (default 5)")
    ap.add_argument("--hitsave-python", help="an interpreter that has hitsave==0.3.12 installed")
    ap.add_argument("--first-only", action="store_true",
                    help="only the first-call rows: each round one fresh process per library, nothing else "
                         "(many rounds are cheap: a ratio of interleaved processes)")
    args = ap.parse_args()

    libs = [("memolab", sys.executable), ("joblib", sys.executable)]
    if args.hitsave_python:
        libs.append(("hitsave", args.hitsave_python))
    rounds: dict[str, list[dict]] = {lib: [] for lib, _ in libs}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
        open(os.path.join(d, "child.py"), "w").write(CHILD)
        for lib, py in libs:  # fill each store and write bytecode caches: untimed
            run(lib, py, d, args.mb, args.repeat, "fill")
            run(lib, py, d, args.mb, args.repeat, "first")
        paired: list[dict] = []
        for i in range(args.rounds):
            # (the order alternates: neither library always runs right after the other's process)
            for lib, py in (libs if i % 2 == 0 else libs[::-1]):
                r = run(lib, py, d, args.mb, args.repeat, "first" if args.first_only else "measure")
                if "error" in r:
                    errors[lib] = r["error"]
                else:
                    rounds[lib].append(r)
            if args.first_only:
                continue
            r = run("paired", sys.executable, d, args.mb, args.repeat, "measure")
            if "error" in r:
                errors["paired"] = r["error"]
            else:
                paired.append(r)

    cols = [lib for lib, _ in libs]
    print(f"cost of a cache hit by layer; {args.rounds} interleaved rounds, median of rounds (min–max over rounds);")
    print("a shared 2-core machine: other jobs ran meanwhile, read the spread")
    print()
    print("| case | " + " | ".join(cols) + " | joblib / memolab | same round: joblib / memolab |")
    print("|" + "---|" * (len(cols) + 3))
    for case, label in ROWS:
        if args.first_only and case not in ("first", "first_cpu", "import_first", "first_faults"):
            continue
        cells = []
        meds = {}
        for lib in cols:
            vals = [r[case] for r in rounds[lib] if case in r]
            meds[lib] = statistics.median(vals) if vals else None
            cells.append(summary(vals, count=case == "first_faults") if vals
                         else f"failed: {errors.get(lib, '?')[:60]}")
        m, j = meds.get("memolab"), meds.get("joblib")
        ratio = f"{j / m:,.1f}x" if m and j else "-"
        # joblib's child over memolab's child of the same round (they ran back to back,
        # most often at the same machine speed), median (min–max) over rounds
        same = ([r2[case] / r1[case] for r1, r2 in zip(rounds["memolab"], rounds["joblib"], strict=False)
                 if case in r1 and case in r2 and r1[case]]
                if len(rounds["memolab"]) == len(rounds["joblib"]) else [])
        print(f"| {label.format(mb=args.mb)} | " + " | ".join(cells) + f" | {ratio} | "
              + (summary_ratio(same) if same else "-") + " |")
        if case == "store_trivial_fastest" and not args.first_only:
            # one process, both libraries in alternating blocks: the ratio is the median of
            # the blocks' ratios (joblib's block over memolab's block next to it)
            if paired:
                cells = [summary([r[f"paired_{lib}"] for r in paired]) if lib != "hitsave" else "-" for lib in cols]
                ratio = summary_ratio([r["paired_ratio"] for r in paired])
            else:
                cells, ratio = [f"failed: {errors.get('paired', '?')[:60]}"] + ["-"] * (len(cols) - 1), "-"
            print("| hit read from the store, trivial: both in one process, alternating blocks of 25 | "
                  + " | ".join(cells) + f" | - | {ratio} |")


if __name__ == "__main__":
    main()
