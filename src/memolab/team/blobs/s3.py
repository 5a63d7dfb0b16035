"""The S3-protocol backend of ``team.blobs`` (``s3://bucket/prefix``), on boto3.

boto3/botocore are imported when the first client is made, never at ``import
memolab`` nor at ``import memolab.team.blobs``. The rules (verified gets,
conditional never-rewriting puts, quick ``RemoteUnavailable``) are in
``team/blobs/__init__.py``; what is S3-specific is here: the client configuration,
multipart uploads, ranged GETs hashed in order while they arrive, listing and
batched deletes.
"""
from __future__ import annotations

import builtins
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...errors import CorruptBlob, RemoteUnavailable, StoreConfigError, swallowed
from .common import (
    CHUNK,
    DIGEST_RE,
    MULTIPART_MIN,
    PART_SIZE,
    Data,
    MissingBlob,
    RemoteBlobs,
    Source as _Source,
    blob_key,
    check_bytes as _check,
    finish as _finish,
    new_hasher as _hasher,
    run_all,
    tmp_beside as _tmp_beside,
    unlink_quietly as _unlink,
    write_all,
)

_UNAVAILABLE_CODES = {"NoSuchBucket": "the bucket does not exist",
                      "AccessDenied": "access denied",
                      "InvalidAccessKeyId": "unknown access key",
                      "SignatureDoesNotMatch": "wrong secret key",
                      "ExpiredToken": "expired credentials"}


#: what a caller waits for (a team hit's download): the ``read`` client's bounded single attempt
_CALLER_OPS = frozenset(("get_object", "head_object"))

#: S3's "busy now, ask again" (503 SlowDown is its normal throttling signal; a 500 is transient
#: by S3's own documentation): retried with jittered back-off within the timeout, never an outage
_BUSY_CODES = frozenset(("SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                         "ThrottlingException", "RequestLimitExceeded"))
_BUSY_STATUS = frozenset((500, 503))
#: the first back-off (doubling, full jitter: each sleep uniform in [0, step]) and its ceiling
BUSY_FIRST, BUSY_MAX = 0.05, 1.0


def _busy(e: BaseException) -> bool:
    from botocore.exceptions import ClientError

    if not isinstance(e, ClientError):
        return False
    code = str(e.response.get("Error", {}).get("Code", ""))
    return code in _BUSY_CODES or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in _BUSY_STATUS


class _PastTheEnd(CorruptBlob):
    """A ranged GET starting past the object's end (416 InvalidRange): the object is shorter
    than its recorded size (a corrupt blob), or, asked on purpose, exactly as long."""


class S3Blobs(RemoteBlobs):
    """Blobs in an S3-protocol bucket through one thread-safe boto3 client.

    Clients: what a caller waits for (``get_object``/``head_object``, the ``read`` client) and
    ``ping`` get ONE attempt with connect and read timeouts of half of ``timeout`` each: a
    silent server costs at most ``timeout`` (``MEMOLAB_REMOTE_TIMEOUT``), not a retry's
    double plus its back-off. Uploads and maintenance (``main``, the background's) get
    connect and read timeouts of ``timeout`` seconds and at most one retry;
    a connection pool as large as the concurrency (every request holds one of
    ``concurrency`` slots, so nested part transfers never over-subscribe it).
    Responses are not checksum-validated by botocore (``when_required``): each
    get is verified against its BLAKE3 digest anyway. Request checksums stay
    botocore's default (CRC32 of what is uploaded, checked by the server)."""

    def __init__(self, url: str, bucket: str, prefix: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}
        self._slots = threading.BoundedSemaphore(self.concurrency)

    # -- plumbing
    def _key(self, digest: str) -> str:
        return f"{self.prefix}/{blob_key(digest)}" if self.prefix else blob_key(digest)

    def _client(self, kind: str = "main", timeout: float | None = None) -> Any:
        """``main``: uploads, listing, deleting (background and maintenance); ``read``: what a
        caller waits for; ``slow``: a long read timeout (completing a multipart upload takes
        the server a while); ``ping``: like ``read``, with the caller's timeout."""
        name = f"{kind}:{timeout}"
        c = self._clients.get(name)
        if c is not None:
            return c
        with self._lock:  # creating clients is not thread-safe; using one is
            c = self._clients.get(name)
            if c is None:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError as e:
                    raise StoreConfigError(f"{self.url}: s3:// needs boto3 (pip install 'memolab[team]')") from e
                t = self.timeout if timeout is None else timeout
                once = kind in ("ping", "read")  # a caller waits: one attempt, connect + read <= t
                connect = t / 2 if once else t
                read = t / 2 if once else t if kind != "slow" else max(60.0, 10 * t)
                cfg = Config(connect_timeout=connect, read_timeout=read,
                             retries={"mode": "standard", "total_max_attempts": 1 if once else 2},
                             max_pool_connections=self.concurrency + 2,
                             response_checksum_validation="when_required",
                             user_agent_extra="memolab")
                c = boto3.session.Session().client("s3", config=cfg)
                self._clients[name] = c
        return c

    def _fail(self, e: BaseException, what: str, digest: str | None = None) -> BaseException:
        """The memolab error for a boto3/botocore/network failure."""
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if digest is not None and (code in ("NoSuchKey", "404", "NotFound") or status == 404):
                return MissingBlob(f"remote blob {digest[:12]} is missing from {self.url}")
            if digest is not None and (code == "InvalidRange" or status == 416):
                return _PastTheEnd(f"remote blob {digest[:12]} is shorter than its recorded size")
            if code in ("404", "NotFound") or status == 404:
                code = "NoSuchBucket"  # a HEAD has no body to say so: only a key or the bucket can be absent
            why = _UNAVAILABLE_CODES.get(code) or f"{code or status}: {err.get('Message', '')}".strip()
            return RemoteUnavailable(f"team blob store {self.url} ({what}): {why}")
        if getattr(e, "memolab_local", False):
            return e  # reading the local file being uploaded failed: not a network problem
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError

        if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
            return RemoteUnavailable(f"team blob store {self.url} ({what}): no AWS credentials "
                                     f"(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a role): {e}")
        import http.client

        from urllib3.exceptions import HTTPError as URLLib3Error

        # a connection dropped mid-body surfaces as http.client's IncompleteRead or urllib3's
        # ProtocolError on the streaming paths: the network, as much as a refused connection
        if isinstance(e, (BotoCoreError, OSError, http.client.HTTPException, URLLib3Error)):
            return RemoteUnavailable(f"team blob store {self.url} unreachable ({what}): {e!r}")
        return e

    def _call(self, op: str, digest: str | None = None, kind: str = "main",
              timeout: float | None = None, **kw: Any) -> Any:
        """``op`` on the bucket. Throttled or a transient server error (``_busy``): asked again
        after a jittered, doubling back-off, for at most the timeout (``MEMOLAB_REMOTE_TIMEOUT``)
        from the first try; only then ``RemoteUnavailable`` (the team store is marked down, and
        the uploader's probe brings it back). A slot is not held while backing off."""
        if kind == "main" and op in _CALLER_OPS:
            kind = "read"
        try:
            call = getattr(self._client(kind, timeout), op)  # (made first: importing boto3 is no request)
        except Exception as e:  # boto3/botocore raise errors of many kinds: _fail classifies, then it is raised
            err = self._fail(e, op, digest)
            if err is e:
                raise
            raise err from e
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        step, tries = BUSY_FIRST, 0
        while True:
            tries += 1
            with self._slots:
                try:
                    return call(Bucket=self.bucket, **kw)
                except Exception as e:  # boto3/botocore/urllib3 errors of many kinds: _busy and _fail classify, then it is raised
                    busy = _busy(e)
                    if not busy or time.monotonic() + step > deadline:
                        err = self._fail(e, op, digest)
                        if err is e:
                            raise
                        if busy:
                            err = RemoteUnavailable(f"{err} (still busy after {tries} tries)")
                        raise err from e
            import random

            time.sleep(random.uniform(0, step))  # full jitter: throttled clients do not retry in step
            step = min(step * 2, BUSY_MAX)
            body: Any = kw.get("Body")
            if hasattr(body, "seek"):
                body.seek(0)  # the next try sends the body again

    @staticmethod
    def _condition(e: BaseException | None) -> str | None:
        """'exists' for a failed If-None-Match (412: the object is there), 'conflict' for
        S3's 409 ConditionalRequestConflict (another conditional write of the key is in
        flight: it may yet fail, so ask again), else None."""
        from botocore.exceptions import ClientError

        if not isinstance(e, ClientError):
            return None
        code = e.response.get("Error", {}).get("Code")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "PreconditionFailed" or status == 412:
            return "exists"
        if code == "ConditionalRequestConflict" or status == 409:
            return "conflict"
        return None

    def _conditional(self, op: str, **kw: Any) -> bool:
        """``op`` with ``IfNoneMatch='*'``: True if it wrote, False if the key exists."""
        for attempt in range(5):
            try:
                self._call(op, IfNoneMatch="*", **kw)
                return True
            except RemoteUnavailable as e:
                why = self._condition(e.__cause__)
                if why == "exists":
                    return False
                if why != "conflict" or attempt == 4:
                    raise
                time.sleep(0.05 * 2 ** attempt)  # the other writer finishes (or fails) meanwhile
            finally:
                body = kw.get("Body")
                if hasattr(body, "seek"):
                    body.seek(0)  # type: ignore[union-attr]  # a retry sends the body again
        return False  # not reached

    # -- put
    def put(self, digest: str, data: Data) -> bool:
        src = _Source(data)
        if src.size >= MULTIPART_MIN:
            if self.exists(digest):  # one HEAD saves uploading 100 MB for nothing
                return False
            return self._put_multipart(digest, src)
        body = src.small_body()
        try:
            return self._conditional("put_object", Key=self._key(digest), Body=body)
        finally:
            if hasattr(body, "close"):
                body.close()

    def _put_multipart(self, digest: str, src: _Source) -> bool:
        key = self._key(digest)
        part = max(PART_SIZE, -(-src.size // 9000))  # S3 allows 10,000 parts
        spans = [(i + 1, off, min(part, src.size - off)) for i, off in enumerate(range(0, src.size, part))]
        upload_id = self._call("create_multipart_upload", Key=key)["UploadId"]
        done = False
        try:
            def one(span: tuple[int, int, int]) -> dict[str, Any]:
                num, off, n = span
                w = src.window(off, n)
                try:
                    r = self._call("upload_part", Key=key, UploadId=upload_id, PartNumber=num,
                                   Body=w, ContentLength=n)
                finally:
                    w.close()
                entry = {"PartNumber": num, "ETag": r["ETag"]}
                entry.update({k: v for k, v in r.items() if k.startswith("Checksum") and k != "ChecksumType"})
                return entry

            parts = run_all(one, spans, self.concurrency)
            # False: written by someone else meanwhile; theirs stays, ours is aborted below
            done = self._conditional("complete_multipart_upload", kind="slow", Key=key, UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})
            return done
        finally:
            if not done:
                try:
                    self._call("abort_multipart_upload", Key=key, UploadId=upload_id)
                except Exception:  # boto3/botocore errors of many kinds
                    swallowed("team.blobs.s3: S3Blobs._put_multipart")  # best effort: a lifecycle rule reaps abandoned uploads

    # -- get
    def _ranges(self, size: int) -> builtins.list[tuple[int, int]]:
        return [(off, min(PART_SIZE, size - off)) for off in range(0, size, PART_SIZE)]

    def _read_range(self, digest: str, off: int, n: int, sink: Callable[[int, Any], None]) -> int:
        """GET bytes ``off..off+n`` of ``digest``, handing each chunk to ``sink(offset, chunk)``."""
        r = self._call("get_object", digest, Key=self._key(digest), Range=f"bytes={off}-{off + n - 1}")
        self._announced(r, digest, n, f" at offset {off}")
        return self._drain(r["Body"], digest, off, n, sink, r.get("ContentLength"))

    def _announced(self, r: dict[str, Any], digest: str, n: int, where: str = "") -> None:
        """A response announcing another length than ``n`` is a wrong-sized object: corrupt,
        known before reading a byte (a short read later is the network's doing instead)."""
        cl = r.get("ContentLength")
        if cl is not None and int(cl) != n:
            r["Body"].close()
            raise CorruptBlob(f"remote blob {digest[:12]} has {cl} bytes{where}, expected {n}")

    def _cut(self, digest: str, got: int, announced: int | None) -> None:
        if announced is not None and got < int(announced):
            raise RemoteUnavailable(f"team blob store {self.url}: connection closed after {got} of "
                                    f"{announced} bytes of blob {digest[:12]}")

    def _drain(self, body: Any, digest: str, off: int, limit: int, sink: Callable[[int, Any], None],
               announced: int | None = None) -> int:
        """Read ``body`` to its end (or past ``limit`` bytes: a wrong-sized object), handing
        each chunk to ``sink(offset, chunk)`` at once: a chunk may be a view of a buffer
        that the next read reuses.

        Fast path: ``readinto`` a reused buffer straight from the HTTP response under
        botocore's stream (no bytes object per chunk: 25% more throughput on loopback).
        botocore asks urllib3 not to decode content, so these are the object's bytes either
        way; at the end one ``read()`` through urllib3 lets it see the end of the response
        and put the connection back in its pool."""
        raw = getattr(body, "_raw_stream", None)
        fp = getattr(raw, "_fp", None)
        fast = fp is not None and hasattr(fp, "readinto") and hasattr(raw, "read")
        buf = memoryview(bytearray(CHUNK)) if fast else None
        got = 0
        try:
            while got <= limit:
                try:
                    if buf is not None:
                        n = fp.readinto(buf)  # type: ignore[union-attr]
                        chunk: Any = buf[:n] if n else b""
                    else:
                        chunk = body.read(CHUNK)
                except Exception as e:  # a streaming body (botocore/urllib3) raises errors of many kinds: _fail classifies
                    err = self._fail(e, "get_object", digest)
                    if err is e:
                        raise
                    raise err from e
                if not chunk:
                    # http.client's readinto takes a connection closed early for the end of the
                    # body (no IncompleteRead): count what the response announced
                    self._cut(digest, got, announced)
                    if buf is not None:
                        raw.read()  # type: ignore[union-attr]
                    break
                sink(off + got, chunk)
                got += len(chunk)
        finally:
            body.close()
        return got

    @property
    def ranged(self) -> bool:
        """Fetch large objects with parallel ranged GETs? Auto: yes, unless the endpoint is
        on this machine (loopback): one connection is not the bottleneck there and ranges
        only add server work (moto reads the whole object for every range: 5x slower)."""
        if self.ranged_gets is not None:
            return self.ranged_gets
        from urllib.parse import urlparse

        host = urlparse(self._client().meta.endpoint_url).hostname or ""
        self.ranged_gets = not (host in ("localhost", "::1") or host.startswith("127."))
        return self.ranged_gets

    def get(self, digest: str, size: int) -> bytes:
        if size >= MULTIPART_MIN and self.ranged:
            buf = bytearray(size)
            mv = memoryview(buf)

            def put_in(at: int, chunk: Any) -> None:
                if at + len(chunk) > size:
                    raise CorruptBlob(f"remote blob {digest[:12]} is larger than {size} bytes")
                mv[at:at + len(chunk)] = chunk

            got = run_all(lambda r: self._read_range(digest, r[0], r[1], put_in), self._ranges(size),
                          self.concurrency)
            if sum(got) != size:
                raise CorruptBlob(f"remote blob {digest[:12]} has {sum(got)} bytes, expected {size}")
            self._assert_whole(digest, size)
            return _check(buf, digest, size)
        r = self._call("get_object", digest, Key=self._key(digest))
        self._announced(r, digest, size)
        body = r["Body"]
        try:
            data = body.read(size + 1)  # one byte too many tells a longer object, without reading it all
        except Exception as e:  # a streaming body (botocore/urllib3) raises errors of many kinds: _fail classifies
            err = self._fail(e, "get_object", digest)
            if err is e:
                raise
            raise err from e
        finally:
            body.close()
        self._cut(digest, len(data), r.get("ContentLength"))
        return _check(data, digest, size)

    def _assert_whole(self, digest: str, size: int) -> None:
        """Ranged reads cannot see an object LONGER than ``size``: ask for one byte past it."""
        try:
            r = self._call("get_object", digest, Key=self._key(digest), Range=f"bytes={size}-{size}")
        except _PastTheEnd:
            return  # nothing past size, as it should be
        r["Body"].close()
        raise CorruptBlob(f"remote blob {digest[:12]} is larger than {size} bytes")

    def get_to(self, digest: str, size: int, path: os.PathLike[str] | str, *,
               tmp_dir: os.PathLike[str] | str | None = None, sync_dir: bool = True) -> None:
        path = os.fspath(path)
        if size >= MULTIPART_MIN and self.ranged:
            return self._get_to_ranged(digest, size, path, tmp_dir, sync_dir)
        r = self._call("get_object", digest, Key=self._key(digest))
        self._announced(r, digest, size)
        tmp = _tmp_beside(path, tmp_dir)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except BaseException:
            r["Body"].close()
            raise
        h = _hasher()

        def sink(at: int, chunk: Any) -> None:
            h.update(chunk)
            write_all(fd, chunk)

        try:
            written = self._drain(r["Body"], digest, 0, size, sink, r.get("ContentLength"))
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        _finish(tmp, fd, path, digest, h.hexdigest(), size, written, sync_dir)

    def _get_to_ranged(self, digest: str, size: int, path: str, tmp_dir: os.PathLike[str] | str | None = None,
                       sync_dir: bool = True) -> None:
        """Parallel ranged GETs written in place with ``pwrite``; the parts are hashed in
        order as soon as the ones before them are in (read back through a mapping of the
        file: the page cache, no copy held in Python), so verification overlaps the transfer."""
        import mmap

        tmp = _tmp_beside(path, tmp_dir)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        ranges = self._ranges(size)
        done = [False] * len(ranges)
        got = [0] * len(ranges)
        h = _hasher()
        state = {"next": 0}
        hash_lock = threading.Lock()
        try:
            os.ftruncate(fd, size)
            m = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            view = memoryview(m)
            try:
                def sink(at: int, chunk: Any) -> None:
                    if at + len(chunk) > size:
                        raise CorruptBlob(f"remote blob {digest[:12]} is larger than {size} bytes")
                    write_all(fd, chunk, at)

                def one(i: int) -> None:
                    off, n = ranges[i]
                    got[i] = self._read_range(digest, off, n, sink)
                    done[i] = True
                    # whoever completes the part at the hash frontier hashes every finished part from there
                    if hash_lock.acquire(blocking=False):
                        try:
                            while state["next"] < len(ranges) and done[state["next"]]:
                                o, k = ranges[state["next"]]
                                h.update(view[o:o + k])
                                state["next"] += 1
                        finally:
                            hash_lock.release()

                run_all(one, list(range(len(ranges))), self.concurrency)
                while state["next"] < len(ranges):  # a part finished while the hasher was busy
                    o, k = ranges[state["next"]]
                    h.update(view[o:o + k])
                    state["next"] += 1
            finally:
                view.release()
                m.close()
            self._assert_whole(digest, size)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        # parts short of their length leave zeros: counted here, and the digest would not match anyway
        _finish(tmp, fd, path, digest, h.hexdigest(), size, size if got == [n for _, n in ranges] else sum(got), sync_dir)

    # -- exists / list / delete / ping
    def exists(self, digest: str) -> bool:
        return self.size(digest) is not None

    def size(self, digest: str) -> int | None:
        try:
            return int(self._call("head_object", digest, Key=self._key(digest))["ContentLength"])
        except MissingBlob:
            return None

    def exists_many(self, digests: Iterable[str]) -> set[str]:
        """Concurrent HEADs; a shard (``blobs/ab/``) asked for many digests is listed instead."""
        ds = list(dict.fromkeys(digests))
        shards: dict[str, list[str]] = {}
        for d in ds:
            shards.setdefault(d[:2], []).append(d)
        listed = [s for s, members in shards.items() if len(members) >= 16]
        heads = [d for s, members in shards.items() if len(members) < 16 for d in members]

        def shard(s: str) -> set[str]:
            want = set(shards[s])
            return {k for k, _, _ in self._list_under(f"blobs/{s}/") if k in want}

        found: set[str] = set()
        for part in run_all(shard, listed, self.concurrency):
            found |= part
        found |= RemoteBlobs.exists_many(self, heads)
        return found

    def _list_under(self, sub: str) -> Iterator[tuple[str, int, float]]:
        prefix = f"{self.prefix}/{sub}" if self.prefix else sub
        token: str | None = None
        while True:
            kw: dict[str, Any] = {"Prefix": prefix, "MaxKeys": 1000}
            if token:
                kw["ContinuationToken"] = token
            page = self._call("list_objects_v2", **kw)
            for obj in page.get("Contents", ()):
                name = obj["Key"].rsplit("/", 1)[-1]
                if DIGEST_RE.match(name):
                    yield name, int(obj["Size"]), obj["LastModified"].timestamp()
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def list(self) -> Iterator[tuple[str, int, float]]:
        return self._list_under("blobs/")

    def delete(self, digests: Iterable[str]) -> None:
        keys = [{"Key": self._key(d)} for d in dict.fromkeys(digests)]
        for i in range(0, len(keys), 1000):
            r = self._call("delete_objects", Delete={"Objects": keys[i:i + 1000], "Quiet": True})
            errs = [e for e in r.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
            if errs:
                e = errs[0]
                raise RemoteUnavailable(f"team blob store {self.url}: could not delete {e.get('Key')}: "
                                        f"{e.get('Code')}: {e.get('Message', '')}")

    def stale_uploads(self, before: float) -> builtins.list[tuple[str, str, float]]:
        """memolab's multipart uploads under this prefix started before ``before`` (a time):
        (key, upload id, initiated); left by a process killed mid-upload, their parts are
        kept (and billed) until aborted."""
        prefix = f"{self.prefix}/blobs/" if self.prefix else "blobs/"
        out: list[tuple[str, str, float]] = []
        kw: dict[str, Any] = {"Prefix": prefix, "MaxUploads": 1000}
        while True:
            page = self._call("list_multipart_uploads", **kw)
            for u in page.get("Uploads", ()):
                t = u["Initiated"].timestamp()
                if t < before and DIGEST_RE.match(u["Key"].rsplit("/", 1)[-1]):
                    out.append((u["Key"], u["UploadId"], t))
            if not page.get("IsTruncated"):
                return out
            kw.update(KeyMarker=page.get("NextKeyMarker"), UploadIdMarker=page.get("NextUploadIdMarker"))

    def abort_uploads(self, uploads: Iterable[tuple[str, str, float]]) -> int:
        """Abort these multipart uploads (their parts are deleted); how many were aborted
        (one already completed or aborted meanwhile is not counted)."""
        from botocore.exceptions import ClientError

        n = 0
        for key, upload_id, _ in uploads:
            try:
                self._call("abort_multipart_upload", Key=key, UploadId=upload_id)
                n += 1
            except RemoteUnavailable as e:
                if isinstance(e.__cause__, ClientError) and "NoSuchUpload" in str(e):
                    continue
                raise
        return n

    def ping(self, timeout: float | None = None) -> None:
        """One HEAD of the bucket, no retry, ``timeout`` seconds for connect and read."""
        self._call("head_bucket", kind="ping", timeout=self.timeout if timeout is None else timeout)

    def close(self) -> None:
        with self._lock:
            for c in self._clients.values():
                try:
                    c.close()
                except Exception:  # a boto3 client's close (botocore, urllib3): nothing to keep of it
                    swallowed("team.blobs.s3: S3Blobs.close")
            self._clients.clear()
