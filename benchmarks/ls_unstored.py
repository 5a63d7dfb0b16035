"""``memolab ls FUNC --limit 20`` as a function's failed runs grow: SQLite's work stays flat.

A store written by real calls (2 stored evaluations, a failed call) is grown to ``--sizes`` failed
runs of the function by copying its failed run in SQL; then, in this process, ``ls train --limit 20``
runs with every SQLite connection counting its virtual-machine work (one tick per 1,000
instructions: deterministic, unlike wall time) and its wall time. The rows of runs that stored
nothing are read through the partial index ``runs_open`` (the newest 20 of them), and the footer's
count of the rest stops at ``tracking.unstored.COUNT_CAP``: the ticks at 1M are those at 100k.

    python benchmarks/ls_unstored.py [--sizes 1000,100000,1000000]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = """
from memolab import memo

@memo
def train(optimizer, lr, seed=1):
    if lr > 1:
        raise ValueError("diverged")
    return lr

for opt in ("adam", "sgd"):
    train(opt, 0.1)
try:
    train("adam", 5.0)
except ValueError:
    pass
"""


def grow(index: Path, n: int) -> None:
    c = sqlite3.connect(index)
    with c:
        c.execute(
            "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
            "INSERT INTO runs(id, fn, code, args, schema, started, finished, updated, status, hparams, host, error, "
            "argtext) SELECT 90000000 + i, fn, code, args, schema, started - i, finished - i, finished - i, 'failed', "
            "hparams, host, error, argtext FROM runs, k WHERE runs.id = (SELECT id FROM runs WHERE status='failed')",
            (n - 1,))
    c.close()


def measure(store: Path) -> tuple[int, float]:
    ticks = [0]

    def step() -> int:
        ticks[0] += 1
        return 0

    class Counting(sqlite3.Connection):
        def __init__(self, *a: object, **k: object) -> None:
            super().__init__(*a, **k)  # type: ignore[arg-type]
            self.set_progress_handler(step, 1000)

    connect = sqlite3.connect
    sqlite3.connect = lambda *a, **k: connect(*a, **{"factory": Counting, **k})  # type: ignore[assignment]
    os.environ["MEMOLAB_STORE"] = str(store)
    from memolab.cli import main

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["ls", "train", "--limit", "20"])  # (the log tables' set-up: once per store)
        ticks[0] = 0
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["ls", "train", "--limit", "20"]) == 0
        return ticks[0], time.perf_counter() - t
    finally:
        sqlite3.connect = connect  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one store per process: memolab's per-store state starts fresh
        ticks, seconds = measure(Path(args.child))
        print(f"{ticks} {seconds:.4f}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        (Path(tmp) / "job.py").write_text(JOB)
        subprocess.run([sys.executable, "job.py"], cwd=tmp, check=True, env={**os.environ, "MEMOLAB_STORE": str(base)})
        print(f"{'failed runs':>12}  {'SQLite ticks':>12}  {'wall':>8}")
        for n in (int(x) for x in args.sizes.split(",")):
            store = Path(tmp) / f"s{n}"
            shutil.copytree(base, store)
            grow(store / "index.sqlite", n)
            out = subprocess.run([sys.executable, __file__, "--child", str(store)], check=True, capture_output=True,
                                 text=True).stdout.split()
            print(f"{n:>12,}  {out[0]:>12}  {float(out[1]) * 1000:>6.0f} ms")
            shutil.rmtree(store)


if __name__ == "__main__":
    main()
