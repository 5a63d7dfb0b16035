"""The team store (PostgreSQL + S3) against the local store, and ``pull`` against raw S3 GETs.

Starts its own PostgreSQL (Debian's package, ``initdb`` + ``pg_ctl`` on a free
loopback port) and moto's S3 server (a subprocess on loopback), with the test
suite's helpers (``tests/servers/``). Loopback has no network latency: a real
team store adds its round-trip time to every team figure (one index query for a
hit, plus the blob GETs).

Rows (each compares the same work, or says that it does not):

* **hit, small result**: a memoized call whose result (a small dict) is stored
  inline in its index row. *local*: the row is in the local store (in-process
  copies dropped before every call: read from the store). *team*: a local
  store that lacks it (fresh), connections to the team store already open: one
  team index query, the row imported into the local store, then loaded. Same
  keys, same values.
* **hit, ``--mb`` MB result**: an array of that size. *local*: mapped from the
  local blob file. *team*: a fresh local store: the row from PostgreSQL, the
  blob downloaded from S3 (one GET on a loopback endpoint; elsewhere parallel
  ranged GETs, ``MEMOLAB_REMOTE_CONCURRENCY`` at once), verified against its
  digest, fsynced, kept in the local blob folder, then mapped. Against raw boto3
  GETs of the same object (one GET; ranged GETs of memolab's part size).
* **``--workers`` processes' hits/s**: that many processes at once, each with a
  fresh local store, call the same ``--keys`` small-result keys (all team hits),
  then call them again (local hits, read from the store). Aggregate calls per
  second, first start to last end. The 1-process row does the same work alone.
* **pull vs raw GET**: ``--pull-objects`` results of ``--pull-mb`` MB each.
  ``pull`` is ``TeamStore.pull`` (what ``memolab pull`` runs) into a fresh
  local store: one index query, concurrent downloads, each blob verified
  against its BLAKE3 digest and published into the blob folder, the rows
  recorded locally. ``raw GET`` is boto3 ``get_object`` of the same objects at
  the same concurrency, streamed to files, nothing verified or recorded (and
  once more with each file fsynced, as pull does: a downloaded blob must survive
  a crash, since local hits trust a blob's stat stamp).
  ``memolab pull`` (CLI) is the same pull run as a command: wall time including
  interpreter start-up and imports (not the same work: says so in the row).

Rounds are interleaved (every measurement once per round, fresh local stores
each round); each figure is the median over rounds (min–max over rounds). After
each measurement the files it wrote are deleted and ``os.sync()`` runs, untimed:
otherwise the next one to fsync paid for the previous one's deletion (and, on a
disk mounted with ``discard``, its trims), which made the fsyncing rows (pull,
raw GET + fsync) swing by 2x with their place in the round.

    python benchmarks/team_store.py [--rounds 5] [--mb 100] [--workers 8] [--keys 200]
                                    [--pull-objects 16] [--pull-mb 16] [--only pull] [--json FILE]

``--only pull`` runs just the pull rows (no hit rows; faster fill); ``--json`` writes every
round's figures, to pool the rounds of several runs (e.g. two builds run turn about).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memolab  # noqa: E402
from _team import Servers, big, hit_worker, shard, small, use  # noqa: E402


def fmt(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:,.1f} µs"
    if s < 1:
        return f"{s * 1e3:,.2f} ms"
    return f"{s:,.2f} s"


def spread(values: list[float], unit=fmt) -> str:
    if not values:
        return "failed"
    return f"{unit(statistics.median(values))} ({unit(min(values))}–{unit(max(values))})"


def within(rounds: dict[str, list[float]], a: str, b: str, digits: int = 2) -> str:
    """The ratio ``a / b`` taken within each round (both ran in it, back to back), median (min–max)
    over rounds: less exposed to the load drifting between rounds than the ratio of two medians."""
    rs = [x / y for x, y in zip(rounds[a], rounds[b], strict=False) if y]
    if not rs:
        return "failed"
    return f"{statistics.median(rs):,.{digits}f}x ({min(rs):,.{digits}f}–{max(rs):,.{digits}f})"


def rate(v: float) -> str:
    return f"{v:,.0f}/s"


def mbps(v: float) -> str:
    return f"{v / 1e6:,.0f} MB/s"


class Bench:
    def __init__(self, args: argparse.Namespace, servers: Servers, work: Path) -> None:
        self.a = args
        self.s = servers
        self.work = work
        self.n = 0

    def fresh(self) -> str:
        self.n += 1
        return str(self.work / f"store-{self.n}")

    def drop(self, path: str) -> None:
        memolab.configure(store=str(self.work / "idle"))  # let go of it first
        shutil.rmtree(path, ignore_errors=True)

    # -- filling the team store (untimed) ---------------------------------------------------
    def fill(self) -> None:
        st = use(self.fresh(), self.s.dsn, self.s.blobs_url)
        everything = self.a.only == "all"
        for i in range(self.a.keys if everything else 0):
            small(i)
        if everything:
            big(self.a.mb, 0)
        for i in range(self.a.pull_objects):
            shard(i, self.a.pull_mb)
        st.journal.drain()  # what `memolab sync` does: everything uploaded and published
        rows = st.link.index.evaluations(shard.symbol)
        from memolab.team.reading import blob_refs

        full = st.link.index.lookup_many([(r["fn"], r["code"], r["args"], r["schema"]) for r in rows])
        # distinct objects (the arrays' pickle payloads are equal: one object for all)
        self.pull_objects = sorted({ref for r in full.values() for ref in blob_refs(r)})
        self.pull_bytes = sum(n for _, n in self.pull_objects)
        self.concurrency = st.link.blobs.concurrency
        self.blobs = st.link.blobs
        self.ranged = bool(getattr(self.blobs, "ranged", False))
        if not everything:
            return
        brow = st.link.index.lookup(big.key(self.a.mb, 0))
        self.big_blob = max(blob_refs(brow), key=lambda ref: ref[1])  # the array's buffer

    # -- hits --------------------------------------------------------------------------------
    def small_hits(self, n: int) -> dict[str, float]:
        path = self.fresh()
        st = use(path, self.s.dsn, self.s.blobs_url)
        team, local = [], []
        for i in range(n):  # team: not in this local store yet
            t = time.perf_counter()
            small(i)
            team.append(time.perf_counter() - t)
        for i in range(n):  # the same keys, now local
            st.forget()
            t = time.perf_counter()
            small(i)
            local.append(time.perf_counter() - t)
        self.drop(path)
        return {"small_team": statistics.median(team), "small_local": statistics.median(local)}

    def big_hit(self) -> dict[str, float]:
        path = self.fresh()
        st = use(path, self.s.dsn, self.s.blobs_url)
        t = time.perf_counter()
        v = big(self.a.mb, 0)
        team = time.perf_counter() - t
        assert v.nbytes == self.a.mb * 1_000_000
        del v
        local = []
        for _ in range(5):
            st.forget()
            t = time.perf_counter()
            big(self.a.mb, 0)
            local.append(time.perf_counter() - t)
        self.drop(path)
        return {"big_team": team, "big_local": statistics.median(local), "big_raw": self.raw_big(False),
                "big_raw_ranged": self.raw_big(True)}

    def _client(self):
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client("s3", config=Config(max_pool_connections=self.concurrency + 2))

    def raw_big(self, ranged: bool) -> float:
        """boto3 GET of the large result's blob to a file: one GET, or ranged GETs of the
        part size memolab uses, as many at once as memolab runs."""
        from memolab.team.blobs import PART_SIZE

        client = self._client()
        digest, size = self.big_blob
        key = self.blobs._key(digest)
        client.head_object(Bucket=self.blobs.bucket, Key=key)  # connection made
        d = Path(tempfile.mkdtemp(dir=self.work))
        fd = os.open(d / "blob", os.O_WRONLY | os.O_CREAT)

        def part(off: int) -> None:
            rng = {"Range": f"bytes={off}-{min(size, off + PART_SIZE) - 1}"} if ranged else {}
            body = client.get_object(Bucket=self.blobs.bucket, Key=key, **rng)["Body"]
            at = off
            for chunk in iter(lambda: body.read(1 << 20), b""):
                os.pwrite(fd, chunk, at)
                at += len(chunk)

        t = time.perf_counter()
        if ranged:
            with ThreadPoolExecutor(self.concurrency) as ex:
                list(ex.map(part, range(0, size, PART_SIZE)))
        else:
            part(0)
        dt = time.perf_counter() - t
        os.close(fd)
        assert os.path.getsize(d / "blob") == size
        shutil.rmtree(d)
        return dt

    # -- N processes ---------------------------------------------------------------------------
    def concurrent(self, n: int) -> dict[str, float]:
        ctx = multiprocessing.get_context("spawn")
        barrier, out = ctx.Barrier(n), ctx.Queue()
        stores = [self.fresh() for _ in range(n)]
        procs = [ctx.Process(target=hit_worker, args=(p, self.s.dsn, self.s.blobs_url, self.s.env,
                                                       list(range(self.a.keys)), barrier, out)) for p in stores]
        for p in procs:
            p.start()
        stamps = [out.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        for p in stores:
            shutil.rmtree(p, ignore_errors=True)
        calls = n * self.a.keys
        team = calls / (max(s[1] for s in stamps) - min(s[0] for s in stamps))
        local = calls / (max(s[3] for s in stamps) - min(s[2] for s in stamps))
        return {f"procs{n}_team": team, f"procs{n}_local": local}

    # -- pull vs raw GET -------------------------------------------------------------------------
    def pull(self) -> float:
        path = self.fresh()
        st = use(path, self.s.dsn, self.s.blobs_url)
        t = time.perf_counter()
        r = st.pull(shard.symbol)
        dt = time.perf_counter() - t
        assert r["imported"] == self.a.pull_objects and r["blobs"] == len(self.pull_objects), r
        self.drop(path)
        return self.pull_bytes / dt

    def pull_cli(self) -> float:
        path = self.fresh()
        env = dict(os.environ, MEMOLAB_REMOTE=self.s.dsn, MEMOLAB_REMOTE_BLOBS=self.s.blobs_url,
                   PYTHONWARNINGS="ignore")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "memolab", "--store", path, "pull", shard.symbol], env=env, check=True,
                       capture_output=True)
        dt = time.perf_counter() - t
        shutil.rmtree(path, ignore_errors=True)
        return self.pull_bytes / dt

    def raw_get(self, fsync: bool = False) -> float:
        client = self._client()
        client.head_bucket(Bucket=self.blobs.bucket)  # connection made
        d = Path(tempfile.mkdtemp(dir=self.work))

        def one(ref) -> int:
            digest, _ = ref
            body = client.get_object(Bucket=self.blobs.bucket, Key=self.blobs._key(digest))["Body"]
            n = 0
            with open(d / digest, "wb") as f:
                for chunk in iter(lambda: body.read(1 << 20), b""):
                    f.write(chunk)
                    n += len(chunk)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
            return n

        t = time.perf_counter()
        with ThreadPoolExecutor(self.concurrency) as ex:
            got = sum(ex.map(one, self.pull_objects))
        dt = time.perf_counter() - t
        assert got == self.pull_bytes
        shutil.rmtree(d)
        return self.pull_bytes / dt


def hits_tables(args: argparse.Namespace, b: Bench, rounds: dict[str, list[float]], med: dict[str, float]) -> None:
    w = args.workers
    print("| case | local store | team store | team / local (medians) | team / local within each round |")
    print("|---|---|---|---|---|")
    print(f"| hit, small result (inline row) | {spread(rounds['small_local'])} | {spread(rounds['small_team'])} | "
          f"{med['small_team'] / med['small_local']:,.1f}x | {within(rounds, 'small_team', 'small_local', 1)} |")
    print(f"| hit, {args.mb} MB result | {spread(rounds['big_local'])} | {spread(rounds['big_team'])} | "
          f"{med['big_team'] / med['big_local']:,.0f}x | {within(rounds, 'big_team', 'big_local', 0)} |")
    for n in (w, 1):
        lk, tk = f"procs{n}_local", f"procs{n}_team"
        who = f"{n} processes at once" if n > 1 else "1 process alone"
        print(f"| hits/s, {who}, small results ({args.keys} keys each, aggregate) | "
              f"{spread(rounds[lk], rate)} | {spread(rounds[tk], rate)} | {med[tk] / med[lk]:,.2f}x | "
              f"{within(rounds, tk, lk)} |")
    print()
    print(f"the {args.mb} MB team hit against raw boto3 GETs of the same object to a file (no verification):")
    print()
    print(f"| {args.mb} MB object | time | team hit / this (medians) | team hit / this within each round |")
    print("|---|---|---|---|")
    how = "ranged GETs" if b.ranged else "one GET (memolab's ranged GETs are off for a loopback endpoint)"
    print(f"| team hit (row from PostgreSQL, {how}, verify, fsync, keep, map) | {spread(rounds['big_team'])} | 1.00 "
          "| 1.00 |")
    print(f"| raw boto3, one GET | {spread(rounds['big_raw'])} | {med['big_team'] / med['big_raw']:.2f} | "
          f"{within(rounds, 'big_team', 'big_raw')} |")
    print(f"| raw boto3, ranged GETs ({b.concurrency} threads at once, memolab's part size) | "
          f"{spread(rounds['big_raw_ranged'])} | {med['big_team'] / med['big_raw_ranged']:.2f} | "
          f"{within(rounds, 'big_team', 'big_raw_ranged')} |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mb", type=int, default=100, help="size of the large result (default 100 MB)")
    ap.add_argument("--workers", type=int, default=8, help="concurrent processes (default 8)")
    ap.add_argument("--keys", type=int, default=200, help="small-result keys each process calls (default 200)")
    ap.add_argument("--pull-objects", type=int, default=16)
    ap.add_argument("--pull-mb", type=int, default=16)
    ap.add_argument("--only", choices=["all", "pull"], default="all",
                    help="'pull': only the pull vs raw GET rows (and the CLI pull row)")
    ap.add_argument("--json", help="also write every round's figures to this file (to pool several runs)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # no HMAC key here: the warning says so once per process

    servers = Servers()
    work = Path(tempfile.mkdtemp(prefix="memolab-team-bench-"))
    rounds: dict[str, list[float]] = {}
    try:
        b = Bench(args, servers, work)
        b.fill()
        for r in range(args.rounds):
            steps = [lambda: b.small_hits(min(args.keys, 100)), b.big_hit, lambda: b.concurrent(args.workers),
                     lambda: b.concurrent(1), lambda: {"pull": b.pull()}, lambda: {"raw": b.raw_get()},
                     lambda: {"raw_fsync": b.raw_get(fsync=True)},
                     lambda: {"pull_cli": b.pull_cli()}]
            if r % 2:  # pull and raw GET take turns going first
                steps[4], steps[5] = steps[5], steps[4]
            if args.only == "pull":
                steps = steps[4:]
            for step in steps:
                for k, v in step().items():
                    rounds.setdefault(k, []).append(v)
                # untimed: write back what the step deleted (256 MB of files, and on a disk mounted
                # with `discard`, their trims) before the next step, which else paid for it in its
                # fsyncs: each row starts from the same disk state, whichever ran before it
                os.sync()
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        memolab.configure(store=str(work / "idle"), remote=None, remote_blobs=None)
        servers.close()
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rounds.items()}
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(rounds))
    print(f"team store vs local store; PostgreSQL {servers.pg.bindir.parent.name} and moto S3 on loopback (no network "
          f"latency); {args.rounds} interleaved rounds, median (min–max over rounds);")
    print("a shared 2-core machine: other jobs ran meanwhile, and the servers share those 2 cores; read the spread")
    print()
    if args.only == "all":
        hits_tables(args, b, rounds, med)
    size = (f"{args.pull_objects} results x {args.pull_mb} MB ({b.pull_bytes / 1e6:,.0f} MB), concurrency "
            f"{b.concurrency} (threads: the same for pull and raw GET)")
    print("pulling: throughput, median (min–max) over rounds; the ratio to raw GET of the medians, and taken within "
          "each round")
    print()
    print(f"| pulling {size} | throughput | / raw GET (medians) | / raw GET within each round |")
    print("|---|---|---|---|")
    print(f"| raw boto3 GET of the same objects, to files (no verification, nothing recorded) | "
          f"{spread(rounds['raw'], mbps)} | 1.00 | 1.00 |")
    print(f"| raw boto3 GET as above, each file fsynced (the durability a pull gives its files) | "
          f"{spread(rounds['raw_fsync'], mbps)} | {med['raw_fsync'] / med['raw']:.2f} | "
          f"{within(rounds, 'raw_fsync', 'raw')} |")
    print("| `TeamStore.pull` (what `memolab pull` runs): query, GET, verify, fsync, record (rows, logs, code texts) | "
          f"{spread(rounds['pull'], mbps)} | "
          f"{med['pull'] / med['raw']:.2f} | {within(rounds, 'pull', 'raw')} |")
    print(f"| `memolab pull` as a command, wall time incl. interpreter start-up and imports (not the same work) | "
          f"{spread(rounds['pull_cli'], mbps)} | {med['pull_cli'] / med['raw']:.2f} | {within(rounds, 'pull_cli', 'raw')} |")
    print()
    # the same ratio taken within each round (pull and raw GET ran back to back): less exposed
    # to the load of other jobs drifting between rounds than the ratio of the two medians
    per_round = [p / r for p, r in zip(rounds["pull"], rounds["raw"], strict=False)]
    print(f"pull / raw GET: {med['pull'] / med['raw']:.0%} of the medians; within each round "
          f"{spread(per_round, lambda v: f'{v:.0%}')} (target >= 70%)")


if __name__ == "__main__":
    main()
