"""Seeded byte-flip fuzzing of blobs and the index: only clean misses, never a wrong value.

A pristine store is built once (small, big, shared results, and a signed
copy). Each input copies it, flips 1-8 random bytes of one random file (a
payload blob, a buffer blob, or the index, checkpointed so the index is one
file), then calls every stored key in this process against the damaged copy
and runs ``ls``, ``show``, ``why``, ``gc --dry-run`` and ``doctor`` through the
CLI entry point. Every call must return the right value (a hit or a
recomputation) and raise nothing; no CLI command may raise or print a
traceback. Outcomes are tallied: hits, clean misses (recomputed), and how the
damage showed.

Flips are ordinary writes: they change the file's mtime and, since every input
is a copy, its inode, so the blob stamps force a re-hash. Damage below the file
system that keeps both (bit rot) is caught on load only for payload blobs and in
signed stores; ``doctor`` re-hashes everything.

    python stress/fuzz.py --inputs 2000        # the long run
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

KEYS = [(i, k) for i in range(6) for k in ("small", "big", "shared")]


def _build(work: Path) -> Path:
    H.setup(work)
    pristine = work / "pristine"
    code = ("import json\nfrom work import f\n"
            f"for i, k in {KEYS!r}:\n    f(i, k)\n"
            "import sqlite3\nc = sqlite3.connect('" + str(pristine / "index.sqlite") + "')\n"
            "c.execute('PRAGMA wal_checkpoint(TRUNCATE)')\nprint(json.dumps('ok'))\n")
    (work / "build.py").write_text(code)
    H.run_json(work, pristine, "build.py")
    return pristine


def _flip(rng: random.Random, store: Path) -> tuple[str, int]:
    blobs = [p for p in (store / "blobs").rglob("*") if p.is_file()]
    target = store / "index.sqlite" if rng.random() < 0.5 else rng.choice(blobs)  # half and half
    data = bytearray(target.read_bytes())
    n = rng.randint(1, 8)
    for _ in range(n):
        if not data:
            break
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    os.chmod(target, 0o644)
    target.write_bytes(bytes(data))
    return ("index" if target.name == "index.sqlite" else "blob"), n


def run(inputs: int, work: Path, seed: int = 0) -> dict[str, Any]:
    pristine = _build(work)
    sys.path.insert(0, str(work))
    os.environ.pop("MEMOLAB_HMAC_KEY", None)
    from work import computed, expected, f, same  # type: ignore[import-not-found]

    import memolab
    from memolab import cli
    from memolab.store import _stores

    rng = random.Random(seed)
    fig: dict[str, Any] = {"inputs": 0, "calls": 0, "hits": 0, "misses": 0, "wrong": [], "raised": [],
                           "cli_raised": [], "tracebacks": 0, "targets": {"index": 0, "blob": 0}, "flips": 0,
                           "warned": 0}
    for n in range(inputs):
        d = work / f"in{n}"
        shutil.copytree(pristine, d)
        target, flips = _flip(rng, d)
        fig["inputs"] += 1
        fig["flips"] += flips
        fig["targets"][target] += 1
        memolab.configure(store=str(d))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for i, kind in KEYS:
                before = len(computed)
                try:
                    v = f(i, kind)
                except Exception as e:  # never: a damaged store is a miss
                    fig["raised"].append((n, target, f"{type(e).__name__}: {e}"))
                    continue
                fig["calls"] += 1
                if not same(v, expected(i, kind)):
                    fig["wrong"].append((n, target, i, kind))
                if len(computed) > before:
                    fig["misses"] += 1
                else:
                    fig["hits"] += 1
            fig["warned"] += bool(w)
        for args in (["ls"], ["ls", "f"], ["show", "1"], ["why", "f"], ["gc", "--dry-run"], ["doctor"]):
            out, err = io.StringIO(), io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    cli.main(["--store", str(d), *args])
            except SystemExit:
                pass  # argparse or an explicit one-line exit
            except Exception as e:
                fig["cli_raised"].append((n, target, " ".join(args), f"{type(e).__name__}: {e}"))
            fig["tracebacks"] += "Traceback" in out.getvalue() + err.getvalue()
        for k in [k for k in _stores if k[0].startswith(str(d))]:
            _stores.pop(k, None)
        shutil.rmtree(d, ignore_errors=True)
    memolab.configure(store=None)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    # copies on a tmpfs where there is one: fuzzing is about bytes, not about fsync speed
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="memolab-fuzz-", dir=shm) as d:
        fig = run(a.inputs, Path(d), a.seed)
    print(f"{fig['inputs']} damaged stores ({fig['targets']['index']} index, {fig['targets']['blob']} blob; "
          f"{fig['flips']} bit flips): {fig['calls']} calls, {fig['hits']} hits, {fig['misses']} clean misses "
          f"(recomputed), {len(fig['wrong'])} wrong values, {len(fig['raised'])} exceptions out of calls, "
          f"{len(fig['cli_raised'])} CLI exceptions, {fig['tracebacks']} tracebacks printed "
          f"({time.time() - t0:.0f} s)")
    if fig["wrong"] or fig["raised"] or fig["cli_raised"] or fig["tracebacks"]:
        print(fig["wrong"][:10], fig["raised"][:10], fig["cli_raised"][:10])
        sys.exit(1)


if __name__ == "__main__":
    main()
