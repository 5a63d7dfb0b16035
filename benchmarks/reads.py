"""What recording the files a body reads by path costs a call (issue 48 §2, ``memolab/inputs/reads.py``).

Every memoized body runs with its reads recorded (an audit hook, one per process, that does
nothing while no body runs); its evaluation stores the stamps, and every hit checks them. This
script times the same calls with the recording on and off ("off": ``memolab.inputs.reads``' entry
points replaced by no-ops: memolab as it was before), in one process, in alternating blocks
(this machine's speed swings in blocks of seconds: a pair of blocks runs at one speed).

Rows:

* miss, a body that opens no file (a quick function, a new argument each call)
* miss, a body that opens 1,000 files of 100 bytes (at rest: their digests come from the stat
  cache after the first miss, as for an unchanged dataset)
* hit read from the store (in-process copies dropped before each call), a body of 0 / 1,000 files
* in-process hit, 0 / 1,000 files
* ``open()`` + ``close()`` outside any body, before and after the hook is installed (what the
  hook costs code that is not memoized)

Each figure is a per-call median over rounds of each round's median block; "on/off" is the ratio.

    python benchmarks/reads.py [--rounds 5] [--blocks 6]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memolab import memo
from memolab.inputs import reads


def _off() -> dict[str, Any]:
    """Replace reads' entry points by no-ops; returns the originals."""
    saved = {n: getattr(reads, n) for n in ("begin", "end", "consumed", "stale", "active")}
    idle = reads.Recorder()
    stubs = {"begin": lambda root=None: (idle, None), "end": lambda rec, token: (None, None),
             "consumed": lambda *a: None, "stale": lambda row, at=None: None, "active": lambda: False}
    for n, f in stubs.items():
        setattr(reads, n, f)
    return saved


def _on(saved: dict[str, Any]) -> None:
    for n, f in saved.items():
        setattr(reads, n, f)


def block(fn: Callable[[int], Any], n: int, start: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(start + i)
    return (time.perf_counter() - t0) / n


def compare(name: str, make: Callable[[bool], Callable[[int], Any]], n: int, rounds: int, blocks: int) -> None:
    ons, offs, ratios = [], [], []
    counter = [10_000_000]
    for _ in range(rounds):
        r_on, r_off, r_ratio = [], [], []
        for _ in range(blocks):
            pair = {}
            for on in (True, False):
                saved = None if on else _off()
                try:
                    fn = make(on)
                    pair[on] = block(fn, n, counter[0])
                    counter[0] += n
                finally:
                    if saved is not None:
                        _on(saved)
            r_on.append(pair[True])
            r_off.append(pair[False])
            r_ratio.append(pair[True] / pair[False])
        ons.append(statistics.median(r_on))
        offs.append(statistics.median(r_off))
        ratios.append(statistics.median(r_ratio))
    on, off = statistics.median(ons), statistics.median(offs)
    print(f"| {name} | {off * 1e6:,.1f} µs | {on * 1e6:,.1f} µs | {statistics.median(ratios):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=6)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="memolab-reads-bench-"))
    data = tmp / "data"
    data.mkdir()
    paths = []
    for i in range(1000):
        p = data / f"f{i:04d}.txt"
        p.write_bytes(b"x" * 100)
        paths.append(str(p))
    time.sleep(2.1)  # a dataset at rest: written more than memolab's racy window (2 s) ago
    os.environ["MEMOLAB_STORE"] = str(tmp / "store")

    # what the hook costs code that is not memoized: before it is installed, then after
    def opens(_: int) -> None:
        for p in paths[:100]:
            open(p, "rb").close()

    before = statistics.median(block(opens, 20, 0) for _ in range(a.rounds * a.blocks)) / 100

    @memo
    def none(i):
        return i + 1

    @memo
    def thousand(i):
        total = 0
        for p in paths:
            with open(p, "rb") as f:
                total += len(f.read())
        return total + i

    none(-1)  # (installs the hook)
    after = statistics.median(block(opens, 20, 0) for _ in range(a.rounds * a.blocks)) / 100

    print("| call | recording off | on | on/off |")
    print("|---|---|---|---|")
    compare("miss, body opens no file", lambda on: none, 200, a.rounds, a.blocks)
    compare("miss, body opens 1,000 files", lambda on: thousand, 3, a.rounds, a.blocks)

    store = none.store()
    for f in (none, thousand):
        f(0)
        f(0)  # stored, and stored with the recording on

    def from_store(f: Any) -> Callable[[bool], Callable[[int], Any]]:
        def make(on: bool) -> Callable[[int], Any]:
            def call(_: int) -> Any:
                store.forget()
                return f(0)
            return call
        return make

    compare("hit from the store, 0 files recorded", from_store(none), 200, a.rounds, a.blocks)
    compare("hit from the store, 1,000 files recorded", from_store(thousand), 20, a.rounds, a.blocks)
    compare("in-process hit, 0 files recorded", lambda on: (lambda _: none(0)), 2000, a.rounds, a.blocks)
    compare("in-process hit, 1,000 files recorded", lambda on: (lambda _: thousand(0)), 20, a.rounds, a.blocks)
    print(f"| `open()`+`close()` outside any body | {before * 1e6:,.2f} µs (no hook) | {after * 1e6:,.2f} µs (hook) "
          f"| {after / before:.2f} |")


if __name__ == "__main__":
    main()
