"""What a collective memoized call costs under torchrun (docs/distributed.md, "Overhead").

Launches ``--nproc N`` CPU ranks (gloo) on a fresh store; each rank makes ``--calls``
calls of a tiny memoized function six ways: misses and hits (in memory) of a collective
call, of a main-first one (``@memo(collective="main_first")``: rank 0 computes, the others
wait and load) and of a rank-local one (``@memo(collective=False)``), and rank 0 prints a
table of per-call times with each one's ratio to rank-local (same job, same machine).
Then, outside any group, a torch-importing process's in-memory hit with the driver seam in
place vs with ``LAZY_HOOKS["drivers"]`` emptied, without and with Lightning imported (where
the seam watches for a group that Lightning's launcher may start inside a call).

    .venv/bin/python benchmarks/distributed.py [--nproc 2] [--calls 300]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

RANKS = """
import sys, time
import torch.distributed as dist
import memolab

@memolab.memo
def coll(i: int):
    return i * 2

@memolab.memo(collective="main_first")
def first(i: int):
    return i * 2

@memolab.memo(collective=False)
def local(i: int):
    return i * 2

dist.init_process_group("gloo")
n = int(sys.argv[1])

def per_call(f):
    dist.barrier()
    t = time.perf_counter()
    for i in range(n):
        f(i)
    return (time.perf_counter() - t) / n * 1e3

rows = [("miss", per_call(coll), per_call(first), per_call(local)),
        ("hit (in memory)", per_call(coll), per_call(first), per_call(local))]
if dist.get_rank() == 0:
    print(f"{'call':<18}{'collective ms':>15}{'main-first ms':>15}{'rank-local ms':>15}{'ratios':>12}")
    for name, c, m, l in rows:
        print(f"{name:<18}{c:>15.3f}{m:>15.3f}{l:>15.3f}{c / l:>6.1f}{m / l:>6.1f}")
dist.barrier()
dist.destroy_process_group()
"""

SEAM = """
import sys, time, memolab, torch
import memolab.settings.hooks
if sys.argv[1:] == ["lightning"]:
    import lightning

@memolab.memo
def f(x: int):
    return x

f(1)

def best():
    b = 1e9
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(20000):
            f(1)
        b = min(b, (time.perf_counter() - t) / 20000 * 1e6)
    return b

with_seam = best()
saved = dict(memolab.settings.hooks.LAZY_HOOKS["drivers"])
memolab.settings.hooks.LAZY_HOOKS["drivers"].clear()
without = best()
memolab.settings.hooks.LAZY_HOOKS["drivers"].update(saved)
what = "torch and lightning" if sys.argv[1:] == ["lightning"] else "torch"
print(f"outside a group, {what} imported: in-memory hit {with_seam:.2f} us with the seam, {without:.2f} us "
      f"without (+{with_seam - without:.2f} us)")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        Path(d, "ranks.py").write_text(textwrap.dedent(RANKS))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": SRC, "MEMOLAB_STORE": str(Path(d, "store")), "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={a.nproc}",
                        "--master_addr=127.0.0.1", f"--master_port={port}", "ranks.py", str(a.calls)],
                       cwd=d, env=env, check=True, timeout=600, stderr=subprocess.DEVNULL)
        for extra in ([], ["lightning"]):
            subprocess.run([sys.executable, "-c", SEAM, *extra], cwd=d,
                           env={**env, "MEMOLAB_STORE": str(Path(d, "store2"))}, check=True, timeout=600)


if __name__ == "__main__":
    main()
