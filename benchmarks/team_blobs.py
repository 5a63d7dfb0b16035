"""Remote blob transfers: memolab's ``RemoteBlobs`` vs raw boto3, against an S3 server on loopback.

One run, side by side, same bucket, same concurrency (``--concurrency``, default
16 requests at once on both sides):

* **get, many objects**: ``--count`` objects of 1-10 MB (sizes cycle 1, 2, ... 10 MB).
  - raw boto3 ``get_object`` + ``Body.read()`` into memory on a thread pool
    (the ceiling: nothing written, nothing verified);
  - raw boto3 ``download_file`` (s3transfer) on a thread pool: written to files;
  - memolab ``get_many_to``: streamed to files, BLAKE3-verified while streaming,
    fsynced, renamed into place.
* **get, one large object** (``--big-mb``, default 100): raw ``get_object().read()``
  (one stream), raw ``download_file`` (s3transfer's ranged parallel GETs, 8 MB
  parts, same concurrency), memolab ``get_to`` (ranged parallel GETs, verified), and
  memolab ``get_to`` with ranged GETs off (one verified stream).
* **put, many objects / one large object**: raw ``put_object`` on a thread pool /
  raw ``upload_fileobj`` (s3transfer multipart, 8 MB parts) vs memolab
  ``put_many`` / ``put`` (conditional PUTs, multipart from a memoryview). Every
  round writes to fresh keys (a put of an existing digest is a no-op by design).

Rounds are interleaved (each round runs every method once, the order of raw and
memolab alternating); figures are the median with min–max over ``--rounds``
rounds, throughput in MB/s of payload; "memolab / raw" is the ratio of medians
against the best raw method of the same transfer. One warm-up round is not counted.

The server is ``moto.server`` (Python, one process) on 127.0.0.1, started here:
it is the bottleneck, as a real S3 endpoint's network would be, so the ratios
say how much memolab adds on top of a client's own cost, not S3's real speed.
The machine is shared (2 cores, other jobs running): figures are noisy.

    python benchmarks/team_blobs.py [--rounds 5] [--count 24] [--big-mb 100] [--concurrency 16]
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

MB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--big-mb", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--dir", default=None, help="where downloaded files go (default: a temp dir)")
    a = ap.parse_args()

    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config

    from memolab.store.blobs import digest_bytes
    from memolab.team.blobs import open_blobs
    from servers.s3 import S3Server

    server = S3Server()
    server.start()
    os.environ.update(server.env)
    bucket = server.make_bucket()
    raw = boto3.session.Session().client("s3", config=Config(max_pool_connections=a.concurrency + 2))
    tc = TransferConfig(multipart_threshold=16 * MB, multipart_chunksize=8 * MB,
                        max_concurrency=a.concurrency, use_threads=True)
    pool = ThreadPoolExecutor(a.concurrency)
    out_dir = Path(tempfile.mkdtemp(prefix="memolab-bench-", dir=a.dir))

    many = [os.urandom(MB) * (1 + i % 10) for i in range(a.count)]
    # distinct contents per object: urandom blocks repeated, a counter in front
    many = [i.to_bytes(8, "little") + x[8:] for i, x in enumerate(many)]
    big = os.urandom(MB) * a.big_mb
    many_mb = sum(len(x) for x in many) / MB
    big_mb = len(big) / MB
    many_d = [digest_bytes(x) for x in many]
    big_d = digest_bytes(big)

    # the objects every get reads: put once by memolab (same keys for the raw readers)
    rb = open_blobs(f"s3://{bucket}/get", concurrency=a.concurrency, ranged_gets=True)
    rb1 = open_blobs(f"s3://{bucket}/get", concurrency=a.concurrency)  # auto: one stream on loopback
    rb.put_many(list(zip(many_d, many, strict=False)))
    rb.put(big_d, big)
    many_keys = [rb._key(d) for d in many_d]
    big_key = rb._key(big_d)

    def clean() -> None:
        shutil.rmtree(out_dir)
        out_dir.mkdir()

    def raw_read(key: str) -> int:
        return len(raw.get_object(Bucket=bucket, Key=key)["Body"].read())

    def raw_download(key: str) -> None:
        raw.download_file(bucket, key, str(out_dir / key.rsplit("/", 1)[-1]), Config=tc)

    counter = {"round": 0}

    def fresh_prefix(kind: str) -> str:
        return f"{kind}-{counter['round']}-{time.time_ns()}"

    def raw_put_many() -> None:
        p = fresh_prefix("rawput")
        list(pool.map(lambda kd: raw.put_object(Bucket=bucket, Key=f"{p}/{kd[0]}", Body=kd[1]), zip(many_d, many, strict=False)))

    def raw_put_big() -> None:
        raw.upload_fileobj(io.BytesIO(big), bucket, f"{fresh_prefix('rawput')}/{big_d}", Config=tc)

    # one long-lived store, as the team layer keeps (client creation is not a transfer cost);
    # its keys are fresh every round because each round ends by deleting what it put
    rput = open_blobs(f"s3://{bucket}/put", concurrency=a.concurrency)

    def mem_put_many() -> None:
        assert all(rput.put_many(list(zip(many_d, many, strict=False))))

    def mem_put_big() -> None:
        assert rput.put(big_d, memoryview(big))

    cases: dict[str, dict[str, Callable[[], None]]] = {
        f"get {a.count} objects of 1-10 MB ({many_mb:.0f} MB)": {
            "raw boto3 get_object().read() (memory)": lambda: list(pool.map(raw_read, many_keys)) and None,
            "raw boto3 download_file (files)": lambda: list(pool.map(raw_download, many_keys)) and None,
            "memolab get_many_to (files, verified)": lambda: rb.get_many_to(
                [(d, len(x), out_dir / d) for d, x in zip(many_d, many, strict=False)]),
        },
        f"get one {big_mb:.0f} MB object": {
            "raw boto3 get_object().read() (memory)": lambda: raw_read(big_key) and None,
            "raw boto3 download_file (ranged, file)": lambda: raw_download(big_key),
            "memolab get_to (ranged GETs forced, file, verified)": lambda: rb.get_to(big_d, len(big), out_dir / "big"),
            "memolab get_to (default on loopback: one stream, file, verified)":
                lambda: rb1.get_to(big_d, len(big), out_dir / "big"),
        },
        f"put {a.count} objects of 1-10 MB ({many_mb:.0f} MB)": {
            "raw boto3 put_object": raw_put_many,
            "memolab put_many (conditional)": mem_put_many,
        },
        f"put one {big_mb:.0f} MB object": {
            "raw boto3 upload_fileobj (multipart)": raw_put_big,
            "memolab put (conditional multipart, memoryview)": mem_put_big,
        },
    }
    sizes = {name: (many_mb if "objects" in name else big_mb) for name in cases}
    times: dict[str, dict[str, list[float]]] = {c: {m: [] for m in ms} for c, ms in cases.items()}

    for rnd in range(a.rounds + 1):  # round 0: warm-up, not counted
        counter["round"] = rnd
        for case, methods in cases.items():
            names = list(methods)
            if rnd % 2:
                names.reverse()
            for m in names:
                clean()
                t = time.perf_counter()
                methods[m]()
                dt = time.perf_counter() - t
                if rnd:
                    times[case][m].append(dt)
        # drop what this round uploaded: moto keeps everything in memory
        for page in raw.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", ()) if not o["Key"].startswith("get/")]
            if keys:
                raw.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        print(f"round {rnd}/{a.rounds} done", file=sys.stderr)

    clean()
    server.stop()
    print(f"S3 transfers against moto.server on 127.0.0.1, concurrency {a.concurrency}, "
          f"{a.rounds} interleaved rounds (shared 2-core machine: noisy); MB/s median (min–max)")
    print()
    print("| transfer | method | MB/s | memolab / best raw | memolab / each raw |")
    print("|---|---|---|---|---|")
    for case, per in times.items():
        mbps = {m: [sizes[case] / t for t in ts] for m, ts in per.items()}
        raws = {m: statistics.median(v) for m, v in mbps.items() if m.startswith("raw")}
        best_raw = max(raws.values())
        for m, v in mbps.items():
            med = statistics.median(v)
            ratio = f"{med / best_raw:.0%}" if m.startswith("memolab") else ""
            each = " / ".join(f"{med / r:.0%}" for r in raws.values()) if m.startswith("memolab") else ""
            print(f"| {case} | {m} | {med:,.0f} ({min(v):,.0f}–{max(v):,.0f}) | {ratio} | {each} |")
    shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
