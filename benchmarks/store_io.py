"""Storing and loading one large array/tensor result: memolab vs its peers.

One run, side by side, for a float32 result of ``--mb`` MiB (default 1024):

* raw ``write()`` of the bytes to one file: the disk limit;
* memolab ``@memo`` with a numpy array and with a torch tensor result;
* ``np.save`` / ``np.load(mmap_mode='r')``;
* ``torch.save`` / ``torch.load(mmap=True)``;
* safetensors ``save_file`` / ``safe_open(...).get_tensor`` (its lazy loader);
* ``joblib.Memory(mmap_mode='r')``.

Every writer's time includes an ``fsync`` of what it wrote (memolab fsyncs its
blobs itself; for the others we fsync their files after they return), so all
pay the same durability cost as the raw write. Rounds are interleaved (each
round stores once with every library, each store paired with a raw write of the
same bytes right before or, in half the pairs, right after it) and every figure is a median with its min–max over
the rounds; "% of raw" is the ratio within each pair. The first store of each library in the process runs
before the rounds and is reported in its own column (imports, store creation).
"load" is the time to
get the object back (memory-mapped where the library can, untouched);
"load+sum" also reads every byte once. The page cache is warm for every loader
alike (each reads right after its own write), so "load" measures the mapping
overhead, not the disk.

    python benchmarks/store_io.py [--mb 1024] [--store-repeat 7] [--repeat 3] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def fsync_tree(path: str) -> None:
    paths = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def load_once(load: Callable[[], Any]) -> tuple[float, float]:
    """(time to get the object back, that + reading every byte once)."""
    gc.collect()
    dt, obj = timed(load)
    t = time.perf_counter()
    float(obj.sum())
    return dt, dt + time.perf_counter() - t


Case = tuple[Callable[[str], None], Callable[[str], Any]]  # store(dir), load(dir)


def case_raw(arr: Any) -> Case:
    import numpy as np

    mv = memoryview(arr).cast("B")

    def store(d: str) -> None:
        fd = os.open(os.path.join(d, "raw.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = mv
            while view.nbytes:
                view = view[os.write(fd, view[: 1 << 30]):]
            os.fsync(fd)
        finally:
            os.close(fd)

    return store, lambda d: np.memmap(os.path.join(d, "raw.bin"), dtype=arr.dtype, mode="r", shape=arr.shape)


class _Holder:
    """Hands the result to the memoized function without making it part of the key.

    A closure cell is hashed by value on every call (it is code state), which
    would add a 1 GiB hash to every load measured here.
    """

    def __init__(self, value: Any) -> None:
        self.value = value


def case_memolab(value: Any) -> Case:
    import memolab

    memolab.register_opaque(_Holder)
    holder = _Holder(value)
    fns: dict[str, Any] = {}

    def fn_for(d: str) -> Any:
        if d not in fns:
            @memolab.memo(store=os.path.join(d, "memolab"))
            def produce(tag: str) -> Any:
                return holder.value
            fns[d] = produce
        return fns[d]

    def load(d: str) -> Any:
        f = fn_for(d)
        f.store().forget()  # every load goes to the store: index, payload, mapped buffers
        return f("x")

    return (lambda d: fn_for(d)("x")), load


def case_numpy(arr: Any) -> Case:
    import numpy as np

    def store(d: str) -> None:
        np.save(os.path.join(d, "arr.npy"), arr)
        fsync_tree(os.path.join(d, "arr.npy"))

    return store, lambda d: np.load(os.path.join(d, "arr.npy"), mmap_mode="r")


def case_torch(t: Any) -> Case:
    import torch

    def store(d: str) -> None:
        torch.save(t, os.path.join(d, "t.pt"))
        fsync_tree(os.path.join(d, "t.pt"))

    return store, lambda d: torch.load(os.path.join(d, "t.pt"), mmap=True, weights_only=True)


def case_safetensors(t: Any) -> Case:
    from safetensors import safe_open
    from safetensors.torch import save_file

    def store(d: str) -> None:
        save_file({"t": t}, os.path.join(d, "t.safetensors"))
        fsync_tree(os.path.join(d, "t.safetensors"))

    def load(d: str) -> Any:
        with safe_open(os.path.join(d, "t.safetensors"), framework="pt") as f:
            return f.get_tensor("t")

    return store, load


def case_joblib(arr: Any) -> Case:
    from joblib import Memory

    def produce(tag: str) -> Any:
        return arr

    def store(d: str) -> None:
        Memory(os.path.join(d, "joblib"), mmap_mode="r", verbose=0).cache(produce)("x")
        fsync_tree(os.path.join(d, "joblib"))

    return store, lambda d: Memory(os.path.join(d, "joblib"), mmap_mode="r", verbose=0).cache(produce)("x")


def fmt_t(s: float) -> str:
    return f"{s * 1e6:,.0f} µs" if s < 1e-3 else (f"{s * 1e3:,.2f} ms" if s < 1 else f"{s:,.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1024, help="result size in MiB (default 1024)")
    ap.add_argument("--repeat", type=int, default=3, help="loads timed per library in each round")
    ap.add_argument("--store-repeat", type=int, default=7, help="interleaved rounds (one store per library each)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--only", default="", help="comma-separated subset of cases")
    args = ap.parse_args()

    import numpy as np
    import torch

    n = args.mb * (1 << 20) // 4
    arr = np.random.default_rng(0).random(n, dtype=np.float32)
    t = torch.from_numpy(arr.copy())  # its own bytes: memolab must not dedup it against the numpy case
    t.add_(1.0)
    cases: list[tuple[str, Case]] = [
        ("raw write() + fsync (disk limit)", case_raw(arr)),
        ("memolab @memo, numpy result", case_memolab(arr)),
        ("memolab @memo, torch result", case_memolab(t)),
        ("np.save / np.load(mmap_mode='r')", case_numpy(arr)),
        ("torch.save / torch.load(mmap=True)", case_torch(t)),
        ("safetensors save_file / safe_open", case_safetensors(t)),
        ("joblib.Memory(mmap_mode='r')", case_joblib(arr)),
    ]
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    cases = [c for c in cases if not only or c[0].startswith("raw") or any(o in c[0] for o in only)]
    stores: dict[str, list[float]] = {name: [] for name, _ in cases}
    pct: dict[str, list[float]] = {name: [] for name, _ in cases}
    loads: dict[str, list[float]] = {name: [] for name, _ in cases}
    load_sums: dict[str, list[float]] = {name: [] for name, _ in cases}
    first: dict[str, float] = {}
    errors: dict[str, str] = {}

    def one(name: str, store: Callable[[str], None], load: Callable[[str], Any], timed_load: bool) -> float:
        d = tempfile.mkdtemp(prefix="memolab-bench-", dir=args.dir)
        try:
            gc.collect()
            dt, _ = timed(lambda: store(d))
            if timed_load:
                ls = [load_once(lambda: load(d)) for _ in range(args.repeat)]
                loads[name].append(statistics.median(x[0] for x in ls))
                load_sums[name].append(statistics.median(x[1] for x in ls))
            return dt
        finally:
            shutil.rmtree(d, ignore_errors=True)
            gc.collect()

    # Round 0, not in the statistics: the first store of each library in this
    # process. It pays one-time costs (imports, a store's creation; the first
    # large write of a process also pays page-cache allocation, 6-10x slower),
    # reported in a column of its own rather than hidden by (or skewing) the median.
    for name, (store, load) in cases:
        try:
            first[name] = one(name, store, load, False)
        except Exception as e:  # one peer failing must not hide the others
            errors[name] = f"{type(e).__name__}: {e}"
    # Interleaved rounds over the libraries, a fresh directory per store: disk noise
    # and writeback of the previous file hit everyone alike. The disk's speed swings
    # on a time scale of seconds when it is shared, so each library's store is paired
    # with a raw write of the same bytes made right next to it (before it in half the
    # pairs, after it in the others), and "% of raw" is the ratio within each pair: a
    # slow moment then slows both sides of a pair.
    raw_name, (raw_store, raw_load) = cases[0]
    for i in range(args.store_repeat):
        # rotate the order too: whoever writes right after a big delete pays for it
        others = cases[1:]
        for name, (store, load) in others[i % len(others):] + others[:i % len(others)]:
            if name in errors or raw_name in errors:
                continue
            try:
                # who writes second follows a 1 GiB delete and pays for it (measured: up to
                # 2x): the raw write goes first in half the pairs, second in the other half
                raw_first = (i + [c[0] for c in others].index(name)) % 2 == 0
                if raw_first:
                    t_raw = one(raw_name, raw_store, raw_load, len(stores[raw_name]) < args.store_repeat)
                t_lib = one(name, store, load, True)
                if not raw_first:
                    t_raw = one(raw_name, raw_store, raw_load, len(stores[raw_name]) < args.store_repeat)
                stores[raw_name].append(t_raw)
                stores[name].append(t_lib)
                pct[name].append(100 * t_raw / t_lib)
                pct[raw_name].append(100.0)
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"

    size = arr.nbytes
    print(f"store and load of one {args.mb} MiB float32 result, {args.store_repeat} interleaved rounds "
          f"(Python {sys.version.split()[0]}, torch {torch.__version__}, numpy {np.__version__}); every figure is "
          f"median (min–max) over the rounds; load = median of {args.repeat} loads within a round. "
          f"Load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; the disk is shared.")
    print()
    print("| method | store | store GiB/s | % of raw write (paired) | first store in the process "
          "| load (mapped) | load + sum |")
    print("|---|---|---|---|---|---|---|")

    def spread(xs: list[float], f: Callable[[float], str]) -> str:
        return f"{f(statistics.median(xs))} ({f(min(xs))}–{f(max(xs))})"

    for name, _ in cases:
        if name in errors:
            print(f"| {name} | failed: {errors[name][:70]} | | | | | |")
            continue
        gibs = [size / t_ / (1 << 30) for t_ in stores[name]]
        print(f"| {name} | {spread(stores[name], fmt_t)} | {spread(gibs, lambda x: f'{x:.2f}')} "
              f"| {spread(pct[name], lambda x: f'{x:.0f}%')} | {fmt_t(first[name])} "
              f"| {spread(loads[name], fmt_t)} | {spread(load_sums[name], fmt_t)} |")


if __name__ == "__main__":
    main()
