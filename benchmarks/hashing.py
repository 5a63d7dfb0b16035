"""Argument hashing: memolab vs the raw hashers and peer libraries, side by side.

Three tables, all from one run on the same buffers:

1. throughput on a large float32 numpy array and torch tensor (GiB/s):
   memolab (identity cache off, so every call really hashes), raw xxh3_128
   over the same memory on the same number of threads (the practical limit:
   1, 2, and whatever memolab chose in that round), BLAKE3, joblib.hash,
   dask.base.tokenize and HF datasets' Hasher (when installed);
2. per-call cost for a small config dict and a 100k-int list (µs);

Every row of tables 1 and 2, peers included, runs once per round in
interleaved rounds and is quoted as median (min–max) over the same rounds.
3. the repeated-call cost with the identity cache: a large array returned by a
   memoized function (read-only, memory-mapped from the store) and a tensor,
   passed again and again — hash only, and a whole memoized call that hits.

    python benchmarks/hashing.py [--mib 1024] [--repeat 5] [--threads N]

Develop with --mib 256; quote ratios, not absolute numbers (shared machines).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
warnings.simplefilter("ignore")


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def per_call(fn, budget=0.5, max_n=200_000):
    """Median µs per call over batches, spending about ``budget`` seconds."""
    fn()
    n, t = 1, 0.0
    while t < 0.02 and n < max_n:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t < 0.02:
            n *= 4
    batches = max(3, int(budget / max(t, 1e-9)))
    samples = []
    for _ in range(min(batches, 15)):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples) * 1e6


def one_thread(fn, obj, n="1"):
    old = os.environ.get("MEMOLAB_HASH_THREADS")
    os.environ["MEMOLAB_HASH_THREADS"] = n
    try:
        return fn(obj)
    finally:
        if old is None:
            del os.environ["MEMOLAB_HASH_THREADS"]
        else:
            os.environ["MEMOLAB_HASH_THREADS"] = old


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


def peers():
    out = {}
    try:
        import joblib

        out["joblib.hash"] = joblib.hash
    except ImportError:
        print("note: joblib not installed; skipped")
    try:
        from dask.base import tokenize

        out["dask.base.tokenize"] = tokenize
    except ImportError:
        print("note: dask not installed; skipped")
    try:
        from datasets.fingerprint import Hasher

        out["HF datasets Hasher"] = Hasher.hash
    except ImportError:
        print("note: HF `datasets` is not installed (it pulls pandas + pyarrow, ~200 MB); "
              "its Hasher is skipped. Measured elsewhere: 0.69 GiB/s on 256 MiB (docs/hashing.md).")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024, help="size of the large buffer")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds (every row, peers included)")
    ap.add_argument("--threads", type=int, default=0, help="MEMOLAB_HASH_THREADS (0: default)")
    args = ap.parse_args()
    if args.threads:
        os.environ["MEMOLAB_HASH_THREADS"] = str(args.threads)

    import blake3
    import numpy as np
    import torch
    import xxhash

    import memolab
    from memolab import hashing
    from memolab.hashing import identity

    print(f"# memolab hashing benchmark: {args.mib} MiB, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores, memolab threads now {hashing.hash_threads()} (load {os.getloadavg()[0]:.1f}), "
          f"schema {hashing.KEY_SCHEMA}")
    n = args.mib * (1 << 20) // 4
    arr = np.random.default_rng(0).random(n, dtype=np.float32)
    # its own storage: a tensor sharing memory with numpy (from_numpy) is never identity-cached
    ten = torch.from_numpy(arr).clone()
    mv = memoryview(arr).cast("B")
    gib = arr.nbytes / 2**30
    ext = peers()

    # -- 1. throughput ------------------------------------------------------------------
    # Every row, peers included, runs once per round, rounds interleaved, and is
    # quoted as median (min–max) over the same rounds: on a shared machine a burst
    # of someone else's load then hits all of them alike. memolab picks its thread
    # count from the idle cores at each call; the "limit" row of each round hashes
    # the same chunks with raw xxh3 on exactly that many threads, right after it.
    identity.enabled = False  # every call really hashes
    auto = "raw xxh3_128, 4 MiB chunks, the threads memolab chose (limit)"
    fast = [
        ("raw xxh3_128, 1 thread", "array bytes", lambda: xxhash.xxh3_128(mv).digest()),
        ("memolab, forced 1 thread", "np.ndarray", lambda: one_thread(hashing.hash_value, arr)),
        ("raw xxh3_128, 4 MiB chunks, 2 threads", "array bytes", lambda: one_thread(hashing.chunk_digests, mv, "2")),
        ("memolab, forced 2 threads", "np.ndarray", lambda: one_thread(hashing.hash_value, arr, "2")),
        ("raw BLAKE3, 1 thread", "array bytes", lambda: blake3.blake3(mv).digest()),
        ("raw BLAKE3, all threads", "array bytes", lambda: blake3.blake3(mv, max_threads=blake3.blake3.AUTO).digest()),
    ]
    # vs which row each ratio is taken: the same work's limit at the same thread count
    limit_of = {"memolab, forced 1 thread": "raw xxh3_128, 1 thread",
                "memolab, forced 2 threads": "raw xxh3_128, 4 MiB chunks, 2 threads",
                "**memolab** (threads: see below)": auto}
    slow = [(name, kind, obj) for name in ext for kind, obj in (("np.ndarray", arr), ("torch.Tensor", ten))]
    times: dict = {}
    chose: list = []
    failed: dict = {}

    def timed(key, fn):
        t0 = time.perf_counter()
        fn()
        times.setdefault(key, []).append(time.perf_counter() - t0)

    # warm-up, untimed in the rounds: thread pool start, and the first tensor hash in
    # a process, which pays memolab's torch support import (reported on its own)
    t0 = time.perf_counter()
    hashing.hash_value(ten)
    first_tensor = time.perf_counter() - t0
    for _, _, fn in fast:
        fn()
    hashing.hash_value(arr)
    for _ in range(args.repeat):
        for name, kind, fn in fast:
            timed((name, kind), fn)
        for kind, obj in (("np.ndarray", arr), ("torch.Tensor", ten)):
            n_threads = hashing.hash_threads()  # what the next call uses (it reads the load average)
            timed(("**memolab** (threads: see below)", kind), lambda obj=obj: hashing.hash_value(obj))
            timed((auto, f"array bytes, after {kind}"),
                  lambda n_threads=n_threads: one_thread(hashing.chunk_digests, mv, str(n_threads)))
            chose.append(n_threads)
        for name, kind, obj in slow:  # peers: single-threaded, the same rounds
            if (name, kind) in failed:
                continue
            try:
                timed((name, kind), lambda name=name, obj=obj: ext[name](obj))
            except Exception as e:  # a peer that cannot hash the object at all
                failed[(name, kind)] = f"error: {type(e).__name__}"

    def gibs(key):
        ts = times[key]
        return gib / statistics.median(ts), gib / max(ts), gib / min(ts)

    rows = []
    order = [k for k in times if k[0] != auto] + [k for k in times if k[0] == auto]
    for key in order:
        med, lo, hi = gibs(key)
        ratio = "-"
        lim = limit_of.get(key[0])
        if lim == auto:
            lim_key = (auto, f"array bytes, after {key[1]}")
            ratio = f"{statistics.median(times[lim_key]) / statistics.median(times[key]):.2f}"
        elif lim is not None:
            ratio = f"{statistics.median(times[(lim, 'array bytes')]) / statistics.median(times[key]):.2f}"
        rows.append((key[0], key[1], f"{med:.2f} ({lo:.2f}–{hi:.2f})", ratio))
    for (name, kind), err in failed.items():
        rows.append((name, kind, err, "-"))
    table(f"Throughput on a {args.mib} MiB float32 buffer (GiB/s, median (min–max) over {args.repeat} interleaved "
          "rounds, every row in every round; ratio = the limit's median time at the same thread count / this "
          "row's)", ["hasher", "object", "GiB/s", "vs limit"], rows)
    print(f"\nmemolab chose {', '.join(map(str, chose))} thread(s) in successive calls (it counts idle cores; "
          f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores).")
    print(f"The first tensor hash in this process (not in the rounds: it imports memolab's torch support) "
          f"took {first_tensor * 1e3:.0f} ms.")
    mem_key = ("**memolab** (threads: see below)", "np.ndarray")
    for name in ext:
        if (name, "np.ndarray") in times:
            r = statistics.median(times[(name, "np.ndarray")]) / statistics.median(times[mem_key])
            print(f"memolab vs {name} on the array: {r:.0f}x faster (medians)")

    # -- 2. small values -------------------------------------------------------------------
    cfg = {"lr": 3e-4, "batch_size": 64, "epochs": 10, "model": "resnet18", "layers": [64, 128, 256, 512],
           "dropout": 0.1, "augment": True, "seed": 0, "optimizer": {"name": "adam", "betas": (0.9, 0.999)},
           "schedule": "cosine"}
    ints = list(range(100_000))
    small = {"memolab hash_value": hashing.hash_value, **ext}
    per: dict = {}
    for _ in range(args.repeat):  # interleaved rounds, as above
        for name, fn in small.items():
            per.setdefault((name, "cfg"), []).append(per_call(lambda fn=fn: fn(cfg), budget=0.1))
            per.setdefault((name, "ints"), []).append(per_call(lambda fn=fn: fn(ints), budget=0.2))

    def spread(xs, f):
        return f"{statistics.median(xs):{f}} ({min(xs):{f}}–{max(xs):{f}})"

    rows = [(name, spread(per[(name, "cfg")], ".1f"), spread(per[(name, "ints")], ".0f")) for name in small]
    table(f"Per-call cost of small values (µs; median (min–max) over {args.repeat} interleaved rounds, "
          "each round's figure a median of batches)", ["hasher", "config dict (10 keys)", "list of 100k ints"], rows)

    # -- 3. repeated calls with the identity cache ------------------------------------------
    identity.enabled = True
    with tempfile.TemporaryDirectory() as tmp:
        memolab.configure(store=os.path.join(tmp, "store"))

        @memolab.memo
        def load_dataset(seed):
            return np.random.default_rng(seed).random(n, dtype=np.float32)

        @memolab.memo
        def mean(ds):
            return float(ds[:1000].mean())

        load_dataset(0)
        load_dataset.store().forget()  # the next call loads from disk, memory-mapped
        ds = load_dataset(0)
        mean(ds)  # stores the (tiny) result
        rows = []
        h = per_call(lambda: hashing.hash_arguments([("ds", ds)]), budget=0.3)
        rows.append(("array returned by a memoized function", "hash_arguments", f"{h:.1f}"))
        c = per_call(lambda: mean(ds), budget=0.3)
        rows.append(("array returned by a memoized function", "memoized call (in-memory hit)", f"{c:.1f}"))
        # A fresh tensor: peers above exported ``ten`` to numpy (HF's Hasher calls
        # ``.numpy()``), which marks its storage as shared and rightly turns its
        # identity cache off for good.
        ten = ten.clone()
        hashing.hash_value(ten)
        h = per_call(lambda: hashing.hash_arguments([("t", ten)]), budget=0.3)
        rows.append(("torch tensor (version counter unchanged)", "hash_arguments", f"{h:.1f}"))
        w = arr  # a writeable array: its mutation cannot be detected
        t = best(lambda: hashing.hash_arguments([("a", w)]), args.repeat) * 1e6
        rows.append(("writeable numpy array (never cached)", "hash_arguments", f"{t:.0f}"))
        identity.enabled = False
        t = best(lambda: hashing.hash_arguments([("ds", ds)]), args.repeat) * 1e6
        rows.append(("array from the store, identity cache off", "hash_arguments", f"{t:.0f}"))
        identity.enabled = True
        table(f"Repeated calls with a {args.mib} MiB argument (µs per call, median)", ["argument", "what", "µs"], rows)


if __name__ == "__main__":
    main()
