"""The team store under faults (issue 24): the numbers of docs/team.md's "Faults" table.

Runs ``tests/test_team_faults.py`` (real PostgreSQL and moto's S3 server on loopback,
faults injected by ``tests/servers/faultproxy.py``, a second session's table lock,
SIGSTOP of the server, pg_ctl stop -m immediate, moto SIGKILLed mid-upload,
a real lost write) ``--runs`` times and prints, per fault, the longest call
measured over all runs, as a markdown table. Each test itself asserts the right
values, at most one warning, at most ONE timeout taken by the calling thread (counted
by the job's spy, not timed: the times printed are not asserted), and nothing lost
after ``memolab sync``; a failing run is reported and makes the exit status 1.

    python stress/team_faults.py --runs 3
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^\.*(?P<fault>[\w-]+|remote status against a silent index): (?:longest call )?(?P<s>[\d.]+) s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    worst: dict[str, float] = {}
    failed = 0
    for i in range(args.runs):
        cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                             "tests/test_team_faults.py"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        if cp.returncode != 0:
            failed += 1
            print(f"run {i + 1}: FAILED\n{cp.stdout[-3000:]}", file=sys.stderr)
        for line in cp.stdout.splitlines():
            m = LINE.match(line.strip())
            if m:
                worst[m["fault"]] = max(worst.get(m["fault"], 0.0), float(m["s"]))
        print(f"run {i + 1}/{args.runs}: {'ok' if cp.returncode == 0 else 'FAILED'}", file=sys.stderr)
    print(f"| Fault | Longest call over {args.runs} run(s), MEMOLAB_REMOTE_TIMEOUT=1 |")
    print("|---|---|")
    for fault, s in worst.items():
        print(f"| {fault} | {s:.2f} s |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
