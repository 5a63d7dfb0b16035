"""What ``MEMOLAB_VERBOSE`` costs a call: misses and store hits of a trivial function at each level.

Each level runs in its own fresh process (``--rounds`` rounds, levels interleaved in each);
a process makes ``--n`` misses of new arguments (after one warm-up miss, so they are the
deferred kind: the common miss) then reads them back as hits from the store (its in-process
copies dropped before each). The lines go to a ``logging`` handler that discards them, so the
figure is memolab's cost (explaining and formatting), not the terminal's. Medians over rounds
of each process's median, with the spread (min–max).

    python benchmarks/verbose_cost.py [--n 400] [--rounds 5]
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
import json, logging, os, statistics, sys, time
n = int(sys.argv[1])
import memolab
logging.getLogger("memolab").addHandler(logging.NullHandler())  # routed away: memolab's own cost only

@memolab.memo
def f(x):
    return x + 1

f(-1)  # warm-up: the code is stored, later misses are the deferred kind
miss = []
for i in range(n):
    t = time.perf_counter(); f(i); miss.append(time.perf_counter() - t)
store = f.store()
hit = []
for i in range(n):
    store.forget()
    t = time.perf_counter(); f(i); hit.append(time.perf_counter() - t)
print(json.dumps({"miss": statistics.median(miss), "hit": statistics.median(hit)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    levels = ["0", "1", "2"]
    got = {lv: {"miss": [], "hit": []} for lv in levels}
    for _ in range(a.rounds):
        for lv in levels:
            with tempfile.TemporaryDirectory() as d:
                env = {**os.environ, "MEMOLAB_VERBOSE": lv, "MEMOLAB_STORE": os.path.join(d, "store")}
                out = subprocess.run([sys.executable, "-c", CHILD, str(a.n)], env=env, capture_output=True,
                                     text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                for k in ("miss", "hit"):
                    got[lv][k].append(r[k])

    def fmt(xs):
        return f"{statistics.median(xs) * 1e6:.1f} µs ({min(xs) * 1e6:.1f}–{max(xs) * 1e6:.1f})"

    print(f"a trivial memoized function, {a.n} calls a process, {a.rounds} rounds (median of process medians)")
    print()
    print("| MEMOLAB_VERBOSE | miss (new arguments) | hit read from the store |")
    print("|---|---|---|")
    names = {"0": "0 (off)", "1": "1 (default)", "2": "2 (every call said)"}
    for lv in levels:
        print(f"| {names[lv]} | {fmt(got[lv]['miss'])} | {fmt(got[lv]['hit'])} |")


if __name__ == "__main__":
    main()
