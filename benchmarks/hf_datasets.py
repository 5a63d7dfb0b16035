"""HF ``datasets`` with memolab: keying and storing, side by side with HF's own tools, one run.

Two tables, on one dataset of about ``--mib`` MiB (an int64 column and a string column):

1. Keys. The repeated key of a call taking the dataset (``hash_arguments``) when it
   is: loaded from memolab's store (digest stored with it), memory-mapped from an
   HF cache file (stamped by its file), built in memory by ``from_dict`` (memory
   memolab cannot vouch for: rehashed every call). The first key of the Arrow
   table with the identity cache off, against raw xxh3-128 over the same buffers
   on one thread (the limit), and HF's own ``Hasher.hash(ds)`` and
   ``generate_fingerprint(ds)`` as peers.
2. Store and first load: a memoized function returning the dataset (a miss that
   stores it; then, with the process's memory cache dropped, a hit that maps it
   back) against ``save_to_disk`` / ``load_from_disk``; and the store of the
   memory-mapped copy ``load_from_disk`` returned (stored as its files). Every writer's time
   includes an fsync of what it wrote (memolab fsyncs its blobs itself). Rounds
   interleave the two; figures are medians (min-max).

    python benchmarks/hf_datasets.py [--mib 128] [--repeat 3] [--dir /tmp]

Quote ratios, not absolute numbers (shared machines). Runs offline against a
temporary ``HF_HOME``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
warnings.simplefilter("ignore")


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per_call_us(fn: Callable[[], Any], budget: float = 0.3) -> float:
    """Median µs per call over batches of calls, spending about ``budget`` seconds."""
    fn()
    n = 1
    while True:
        t = timed(lambda n=n: [fn() for _ in range(n)])
        if t > 0.02 or n > 100_000:
            break
        n *= 4
    samples = [timed(lambda: [fn() for _ in range(n)]) / n for _ in range(max(3, min(15, int(budget / t))))]
    return statistics.median(samples) * 1e6


def num(x: float) -> str:
    """Three significant digits, without an exponent: 948, 1,850, 0.00464."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def fmt(xs: list[float], scale: float = 1.0, unit: str = "") -> str:
    xs = [x * scale for x in xs]
    return f"{num(statistics.median(xs))}{unit} ({num(min(xs))}–{num(max(xs))})"


def fsync_tree(path: str) -> None:
    for root, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def make_dataset(mib: int) -> Any:
    """About ``mib`` MiB: an int64 column and a short-string column (about 8 bytes a row each)."""
    import datasets
    import numpy as np
    import pyarrow as pa
    from datasets.table import InMemoryTable

    n = max(1000, mib * 2**20 // 16)
    words = pa.array([f"w{i:06d}" for i in range(4096)])
    text = words.take(pa.array(np.arange(n) % 4096))
    return datasets.Dataset(InMemoryTable(pa.table({"x": pa.array(np.arange(n, dtype=np.int64)), "t": text})))


class Holder:
    """Hands the dataset to a memoized function without putting it in the key."""

    def __init__(self, value: Any) -> None:
        self.value = value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="memolab-hf-bench-", dir=args.dir)
    os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": os.path.join(base, "hf")})
    try:
        run(args, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(args: Any, base: str) -> None:
    import datasets
    import xxhash
    from datasets.fingerprint import Hasher, generate_fingerprint

    import memolab
    from memolab.hashing import hash_arguments, hash_threads, identity
    from memolab.hf import keys as hf_keys

    datasets.disable_progress_bars()
    memolab.register_opaque(Holder)
    ds = make_dataset(args.mib)
    table = ds.data.table
    nbytes = table.nbytes
    print(f"memolab HF datasets benchmark: {nbytes / 2**20:.0f} MiB ({ds.num_rows} rows: int64 + strings), "
          f"datasets {datasets.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; memolab hashes large buffers on {hash_threads()} thread(s) now\n")

    # -- 2. store and first load (first: its results feed table 1) -----------------------------
    holder = Holder(ds)
    rows: dict[str, list[float]] = {k: [] for k in ("memolab store", "save_to_disk", "memolab first load",
                                                     "load_from_disk", "memolab store, memory-mapped")}
    loaded = mapped = None
    for r in range(args.repeat):
        d = os.path.join(base, f"round{r}")
        os.makedirs(d)

        @memolab.memo(store=os.path.join(d, "memolab"))
        def produce(h: Holder, tag: str) -> Any:
            return h.value

        def save_hf() -> None:
            ds.save_to_disk(os.path.join(d, "hf"))  # noqa: B023 (called in this round, by timed below)
            fsync_tree(os.path.join(d, "hf"))  # noqa: B023

        pair = [("memolab store", lambda: produce(holder, "x")), ("save_to_disk", save_hf)]
        for name, fn in (pair if r % 2 == 0 else pair[::-1]):
            rows[name].append(timed(fn))
        produce.store().forget()  # the hit reads the index, the payload and maps the blobs
        box: dict[str, Any] = {}
        pair = [("memolab first load", lambda box=box: box.__setitem__("m", produce(holder, "x"))),
                ("load_from_disk", lambda box=box, d=d: box.__setitem__("h", datasets.load_from_disk(os.path.join(d, "hf"))))]
        for name, fn in (pair if r % 2 == 0 else pair[::-1]):
            rows[name].append(timed(fn))
        loaded, mapped = box["m"], box["h"]
        assert loaded.num_rows == ds.num_rows and loaded[-1] == ds[-1]
        # the memory-mapped copy HF loaded, stored in a store of its own: as its files, no copy
        holder_mapped = Holder(mapped)

        @memolab.memo(store=os.path.join(d, "memolab-mapped"))
        def produce_mapped(h: Holder, tag: str) -> Any:
            return h.value

        rows["memolab store, memory-mapped"].append(timed(lambda h=holder_mapped: produce_mapped(h, "x")))

    # -- 1. keys ---------------------------------------------------------------------------------
    for f in mapped.cache_files:  # a cache file must have been quiet 2 s before its stamp is trusted
        os.utime(f["filename"], ns=(1_600_000_000 * 10**9,) * 2)
    time.sleep(2.1)  # (the ctime cannot be put back)
    print("#### Keys (a call taking the dataset; µs or ms per call, median of batches)\n")
    print("| dataset argument | repeated key |")
    print("|---|---|")
    cases = [("loaded from memolab's store (digest stored with it)", loaded),
             ("memory-mapped from HF files (load_from_disk; stamped by its files)", mapped),
             ("built in memory by from_dict (rehashed every call)", ds)]
    for name, value in cases:
        us = per_call_us(lambda value=value: hash_arguments([("ds", value)]), budget=0.5)
        print(f"| {name} | {us:.1f} µs |" if us < 1000 else f"| {name} | {us / 1000:.1f} ms |")

    identity.enabled = False
    first = [timed(lambda: hf_keys.table_digest(table)) for _ in range(args.repeat)]
    identity.enabled = True

    def raw() -> None:
        for col in table.columns:
            for chunk in col.chunks:
                for b in chunk.buffers():
                    if b is not None:
                        xxhash.xxh3_128(memoryview(b)).digest()

    limit = [timed(raw) for _ in range(args.repeat)]
    hasher = [timed(lambda: Hasher.hash(ds)) for _ in range(max(1, args.repeat - 1))]
    fp_mem = [timed(lambda: generate_fingerprint(ds)) for _ in range(max(1, args.repeat - 1))]
    fp_map = [timed(lambda: generate_fingerprint(mapped)) for _ in range(args.repeat)]
    gib = nbytes / 2**30
    print("\n#### First key of the Arrow table (identity cache off), and peers\n")
    print("| hasher | time (ms) | GiB/s | vs raw xxh3 |")
    print("|---|---|---|---|")
    print(f"| raw xxh3_128 over the table's buffers, 1 thread (limit) | {fmt(limit, 1e3)} | "
          f"{gib / statistics.median(limit):.2f} | - |")
    print(f"| **memolab** table digest | {fmt(first, 1e3)} | {gib / statistics.median(first):.2f} | "
          f"{statistics.median(limit) / statistics.median(first):.2f} |")
    print(f"| HF Hasher.hash(ds), in memory | {fmt(hasher, 1e3)} | {gib / statistics.median(hasher):.2f} | - |")
    print(f"| HF generate_fingerprint(ds), in memory | {fmt(fp_mem, 1e3)} | - | - |")
    print(f"| HF generate_fingerprint(ds), memory-mapped (its file paths) | {fmt(fp_map, 1e3)} | - | - |")

    print("\n#### Store and first load (s, median (min-max) over interleaved rounds)\n")
    print("| | memolab | HF | memolab / HF (medians) | memolab / HF within each round |")
    print("|---|---|---|---|---|")
    for (a, b), label in ((("memolab store", "save_to_disk"), "store (fsynced)"),
                          (("memolab store, memory-mapped", "save_to_disk"),
                           "store of the memory-mapped copy (as its files; vs the same save_to_disk)"),
                          (("memolab first load", "load_from_disk"), "first load")):
        ratio = statistics.median(rows[a]) / statistics.median(rows[b])
        within = [x / y for x, y in zip(rows[a], rows[b], strict=True)]
        print(f"| {label} | {fmt(rows[a])} | {fmt(rows[b])} | {num(ratio)} | {fmt(within)} |")
    print(f"\nmemolab hashed large buffers on {hash_threads()} thread(s) at the end (the cores it finds idle; "
          "MEMOLAB_HASH_THREADS unset); raw xxh3, HF's Hasher (xxhash over pickled bytes) and save/load_from_disk "
          f"on one thread; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
