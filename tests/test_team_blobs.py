"""Remote blobs (team/blobs.py) against a real moto S3 server and file:// directories.

Each test runs on both backends (``remote`` fixture): the same rules hold on a
bucket and on a shared directory. The S3 tests talk HTTP to ``moto.server`` in
a subprocess (tests/servers/s3.py), through the same client code a real bucket gets.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import require
from memolab.errors import CorruptBlob, RemoteUnavailable, StoreConfigError, StoreMiss
from memolab.store.blobs import digest_bytes
from memolab.team import blobs as tb
from memolab.team.blobs import MissingBlob, open_blobs
from test_team_layer import HEALTHY  # a healthy team store is waited on, not timed


def _remote(request, tmp_path):
    """(RemoteBlobs, tamper(digest, new_bytes) that rewrites an object behind its back).

    ``s3`` is the default client (on loopback: one stream per get), ``s3-ranged``
    forces the parallel ranged GETs a remote endpoint gets."""
    if request.param.startswith("s3"):
        url = request.getfixturevalue("s3_bucket")
        server = request.getfixturevalue("s3_server")
        rb = open_blobs(url, ranged_gets=True if request.param == "s3-ranged" else None)
        raw = server.client()

        def tamper(digest: str, data: bytes) -> None:
            raw.put_object(Bucket=rb.bucket, Key=rb._key(digest), Body=data)

        yield rb, tamper
        rb.close()
    else:
        root = tmp_path / "team-blobs"
        root.mkdir()
        rb = open_blobs(root.as_uri())

        def tamper(digest: str, data: bytes) -> None:
            p = root / tb.blob_key(digest)
            os.chmod(p, 0o644)
            p.write_bytes(data)

        yield rb, tamper


remote = pytest.fixture(params=["s3", "file"])(_remote)
#: for the tests of large objects: also S3 with the parallel ranged GETs of a remote endpoint
remote_big = pytest.fixture(params=["s3", "s3-ranged", "file"])(_remote)


def blob(n: int, seed: int = 0) -> bytes:
    return (seed.to_bytes(4, "little") + os.urandom(16)) * (n // 20) + b"x" * (n % 20)


def test_round_trip_small_and_empty(remote, tmp_path):
    rb, _ = remote
    for data in (b"hello team", b""):
        d = digest_bytes(data)
        assert rb.put(d, data) is True
        assert rb.put(d, data) is False  # idempotent
        assert bytes(rb.get(d, len(data))) == data
        out = tmp_path / f"out-{len(data)}"
        rb.get_to(d, len(data), out)
        assert out.read_bytes() == data
        assert rb.exists(d)
        assert rb.size(d) == len(data)
    assert rb.size(digest_bytes(b"absent")) is None


def test_large_round_trip_multipart_and_ranged(remote_big, request, tmp_path):
    """20 MB crosses MULTIPART_MIN: multipart put from a memoryview and from a file,
    ranged parallel gets (to memory and streamed to a file), all verified."""
    rb, _ = remote_big
    assert 20 << 20 >= tb.MULTIPART_MIN
    if "s3" in request.node.callspec.id:  # on loopback, one stream unless forced
        assert rb.ranged is ("ranged" in request.node.callspec.id)
    data = blob(20 << 20, 1) + b"tail"  # not a multiple of the part size
    d = digest_bytes(data)
    assert rb.put(d, memoryview(data)) is True
    out = tmp_path / "big.out"
    rb.get_to(d, len(data), out)
    assert digest_bytes(out.read_bytes()) == d
    assert out.stat().st_mode & 0o777 == 0o444  # read-only, as the local store's blobs
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("download.")]  # no litter
    assert digest_bytes(rb.get(d, len(data))) == d
    # the same size again from a file
    data2 = blob(20 << 20, 2)
    src = tmp_path / "src.bin"
    src.write_bytes(data2)
    d2 = digest_bytes(data2)
    assert rb.put(d2, src) is True
    assert rb.put(d2, src) is False
    rb.get_to(d2, len(data2), out)  # replaces the file there
    assert digest_bytes(out.read_bytes()) == d2


def test_get_to_through_a_tmp_dir_publishes_only_verified_bytes(remote_big, tmp_path):
    """``tmp_dir``: the download is written there and renamed onto its final name only once
    verified (how a pull lands a blob straight in the blob folder); a corrupt object leaves
    nothing, neither under the final name nor in ``tmp_dir``."""
    rb, tamper = remote_big
    tmp, final_dir = tmp_path / "tmp", tmp_path / "blobs" / "ab"
    tmp.mkdir()
    final_dir.mkdir(parents=True)
    data = blob(17 << 20, 7)  # large: the ranged path too
    d = digest_bytes(data)
    rb.put(d, data)
    rb.get_many_to([(d, len(data), final_dir / "good")], tmp_dir=tmp, sync_dir=False)
    assert digest_bytes((final_dir / "good").read_bytes()) == d
    assert list(tmp.iterdir()) == [] and [p.name for p in final_dir.iterdir()] == ["good"]
    bad = bytearray(data)
    bad[len(bad) // 3] ^= 1
    tamper(d, bytes(bad))
    with pytest.raises(CorruptBlob):
        rb.get_to(d, len(data), final_dir / "bad", tmp_dir=tmp, sync_dir=False)
    assert list(tmp.iterdir()) == [] and [p.name for p in final_dir.iterdir()] == ["good"]


def test_digest_mismatch_is_corrupt_and_leaves_no_file(remote_big, tmp_path):
    rb, tamper = remote_big
    small, big = b"the real bytes" * 10, blob(17 << 20, 3)
    for data in (small, big):
        d = digest_bytes(data)
        rb.put(d, data)
        bad = bytearray(data)
        bad[len(bad) // 2] ^= 1
        tamper(d, bytes(bad))
        with pytest.raises(CorruptBlob, match="does not match"):
            rb.get(d, len(data))
        out = tmp_path / "x.out"
        with pytest.raises(CorruptBlob):
            rb.get_to(d, len(data), out)
        assert not out.exists()
        assert not list(tmp_path.glob("download.*"))
    # a truncated and an extended object: wrong size, caught too
    d = digest_bytes(small)
    for wrong in (small[:-1], small + b"!"):
        tamper(d, wrong)
        with pytest.raises(CorruptBlob):
            rb.get(d, len(small))
        with pytest.raises(CorruptBlob):
            rb.get_to(d, len(small), tmp_path / "y.out")
    d = digest_bytes(big)
    # longer than expected (ranged reads must notice), and shorter: a range past the end
    for wrong in (big + b"!", big[:9 << 20]):
        tamper(d, wrong)
        with pytest.raises(CorruptBlob):
            rb.get_to(d, len(big), tmp_path / "z.out")
        with pytest.raises(CorruptBlob):
            rb.get(d, len(big))
    assert not (tmp_path / "z.out").exists()


def test_missing_blob(remote, tmp_path):
    rb, _ = remote
    d = digest_bytes(b"never stored")
    with pytest.raises(MissingBlob):
        rb.get(d, 12)
    with pytest.raises(StoreMiss):
        rb.get_to(d, 12, tmp_path / "m")
    assert not (tmp_path / "m").exists()
    assert rb.exists(d) is False


def test_put_never_rewrites_even_changed_content(remote):
    """An object under the key is never overwritten, whatever it holds (our put returns False)."""
    rb, tamper = remote
    data = b"original"
    d = digest_bytes(data)
    assert rb.put(d, data)
    tamper(d, b"changed behind our back")
    assert rb.put(d, data) is False
    assert rb.put_many([(d, data)]) == [False]
    with pytest.raises(CorruptBlob):
        rb.get(d, len(data))  # still the changed bytes: ours did not overwrite them
    rb.delete([d])  # the repair: delete, then put again
    assert rb.put(d, data) is True
    assert rb.get(d, len(data)) == data


def test_batches_exists_list_delete(remote, tmp_path):
    rb, _ = remote
    datas = [blob(1000 + i, i) for i in range(40)]
    ds = [digest_bytes(x) for x in datas]
    assert rb.put_many(list(zip(ds, datas, strict=False))) == [True] * 40
    assert rb.put_many(list(zip(ds, datas, strict=False))) == [False] * 40
    absent = [digest_bytes(b"absent %d" % i) for i in range(5)]
    assert rb.exists_many(ds + absent) == set(ds)
    # a shard asked for many digests is listed instead of HEAD-ed: same answer
    same_shard = [ds[0]] + [ds[0][:2] + os.urandom(31).hex() for _ in range(20)]
    assert rb.exists_many(same_shard) == {ds[0]}
    listed = {d: (size, mtime) for d, size, mtime in rb.list()}
    assert set(listed) == set(ds)
    assert all(listed[d][0] == len(x) for d, x in zip(ds, datas, strict=False))
    assert all(abs(listed[d][1] - time.time()) < 3600 for d in ds)
    rb.get_many_to([(d, len(x), tmp_path / d) for d, x in zip(ds, datas, strict=False)])
    assert all((tmp_path / d).read_bytes() == x for d, x in zip(ds, datas, strict=False))
    rb.delete(ds[:30] + absent)
    assert {d for d, _, _ in rb.list()} == set(ds[30:])
    assert rb.exists_many(ds) == set(ds[30:])


def test_get_many_reports_a_corrupt_one_after_the_rest(remote, tmp_path):
    rb, tamper = remote
    datas = [b"blob %d" % i * 50 for i in range(6)]
    ds = [digest_bytes(x) for x in datas]
    rb.put_many(list(zip(ds, datas, strict=False)))
    tamper(ds[2], b"evil")
    with pytest.raises(CorruptBlob):
        rb.get_many_to([(d, len(x), tmp_path / d) for d, x in zip(ds, datas, strict=False)])
    assert not (tmp_path / ds[2]).exists()
    assert all((tmp_path / d).read_bytes() == x for i, (d, x) in enumerate(zip(ds, datas, strict=False)) if i != 2)


CONCURRENT_PUT = """
import sys
from memolab.team.blobs import open_blobs
data = bytes.fromhex(sys.argv[2]) * 5000
print(open_blobs(sys.argv[1]).put(sys.argv[3], data))
"""


def test_concurrent_puts_of_one_digest_from_processes(remote):
    """Three processes put the same digest at once: exactly one writes; all succeed."""
    rb, _ = remote
    unit = b"concurrent"
    data = unit * 5000
    d = digest_bytes(data)
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_PUT, rb.url, unit.hex(), d],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(outs) == ["False", "False", "True"]
    assert rb.get(d, len(data)) == data


def test_server_stopped_is_remote_unavailable(s3_bucket, s3_server, tmp_path, monkeypatch):
    # HEALTHY: the put and ping before the stop must not time out on a loaded machine; after it
    # every request is refused at once (the timeout is not what ends them)
    monkeypatch.setenv("MEMOLAB_REMOTE_TIMEOUT", HEALTHY)
    rb = open_blobs(s3_bucket)
    data = b"before the outage"
    d = digest_bytes(data)
    rb.put(d, data)
    rb.ping()
    s3_server.stop()
    try:
        for op in (lambda: rb.ping(0.5), lambda: rb.get(d, len(data)), lambda: rb.put(d, data),
                   lambda: rb.exists_many([d]), lambda: list(rb.list()), lambda: rb.delete([d]),
                   lambda: rb.put_many([(digest_bytes(b"%d" % i), b"%d" % i) for i in range(200)]),
                   lambda: rb.get_to(d, len(data), tmp_path / "o")):
            with pytest.raises(RemoteUnavailable, match=s3_bucket.split("/")[2]):
                op()
        assert not (tmp_path / "o").exists()
    finally:
        s3_server.start()  # empty again: moto keeps state in memory


def count_attempts(rb) -> dict:
    """Count the HTTP requests ``rb``'s clients send (every attempt, retries included)."""
    sent = {"n": 0}

    def on_send(**kw):
        sent["n"] += 1

    for kind in ("main", "ping"):
        rb._client(kind, rb.timeout if kind == "ping" else None).meta.events.register("before-send.s3", on_send)
    return sent


def test_unreachable_endpoint_fails_without_a_retry_storm(monkeypatch):
    """Nothing listens there: RemoteUnavailable after at most one retry per request, and a
    batch of 100 stops at its first failures instead of trying every item (counted, not timed)."""
    from servers.s3 import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    for k, v in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "y"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    rb = open_blobs("s3://nobucket/p", timeout=0.5, concurrency=4)
    sent = count_attempts(rb)
    with pytest.raises(RemoteUnavailable, match="s3://nobucket/p"):
        rb.put_many([(digest_bytes(b"%d" % i), b"%d" % i) for i in range(100)])
    assert 1 <= sent["n"] <= 2 * 4 * 2  # workers x attempts, x2 for items already taken when the first failed
    sent["n"] = 0
    with pytest.raises(RemoteUnavailable):
        rb.ping()
    assert sent["n"] == 1  # ping: no retry


def test_frozen_server_times_out(s3_bucket, s3_server, tmp_path):
    """A server that accepts connections but never answers (SIGSTOP: a hung host) costs the
    read timeout, then RemoteUnavailable: never a hang."""
    rb = open_blobs(s3_bucket, timeout=0.5)
    data = b"x" * 1000
    d = digest_bytes(data)
    # put by a client that waits HEALTHY: before the freeze the server is healthy, however loaded
    open_blobs(s3_bucket, timeout=float(HEALTHY)).put(d, data)
    sent = count_attempts(rb)
    s3_server.freeze()
    try:
        with pytest.raises(RemoteUnavailable, match="timeout|timed out"):
            rb.ping()
        with pytest.raises(RemoteUnavailable):
            rb.get_to(d, len(data), tmp_path / "o")
        assert sent["n"] <= 3  # ping once, get twice (one retry)
    finally:
        s3_server.thaw()
    assert not (tmp_path / "o").exists()
    assert rb.get(d, len(data)) == data  # back: the same client works again


def test_missing_bucket_is_unavailable(s3_env):
    rb = open_blobs("s3://no-such-bucket-here/x")
    with pytest.raises(RemoteUnavailable, match="bucket does not exist|NoSuchBucket"):
        rb.ping()
    with pytest.raises(RemoteUnavailable):
        rb.put(digest_bytes(b"a"), b"a")


def test_no_credentials_is_unavailable(s3_env, monkeypatch, tmp_path):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(RemoteUnavailable, match="no AWS credentials"):
        open_blobs("s3://any-bucket/x").ping()


def test_file_store_must_exist(tmp_path):
    rb = open_blobs((tmp_path / "not-mounted").as_uri())
    with pytest.raises(RemoteUnavailable, match="not a directory"):
        rb.ping()
    with pytest.raises(RemoteUnavailable):
        rb.put(digest_bytes(b"a"), b"a")
    assert not (tmp_path / "not-mounted").exists()


def test_fsspec_memory_scheme(tmp_path):
    require("fsspec")
    rb = open_blobs("memory://memolab-test-blobs")
    data = b"through fsspec"
    d = digest_bytes(data)
    assert rb.put(d, data) is True and rb.put(d, data) is False
    assert rb.get(d, len(data)) == data
    rb.get_to(d, len(data), tmp_path / "o")
    assert (tmp_path / "o").read_bytes() == data
    assert [x[0] for x in rb.list()] == [d]
    assert rb.size(d) == len(data) and rb.size(digest_bytes(b"no")) is None
    rb.delete([d])
    assert rb.exists_many([d]) == set()
    rb.ping()


def test_open_blobs_urls():
    with pytest.raises(StoreConfigError):
        open_blobs("/just/a/path")
    with pytest.raises(StoreConfigError):
        open_blobs("s3:///noprefix")
    rb = open_blobs("s3://bucket/some/prefix/")
    assert (rb.bucket, rb._key("ab" + "0" * 62)) == ("bucket", "some/prefix/blobs/ab/ab" + "0" * 62)
    assert open_blobs("s3://bucket")._key("cd" * 32) == "blobs/cd/" + "cd" * 32


def test_no_boto3_at_import():
    out = subprocess.run([sys.executable, "-c", "import sys, memolab, memolab.team.blobs; "
                          "print(any(m.split('.')[0] in ('boto3', 'botocore', 'fsspec') for m in sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_streamed_gets_reuse_the_connection(s3_bucket, tmp_path):
    """get_to reads the HTTP response itself (readinto): it must still hand the
    connection back to the pool, or every blob would cost a new connection (a TLS
    handshake on a real endpoint)."""
    rb = open_blobs(s3_bucket, concurrency=1)
    datas = [os.urandom(100_000 + i) for i in range(6)]
    ds = [digest_bytes(x) for x in datas]
    rb.put_many(list(zip(ds, datas, strict=False)))
    pools = rb._client()._endpoint.http_session._manager.pools
    rb.get_many_to([(d, len(x), tmp_path / d) for d, x in zip(ds, datas, strict=False)])
    for d, x in zip(ds, datas, strict=False):
        assert rb.get(d, len(x)) == x
    assert sum(p.num_connections for p in pools._container.values()) == 1


def test_run_all_semantics():
    """Results in order; other errors let the rest finish (then the first is raised);
    RemoteUnavailable stops the batch. The same with one worker as with many."""
    for workers in (1, 4):
        assert tb.run_all(lambda x: x * 2, list(range(50)), workers) == [x * 2 for x in range(50)]
        done = []

        def corrupt_at_3(x, done=done):
            if x == 3:
                raise CorruptBlob("bad")
            done.append(x)

        with pytest.raises(CorruptBlob):
            tb.run_all(corrupt_at_3, list(range(20)), workers)
        assert sorted(done) == [x for x in range(20) if x != 3]
        done.clear()

        def down(x, done=done):
            done.append(x)
            raise RemoteUnavailable("down")

        with pytest.raises(RemoteUnavailable):
            tb.run_all(down, list(range(100)), workers)
        assert len(done) <= workers


def test_connection_dropped_mid_body_is_unavailable(monkeypatch, tmp_path):
    """A server that announces a body and hangs up halfway: RemoteUnavailable (the network),
    not an http.client/urllib3 exception escaping, and no file left behind."""
    import http.server
    import threading

    class HalfBody(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"x" * 1000)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HalfBody)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{srv.server_address[1]}")
        for k, v in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "y"), ("AWS_DEFAULT_REGION", "us-east-1")):
            monkeypatch.setenv(k, v)
        rb = open_blobs("s3://half/p", timeout=1)
        d = digest_bytes(b"whatever")
        with pytest.raises(RemoteUnavailable):
            rb.get_to(d, 100000, tmp_path / "o")
        with pytest.raises(RemoteUnavailable):
            rb.get(d, 100000)
        assert list(tmp_path.iterdir()) == []
    finally:
        srv.shutdown()
        srv.server_close()
