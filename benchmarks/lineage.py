"""What lineage (issue 39) costs a call: hits and misses, with and without upstream objects.

Lineage marks every object a memoized call returns with its evaluation, and a miss looks
for marked objects among what its argument hash walked through (docs/cache-rules.md,
"Lineage"). This script times the same calls with it on and with it off, in one process,
in alternating blocks (this machine's speed swings ~1.7x in blocks of seconds: a pair of
blocks lasts milliseconds, so both sides run at one speed). "Off" is memolab as it was before
lineage: nothing marked, nothing looked for, no value digest of a result, and a store whose
index has no lineage triggers.

Rows:

* in-process hit, no upstream: ``score(cfg)`` (a small dict: hashed by the encoder, whose walk
  is what a miss would look at; the result, a float, is not marked)
* in-process hit, upstream argument: ``train(ds)``, ``ds`` a result loaded from the store (a dict
  of two 512 KB arrays, their digests cached); the result (a dict holding an array) is marked
* hit read from the store (in-process copies dropped before each call): the same two calls
* miss, no upstream: ``score(cfg)`` with a new ``cfg`` each call (a quick function: no lease)
* miss, upstream argument: ``train(ds, i)`` with a new ``i`` each call: the walk's objects are
  looked up, the path of ``ds`` found, the edge written with the row (and indexed by the trigger)

Each figure: per-call time, median over rounds of each round's median block, and the fastest
block of all (the machine at full speed); "on/off" is the median over rounds of the median over
block pairs of on's block over off's. Then what marking a returned result costs alone (timeit:
an object, a dict of arrays), which every hit pays.

    python benchmarks/lineage.py [--rounds 7] [--block 200] [--blocks 10]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memolab import hashing, memo
from memolab.hashing import identity
from memolab.inputs import upstream
from memolab.store import get_store


def make(store: Path) -> dict[str, Callable]:
    @memo(store=store)
    def prepare(n):
        x = np.arange(n, dtype=np.float64)
        return {"X": x, "y": x % 2}

    @memo(store=store)
    def train(ds, i=0):
        return {"w": np.full(4, float(ds["X"][i]))}

    @memo(store=store)
    def score(cfg):
        return cfg["lr"] * 2.0

    return {"prepare": prepare, "train": train, "score": score}


class Mode:
    """Lineage on, or off as memolab was before it (see the module's doc)."""

    def __init__(self, on: bool, root: Path) -> None:
        self.on = on
        self.fns = make(root)
        self.store = get_store(root)
        if not on:  # an index without the lineage triggers
            c = self.store.index.conn()
            for t in ("lineage_replace", "lineage_add", "lineage_drop"):
                c.execute(f"DROP TRIGGER IF EXISTS {t}")
        self.fns["prepare"](1 << 16)
        self.store.forget()
        self.ds = self.fns["prepare"](1 << 16)  # loaded: read-only mapped arrays, digests cached
        self.fns["train"](self.ds)
        self.fns["score"]({"lr": 0.1, "name": "a"})
        self.next = 1

    def __enter__(self) -> Mode:
        self.saved = (identity.lineage, upstream.input_edges, hashing.result_digests)
        if not self.on:
            identity.lineage = False
            upstream.input_edges = lambda *a, **k: []  # type: ignore[assignment]
            hashing.result_digests = lambda v: (hashing.result_token(v), None)  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        identity.lineage, upstream.input_edges, hashing.result_digests = self.saved  # type: ignore[assignment]


def block(mode: Mode, case: str, n: int) -> float:
    f = mode.fns
    cfg = {"lr": 0.1, "name": "a"}
    forget = mode.store.forget
    with mode:
        t0 = time.perf_counter()
        if case == "hit":
            for _ in range(n):
                f["score"](cfg)
        elif case == "hit-up":
            for _ in range(n):
                f["train"](mode.ds)
        elif case == "store-hit":
            for _ in range(n):
                forget()
                f["score"](cfg)
        elif case == "store-hit-up":
            for _ in range(n):
                forget()
                f["train"](mode.ds)
        elif case == "miss":
            for _ in range(n):
                mode.next += 1
                f["score"]({"lr": 0.1, "name": "a", "i": mode.next})
        elif case == "miss-up":
            for _ in range(n):
                mode.next += 1
                f["train"](mode.ds, mode.next)
        return (time.perf_counter() - t0) / n


CASES = [("hit", "in-process hit, no upstream argument"),
         ("hit-up", "in-process hit, an upstream result as argument"),
         ("store-hit", "hit read from the store, no upstream argument"),
         ("store-hit-up", "hit read from the store, an upstream result as argument"),
         ("miss", "miss (quick, lease-free), no upstream argument"),
         ("miss-up", "miss (quick, lease-free), an upstream result as argument")]


def fmt(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--block", type=int, default=200, help="calls per block")
    ap.add_argument("--blocks", type=int, default=10, help="block pairs per round")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        on, off = Mode(True, Path(d) / "on"), Mode(False, Path(d) / "off")
        res: dict[str, dict[str, list[float]]] = {c: {"on": [], "off": [], "ratio": [], "on_min": [], "off_min": []}
                                                  for c, _ in CASES}
        for _ in range(args.rounds):
            for case, _ in CASES:
                n = args.block if not case.startswith("miss") else max(20, args.block // 4)
                pairs: list[tuple[float, float]] = []
                for b in range(args.blocks):
                    order = (on, off) if b % 2 == 0 else (off, on)
                    t = {m.on: block(m, case, n) for m in order}
                    pairs.append((t[True], t[False]))
                res[case]["on"].append(statistics.median(p[0] for p in pairs))
                res[case]["off"].append(statistics.median(p[1] for p in pairs))
                res[case]["ratio"].append(statistics.median(p[0] / p[1] for p in pairs))
                res[case]["on_min"].append(min(p[0] for p in pairs))
                res[case]["off_min"].append(min(p[1] for p in pairs))
        print(f"lineage on vs off, {args.rounds} rounds x {args.blocks} block pairs\n")
        print("| call | lineage off | lineage on | fastest block off / on | on / off (min–max over rounds) |")
        print("|---|---|---|---|---|")
        for case, label in CASES:
            r = res[case]
            print(f"| {label} | {fmt(statistics.median(r['off']))} | {fmt(statistics.median(r['on']))} | "
                  f"{fmt(min(r['off_min']))} / {fmt(min(r['on_min']))} | "
                  f"{statistics.median(r['ratio']):.3f} ({min(r['ratio']):.3f}–{max(r['ratio']):.3f}) |")
        micro()


def micro() -> None:
    """What marking one returned result costs (timeit, minus making the result itself)."""
    import timeit

    origin = (Path("/store"), 1, ("m:f", "c", "a", "s"))
    cases = {"an object (an array)": lambda: np.full(4, 1.0), "a dict holding an array": lambda: {"w": np.full(4, 1.0)},
             "a small dict of floats (held)": lambda: {"acc": 0.5, "loss": 0.1}, "a float (never marked)": lambda: 0.5}
    print("\n| result marked | cost per hit |\n|---|---|")
    for label, make_value in cases.items():
        def marked(make_value: Callable[[], object] = make_value) -> None:
            identity.mark_result(make_value(), origin)

        n = 20000
        t1 = min(timeit.repeat(marked, number=n, repeat=7)) / n
        t0 = min(timeit.repeat(make_value, number=n, repeat=7)) / n
        print(f"| {label} | {max(0.0, t1 - t0) * 1e6:.2f} µs |")


if __name__ == "__main__":
    main()
