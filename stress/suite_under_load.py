"""The whole test suite, several times, while other work keeps every core busy (`make test-stress`).

A test that passes only on an idle machine is a flaky test: this runs the suite as CI does
(``pytest -n 3 --dist loadfile``, as ``make test``) ``--runs`` times while ``--spinners`` processes (default: one
per core) burn CPU, and prints a census: each run's time and the tests that failed in it. It
exits non-zero if any run failed. The spinners are killed however the run ends.

    python stress/suite_under_load.py --runs 3            # the census of issue 38
    python stress/suite_under_load.py --runs 1 -- -k team # pytest arguments after --
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def spin() -> None:
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--spinners", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--logs", type=Path, default=None,
                    help="folder for each run's whole output (default: a new temporary folder)")
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()
    logs = a.logs or Path(tempfile.mkdtemp(prefix="memolab-suite-under-load-"))
    logs.mkdir(parents=True, exist_ok=True)
    spinners = [mp.Process(target=spin, daemon=True) for _ in range(a.spinners)]
    for p in spinners:
        p.start()
    rows = []
    try:
        for run in range(1, a.runs + 1):
            t0 = time.monotonic()
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadfile",
                   "--no-loadscope-reorder", *a.pytest_args]
            cp = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            took = time.monotonic() - t0
            (logs / f"run-{run}.log").write_text(cp.stdout + cp.stderr)  # the failures' tracebacks
            failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", cp.stdout, re.M)))
            summary = (cp.stdout.strip().splitlines() or [""])[-1]
            rows.append((run, took, cp.returncode, failed, summary))
            print(f"run {run}/{a.runs}: {took / 60:.1f} min, exit {cp.returncode}: {summary} "
                  f"(output: {logs / f'run-{run}.log'})", flush=True)
            for f in failed:
                print(f"    {f}", flush=True)
    finally:
        for p in spinners:
            p.kill()
    print(f"\n{a.spinners} spinning processes on {os.cpu_count()} cores; {a.runs} runs of the suite")
    print(f"{'RUN':>3}  {'MINUTES':>7}  {'FAILED':>6}  SUMMARY")
    for run, took, _, failed, summary in rows:
        print(f"{run:>3}  {took / 60:7.1f}  {len(failed):6d}  {summary}")
    sys.exit(1 if any(rc != 0 for _, _, rc, _, _ in rows) else 0)


if __name__ == "__main__":
    main()
