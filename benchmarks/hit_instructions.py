"""Instructions per hit, memolab and joblib.Memory: a measure the machine's load cannot move.

On a loaded machine wall-clock hits swing several-fold (hit_overhead.py's rows read their
spread); the number of instructions a hit runs does not. Each case runs in a child under
valgrind's callgrind, collecting only inside one ``functools.reduce`` call that makes ``--n``
hits of the same trivial ``f(3)`` (in a function, after ``gc.freeze()``, ``PYTHONHASHSEED=0``,
memolab's usage writer held off): the import, the miss that filled the store and interpreter
start-up are not counted. Rows: the in-process repeat (memolab's repeat-hit table,
``calls/fasthits``; joblib reads its store again, its cheapest hit), the same with the table
switched off (memolab's full path: bind, key, the in-memory copy) and the hit read from the store (memolab's in-memory copies
dropped before each call: the drop is counted, a few hundred instructions).

    python benchmarks/hit_instructions.py [--n 300]

Needs ``valgrind`` on the PATH (about a minute per case under load). Instructions are not time
(a system call or a cache miss costs more than its instruction count), so read the ratios.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import functools, gc, os, sys
lib, mode, n, workdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.chdir(workdir)
forget = lambda: None
if lib == "memolab":
    from memolab import configure, memo
    from memolab.store import get_store
    configure(store=os.path.join(workdir, "memolab-store"), verbose=False)
    deco = memo
else:
    from joblib import Memory
    deco = Memory(os.path.join(workdir, "joblib-cache"), verbose=0).cache

@deco
def trivial(x):
    return x + 1

trivial(3), trivial(3)
if lib == "memolab":
    store = get_store()
    store.usage.due = float("inf")  # its batched usage write would land in the count at random
    forget = store.forget if mode == "store" else forget
    if mode == "full":
        trivial._fast = None  # the repeat hit without its table (calls/fasthits): the full path
gc.collect()
gc.freeze()

def hits():
    for _ in range(n):
        forget()
        trivial(3)

functools.reduce(lambda a, b: hits(), [0, 0])
"""


def instructions(lib: str, mode: str, n: int, workdir: str) -> int:
    script = os.path.join(workdir, "child.py")
    env = dict(os.environ, PYTHONHASHSEED="0")
    cp = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=functools_reduce",
                         "--callgrind-out-file=/dev/null", sys.executable, script, lib, mode, str(n), workdir],
                        capture_output=True, text=True, env=env, timeout=1800)
    m = re.search(r"Collected : (\d+)", cp.stderr)
    if cp.returncode != 0 or m is None:
        raise SystemExit(f"{lib} {mode}: {cp.stderr.strip().splitlines()[-1:]}")
    return int(m.group(1)) // n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300, help="hits counted per case (default 300)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: nothing to count with")
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "pyproject.toml"), "w").write("[project]\nname='bench'\n")
        open(os.path.join(d, "child.py"), "w").write(CHILD)
        rows = []
        cases = (("repeat", "in-process repeat, trivial"), ("full", "the same, memolab's full path (table off)"),
                 ("store", "hit read from the store, trivial"))
        joblib_of: dict[str, int] = {}
        for mode, label in cases:
            m = instructions("memolab", mode, args.n, d)
            jmode = "repeat" if mode == "full" else mode  # (joblib has no table: its repeat, counted once)
            if jmode not in joblib_of:
                joblib_of[jmode] = instructions("joblib", jmode, args.n, d)
            rows.append((label, m, joblib_of[jmode]))
    print(f"instructions per hit (callgrind, {args.n} hits each)")
    print()
    print("| case | memolab | joblib.Memory | joblib / memolab |")
    print("|---|---|---|---|")
    for label, m, j in rows:
        print(f"| {label} | {m:,} | {j:,} | {j / m:,.1f}x |")


if __name__ == "__main__":
    main()
