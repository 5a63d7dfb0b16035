"""Snapshots of a folder (issue 55 §1): ``memolab.snapshot`` / ``memolab.restore`` against a plain
copy and a tar, locally and through the team store (PostgreSQL + moto S3 on loopback).

The folder: ``--files`` files (default 1,000) of ``--total-mb`` MB in all (default 1,000: the
issue's 1 GB), random bytes (incompressible: no method gains by compression), in 10 sub-folders.

Measured, each ``--rounds`` times (median, min–max), the page cache warm for both sides:

* **local, in**: ``memolab.snapshot(folder)`` into a fresh local store  vs  ``shutil.copytree``
  (a plain copy)  and  ``tar -cf`` (one archive file);
* **local, out**: ``memolab.restore(digest, dest)`` (every file verified, fsynced, renamed into
  place)  vs  ``shutil.copytree`` back  and  ``tar -xf``;
* **team round trip**: machine A ``snapshot`` with a team store configured (local blobs + upload of
  every blob + the record on the team index), machine B (an empty local store) ``restore`` (download,
  verified, into B's store, then written out)  vs  ``tar -cf`` + boto3 ``upload_file`` of the tar on A,
  ``download_file`` + ``tar -xf`` on B (s3transfer, same concurrency);
* then the team store is cut (PostgreSQL stopped, the S3 endpoint pointed at a closed port) and B
  restores again, offline, from its own store; every restored tree is compared bitwise (SHA-256 of
  every file, and the executable bits) with the original.

Ratios are memolab / the best plain method of the same direction. moto's S3 server is one Python
process on the same 2 shared cores: the team figures are bounded by it, as a real endpoint's
network would bound them; read them as "what memolab adds over moving the same bytes as one tar".

    python benchmarks/snapshots.py [--files 1000] [--total-mb 1000] [--rounds 1] [--no-team]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

MB = 1 << 20


def make_folder(root: Path, files: int, total: int) -> None:
    size = max(1, total // files)
    for i in range(files):
        p = root / f"part{i % 10}" / f"f{i:05d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
    os.chmod(root / "part0" / "f00000.bin", 0o755)


def tree(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda f=f: f.read(MB), b""):
                    h.update(chunk)
            out[p.relative_to(root).as_posix()] = h.hexdigest() + ("x" if os.access(p, os.X_OK) else "")
    return out


def timed(fn: Callable[[], object], rounds: int, reset: Callable[[], None]) -> list[float]:
    out = []
    for _ in range(rounds):
        reset()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def fmt(xs: list[float], mb: float) -> str:
    m = statistics.median(xs)
    return f"{m:7.2f} s ({min(xs):.2f}-{max(xs):.2f}) {mb / m:7.1f} MB/s"


def rm(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)
    if p.exists() and not p.is_dir():
        p.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--total-mb", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-team", action="store_true")
    ap.add_argument("--dir", default=None, help="where the data goes (default: a temp dir)")
    a = ap.parse_args()

    import warnings

    from memolab.store import Store
    from memolab.team import snapshots

    warnings.simplefilter("ignore")
    work = Path(tempfile.mkdtemp(prefix="memolab-snap-", dir=a.dir))
    data = work / "data"
    make_folder(data, a.files, a.total_mb * 1_000_000)
    want = tree(data)
    mb = sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 1e6
    print(f"folder: {a.files} files, {mb:.0f} MB (random bytes), {a.rounds} round(s); machine: {os.cpu_count()} cores")
    rows: list[tuple[str, list[float], list[float]]] = []

    # -- local -------------------------------------------------------------------------------
    store_dir, copy_dir, tar_file, out_dir = work / "store", work / "copy", work / "data.tar", work / "out"
    digest = ""

    def snap() -> None:
        nonlocal digest
        st = Store(store_dir)
        digest = snapshots.snapshot(data, store=st)
        st.close()

    mem_in = timed(snap, a.rounds, lambda: rm(store_dir))
    copy_in = timed(lambda: shutil.copytree(data, copy_dir), a.rounds, lambda: rm(copy_dir))
    tar_in = timed(lambda: subprocess.run(["tar", "-cf", str(tar_file), "-C", str(data), "."], check=True),
                   a.rounds, lambda: rm(tar_file))

    def restore_local() -> None:
        st = Store(store_dir)
        snapshots.restore(digest, out_dir, store=st)
        st.close()

    mem_out = timed(restore_local, a.rounds, lambda: rm(out_dir))
    assert tree(out_dir) == want, "local restore differs"
    copy_out = timed(lambda: shutil.copytree(copy_dir, out_dir), a.rounds, lambda: rm(out_dir))

    def untar() -> None:
        out_dir.mkdir()
        subprocess.run(["tar", "-xf", str(tar_file), "-C", str(out_dir)], check=True)

    tar_out = timed(untar, a.rounds, lambda: rm(out_dir))
    rows.append(("local: in (snapshot / copy, tar -c)", mem_in, [min(statistics.median(copy_in), statistics.median(tar_in))]))
    rows.append(("local: out (restore / copy, tar -x)", mem_out, [min(statistics.median(copy_out), statistics.median(tar_out))]))
    print(f"local in   memolab.snapshot {fmt(mem_in, mb)} | copytree {fmt(copy_in, mb)} | tar -c {fmt(tar_in, mb)}",
          flush=True)
    print(f"local out  memolab.restore  {fmt(mem_out, mb)} | copytree {fmt(copy_out, mb)} | tar -x {fmt(tar_out, mb)}",
          flush=True)
    rm(copy_dir)
    rm(store_dir)

    if not a.no_team:
        rows += team(a, work, data, want, mb, tar_file)
    print()
    print("ratio (memolab / best plain method of the same direction; < 1: memolab faster)")
    for name, mine, plain in rows:
        print(f"  {name:44s} {statistics.median(mine) / statistics.median(plain):5.2f}x")
    rm(work)


def team(a: argparse.Namespace, work: Path, data: Path, want: dict[str, str], mb: float,
         tar_file: Path) -> list[tuple[str, list[float], list[float]]]:
    import boto3
    from boto3.s3.transfer import TransferConfig

    import memolab
    from memolab.store import close_open_stores
    from memolab.team import snapshots
    from servers.postgres import PgServer, find_bin
    from servers.s3 import S3Server

    bindir = find_bin()
    if bindir is None:
        raise SystemExit("PostgreSQL's initdb/pg_ctl not found")
    pg = PgServer(bindir)
    pg.start()
    dsn = pg.new_database()
    s3 = S3Server()
    s3.start()
    bucket = s3.make_bucket()
    os.environ.update({**s3.env, "MEMOLAB_TEAM_UNSIGNED": "1"})
    rows = []
    try:
        a_store, b_store, out_dir = work / "team-a", work / "team-b", work / "team-out"
        digests: list[str] = []
        n = 0

        def snap_a() -> None:
            nonlocal n
            n += 1  # a fresh prefix per round: nothing deduplicated against an earlier round
            memolab.configure(store=str(a_store), remote=dsn, remote_blobs=f"s3://{bucket}/r{n}", remote_timeout=60.0)
            digests.append(snapshots.snapshot(data))

        def restore_b() -> None:
            memolab.configure(store=str(b_store), remote=dsn, remote_blobs=f"s3://{bucket}/r{n}", remote_timeout=60.0)
            snapshots.restore(digests[-1], out_dir)

        mem_in = []
        mem_out = []
        for _ in range(a.rounds):
            for p in (a_store, b_store, out_dir):
                rm(p)
            t0 = time.perf_counter()
            snap_a()
            mem_in.append(time.perf_counter() - t0)
            close_open_stores(work)
            t0 = time.perf_counter()
            restore_b()
            mem_out.append(time.perf_counter() - t0)
            assert tree(out_dir) == want, "team restore differs"
        print(f"team in   snapshot (A: store + upload) {fmt(mem_in, mb)}", flush=True)
        print(f"team out  restore (B: download + write) {fmt(mem_out, mb)} (bitwise: yes)", flush=True)
        from botocore.config import Config

        client = boto3.session.Session().client("s3", config=Config(read_timeout=600, retries={"max_attempts": 10}))
        tc = TransferConfig(multipart_threshold=16 * MB, multipart_chunksize=8 * MB, max_concurrency=16)
        raw_in, raw_out = [], []
        try:
            for i in range(a.rounds):
                rm(tar_file)
                rm(out_dir)
                t0 = time.perf_counter()
                subprocess.run(["tar", "-cf", str(tar_file), "-C", str(data), "."], check=True)
                client.upload_file(str(tar_file), bucket, f"tar/{i}.tar", Config=tc)
                raw_in.append(time.perf_counter() - t0)
                rm(tar_file)
                t0 = time.perf_counter()
                client.download_file(bucket, f"tar/{i}.tar", str(tar_file), Config=tc)
                out_dir.mkdir()
                subprocess.run(["tar", "-xf", str(tar_file), "-C", str(out_dir)], check=True)
                raw_out.append(time.perf_counter() - t0)
            print(f"team baseline: tar -c + upload_file   {fmt(raw_in, mb)} | download_file + tar -x {fmt(raw_out, mb)}")
            rows.append(("team: A snapshot / tar + upload", mem_in, raw_in))
            rows.append(("team: B restore / download + untar", mem_out, raw_out))
        except Exception as e:  # (moto's server has failed a 1 GB object's ranged GETs): memolab's figures stand
            print(f"team baseline failed: {type(e).__name__}: {e}", flush=True)
        offline(pg, s3, work, b_store, out_dir, dsn, f"s3://{bucket}/r{n}", digests[-1], want, mb)
    finally:
        s3.stop()
        pg.close()
    return rows


def offline(pg: object, s3: object, work: Path, b_store: Path, out_dir: Path, dsn: str, blobs: str, digest: str,
            want: dict[str, str], mb: float) -> None:
    """The network cut after the first pull (PostgreSQL stopped, S3 unreachable): B restores from its
    own store."""
    import memolab
    from memolab.store import close_open_stores
    from memolab.team import snapshots

    close_open_stores(work)
    pg.stop()  # type: ignore[attr-defined]
    s3.stop()  # type: ignore[attr-defined]
    rm(out_dir)
    memolab.configure(store=str(b_store), remote=dsn, remote_blobs=blobs, remote_timeout=2.0)
    t0 = time.perf_counter()
    snapshots.restore(digest, out_dir)
    off = time.perf_counter() - t0
    assert tree(out_dir) == want, "offline restore differs"
    print(f"offline   restore on B, team cut        {fmt([off], mb)} (bitwise: yes)", flush=True)


if __name__ == "__main__":
    main()
