"""Remote content-addressed blobs: the object-storage half of the team store.

``open_blobs(url)`` returns a ``RemoteBlobs`` for

- ``s3://bucket/prefix``: any S3-protocol store through boto3 (imported here,
  lazily: never at ``import memolab``). The standard ``AWS_*`` variables and
  files apply (``AWS_ENDPOINT_URL`` for MinIO, Ceph, moto..., credentials,
  region, profile).
- ``file:///dir``: plain files in a (shared) directory, which must exist.
- any other scheme fsspec knows (``gs://``, ``az://``, ``memory://``...) when
  fsspec and its backend are installed: best effort, see ``FsspecBlobs``.

Object key layout: ``<prefix>/blobs/<digest[:2]>/<digest>``, digests as
``store.blobs.digest_bytes`` (BLAKE3 of the bytes).

Rules every backend keeps:

- **Never trusted on the way in.** Every get is verified against its digest
  (while streaming, for ``get_to``); a mismatch raises ``CorruptBlob`` and
  nothing lands at the destination path. An absent object raises
  ``MissingBlob`` (a ``CorruptBlob``, so a ``StoreMiss``).
- **Never rewritten.** A put is idempotent and an existing object is never
  overwritten: S3 uses a conditional PUT (``If-None-Match: *``; a
  ``PreconditionFailed`` answer means it is there: ``put`` returns False);
  ``file://`` publishes with ``link()`` which fails on an existing name. The
  caller vouches that the bytes match the digest (the team layer uploads from
  the verified local blob folder). A remote object damaged behind our back stays
  damaged (gets raise ``CorruptBlob``) until it is deleted and put again.
- **Quick failure.** Network and endpoint failures (refused, timed out, 5xx,
  no such bucket, bad credentials) raise ``memolab.errors.RemoteUnavailable``
  naming the URL. Connect/read timeouts are ``MEMOLAB_REMOTE_TIMEOUT`` seconds
  (default 3), one retry at most; a batch stops at its first such failure.
  Local failures (a full disk in ``get_to``) raise their own ``OSError``.
- **Concurrent transfers.** ``put_many``/``get_many_to``/``exists_many`` use up
  to ``MEMOLAB_REMOTE_CONCURRENCY`` (default 16) requests at once; large objects
  (16 MB and more) are cut into 8 MB parts moved in parallel (multipart uploads,
  ranged GETs), from a file or a memoryview without copying the whole object.
  Ranged GETs are skipped for an endpoint on loopback (one connection is not
  the bottleneck there; moto even reads the whole object for every range);
  ``MEMOLAB_REMOTE_RANGED_GETS=1``/``0`` forces them on/off. Worker threads are
  daemons started per call: a transfer never keeps the interpreter from exiting.
"""
from __future__ import annotations

import os
import re
import threading
import uuid
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple,
                    TypeVar, Union)
from urllib.parse import unquote, urlparse

from ..errors import CorruptBlob, RemoteUnavailable, StoreConfigError

Data = Union[bytes, bytearray, memoryview, "os.PathLike[str]", str]
T = TypeVar("T")
R = TypeVar("R")

DEFAULT_TIMEOUT = 3.0
DEFAULT_CONCURRENCY = 16
PART_SIZE = 8 << 20  # multipart part / GET range size
MULTIPART_MIN = 16 << 20  # objects at least this large move in parts
CHUNK = 1 << 20  # streaming read size
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class MissingBlob(CorruptBlob):
    """The remote store has no object under this digest."""


def remote_timeout() -> float:
    try:
        return max(0.1, float(os.environ.get("MEMOLAB_REMOTE_TIMEOUT", DEFAULT_TIMEOUT)))
    except ValueError:
        return DEFAULT_TIMEOUT


def remote_concurrency() -> int:
    try:
        return max(1, int(os.environ.get("MEMOLAB_REMOTE_CONCURRENCY", DEFAULT_CONCURRENCY)))
    except ValueError:
        return DEFAULT_CONCURRENCY


def remote_ranged_gets() -> Optional[bool]:
    """``MEMOLAB_REMOTE_RANGED_GETS``: 1 on, 0 off, unset: auto (see ``S3Blobs.ranged``)."""
    v = os.environ.get("MEMOLAB_REMOTE_RANGED_GETS", "").strip().lower()
    if not v or v == "auto":
        return None
    return v not in ("0", "false", "no", "off")


def blob_key(digest: str) -> str:
    """The key of ``digest`` under a store's prefix: ``blobs/ab/abcd…``."""
    return f"blobs/{digest[:2]}/{digest}"


# -- what a put may be given ----------------------------------------------------------------

class _Source:
    """The bytes of one put: in memory (a zero-copy view) or in a file (read as needed)."""

    def __init__(self, data: Data) -> None:
        self.path: Optional[str] = None
        self.mv: Optional[memoryview] = None
        if isinstance(data, (str, os.PathLike)):
            self.path = os.fspath(data)
            self.size = os.stat(self.path).st_size
        else:
            mv = memoryview(data)
            if mv.ndim != 1 or mv.format not in ("B", "b", "c"):
                mv = mv.cast("B")
            self.mv = mv
            self.size = mv.nbytes

    def small_body(self) -> Any:
        """The whole thing for a single PUT: bytes-like in memory, else an open file."""
        if self.mv is not None:
            return self.mv.obj if isinstance(self.mv.obj, (bytes, bytearray)) and len(self.mv.obj) == self.size \
                else self.mv.tobytes()  # small (< MULTIPART_MIN): one bounded copy
        return open(self.path, "rb")  # type: ignore[arg-type]

    def window(self, offset: int, length: int) -> "_Window":
        return _Window(self, offset, length)


class _Window:
    """A read-only, seekable file object over ``length`` bytes of a source from ``offset``.

    Over memory it hands out memoryview slices (no copy; http.client and the
    checksum code accept any bytes-like); over a file it reads with ``pread``.
    Seekable so botocore can compute a checksum and rewind, and retry."""

    def __init__(self, src: _Source, offset: int, length: int) -> None:
        self.src, self.offset, self.length, self.pos = src, offset, length, 0
        self._fd = os.open(src.path, os.O_RDONLY) if src.path is not None else None

    def read(self, n: int = -1) -> Any:
        left = self.length - self.pos
        n = left if n is None or n < 0 or n > left else n
        if n <= 0:
            return b""
        start = self.offset + self.pos
        self.pos += n
        if self.src.mv is not None:
            return self.src.mv[start:start + n]
        try:
            out = os.pread(self._fd, n, start)  # type: ignore[arg-type]
            if len(out) != n:
                raise OSError(f"{self.src.path} shrank while being uploaded")
        except OSError as e:
            e.memolab_local = True  # type: ignore[attr-defined]  # ours, not the network's: S3Blobs._fail
            raise
        return out

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.length}[whence]
        self.pos = max(0, min(self.length, base + pos))
        return self.pos

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


# -- concurrency -----------------------------------------------------------------------------

def run_all(fn: Callable[[T], R], items: Sequence[T], workers: int) -> List[R]:
    """``[fn(x) for x in items]`` on up to ``workers`` daemon threads, results in order.

    The first ``RemoteUnavailable`` stops the batch (items not yet started are
    skipped: a dead network costs one timeout, not one per item) and is raised.
    Any other error lets the rest finish, then the first one is raised."""
    n = len(items)
    if n == 0:
        return []
    if n == 1 or workers <= 1:
        return [fn(x) for x in items]
    results: List[Any] = [None] * n
    errors: List[Tuple[int, BaseException]] = []
    stop = threading.Event()
    it = iter(range(n))
    lock = threading.Lock()

    def work() -> None:
        while not stop.is_set():
            with lock:
                i = next(it, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # handed to the caller below
                with lock:
                    errors.append((i, e))
                if isinstance(e, RemoteUnavailable) or not isinstance(e, Exception):
                    stop.set()

    threads = [threading.Thread(target=work, name="memolab-remote", daemon=True)
               for _ in range(min(workers, n) - 1)]
    for t in threads:
        t.start()
    work()
    for t in threads:
        t.join()
    if errors:
        errors.sort(key=lambda ie: (not isinstance(ie[1], RemoteUnavailable), ie[0]))
        raise errors[0][1]
    return results


# -- writing a verified file ----------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tmp_beside(path: str) -> str:
    d, name = os.path.split(os.path.abspath(path))
    return os.path.join(d, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")


def _finish(tmp: str, fd: int, path: str, digest: str, got: str, size: int, written: int) -> None:
    """Publish ``tmp`` at ``path`` if it holds the right bytes (fsynced, renamed), else remove it."""
    try:
        if written != size:
            raise CorruptBlob(f"remote blob {digest[:12]} has {written} bytes, expected {size}")
        if got != digest:
            raise CorruptBlob(f"remote blob {digest[:12]} does not match its digest")
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _unlink(p: str) -> None:
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass


def _hasher() -> Any:
    import blake3

    return blake3.blake3()


def _check(data: Any, digest: str, size: int) -> Any:
    from ..store.blobs import digest_bytes

    n = memoryview(data).nbytes
    if n != size:
        raise CorruptBlob(f"remote blob {digest[:12]} has {n} bytes, expected {size}")
    if digest_bytes(data) != digest:
        raise CorruptBlob(f"remote blob {digest[:12]} does not match its digest")
    return data


# -- the interface ---------------------------------------------------------------------------

class RemoteBlobs:
    """Content-addressed blobs in a remote store (see the module docstring for the rules).

    Subclasses implement ``put``, ``get``, ``get_to``, ``exists``, ``list``,
    ``delete``, ``ping``; the batch methods run the single ones concurrently."""

    url: str

    def __init__(self, url: str, *, timeout: Optional[float] = None, concurrency: Optional[int] = None,
                 ranged_gets: Optional[bool] = None) -> None:
        self.url = url
        self.timeout = remote_timeout() if timeout is None else timeout
        self.concurrency = remote_concurrency() if concurrency is None else max(1, concurrency)
        #: large gets as parallel ranged GETs (S3); False: one stream per object; None: auto
        self.ranged_gets = remote_ranged_gets() if ranged_gets is None else ranged_gets

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # single objects
    def put(self, digest: str, data: Data) -> bool:
        """Store ``data`` under ``digest``: True if written, False if an object was there (untouched)."""
        raise NotImplementedError

    def get(self, digest: str, size: int) -> bytes:
        """The verified bytes of ``digest`` (``CorruptBlob``/``MissingBlob`` otherwise)."""
        raise NotImplementedError

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str") -> None:
        """Stream ``digest`` into the file ``path``, verified on the way: ``path`` appears
        (atomically, fsynced, replacing any file there) only with the right bytes."""
        raise NotImplementedError

    def exists(self, digest: str) -> bool:
        raise NotImplementedError

    # batches
    def put_many(self, items: Sequence[Tuple[str, Data]]) -> List[bool]:
        return run_all(lambda it: self.put(it[0], it[1]), list(items), self.concurrency)

    def get_many_to(self, items: Sequence[Tuple[str, int, "os.PathLike[str] | str"]]) -> None:
        """``get_to`` for each ``(digest, size, path)``, concurrently. A corrupt or missing
        blob does not stop the others (their files are in place); its error is raised at the end."""
        run_all(lambda it: self.get_to(it[0], it[1], it[2]), list(items), self.concurrency)

    def exists_many(self, digests: Iterable[str]) -> Set[str]:
        ds = list(dict.fromkeys(digests))
        found = run_all(self.exists, ds, self.concurrency)
        return {d for d, ok in zip(ds, found) if ok}

    def list(self) -> Iterator[Tuple[str, int, float]]:
        """Every stored blob as (digest, size, last-modified epoch seconds), for ``gc --remote``."""
        raise NotImplementedError

    def delete(self, digests: Iterable[str]) -> None:
        """Delete these blobs (absent ones are fine), in batches."""
        raise NotImplementedError

    def ping(self, timeout: Optional[float] = None) -> None:
        """Return quickly if the store answers, else raise ``RemoteUnavailable``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


# -- file:// ---------------------------------------------------------------------------------

class FileBlobs(RemoteBlobs):
    """Blobs as plain files under a directory (a shared file system).

    Written into ``<dir>/tmp`` and fsynced, then published with ``link()``, which
    fails if the name exists: an existing blob is never replaced, even by two
    machines racing (on a file system without hard links, an existence check
    and ``rename`` instead). The directory must exist: a missing one (a share
    not mounted) is ``RemoteUnavailable``, not a fresh empty store."""

    def __init__(self, url: str, root: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        self.root = root
        self._ready = False

    def _dirs(self) -> None:
        if self._ready:
            return
        if not os.path.isdir(self.root):
            raise RemoteUnavailable(f"team blob store {self.url}: {self.root} is not a directory (not mounted?)")
        for d in ("blobs", "tmp"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        self._ready = True

    def _path(self, digest: str) -> str:
        return os.path.join(self.root, blob_key(digest))

    def put(self, digest: str, data: Data) -> bool:
        self._dirs()
        final = self._path(digest)
        if os.path.exists(final):
            return False
        src = _Source(data)
        tmp = os.path.join(self.root, "tmp", f"{digest[:16]}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            try:
                if src.mv is not None:
                    view = src.mv
                    while view.nbytes:
                        view = view[os.write(fd, view[: 1 << 30]):]
                else:
                    with open(src.path, "rb") as f:  # type: ignore[arg-type]
                        left = src.size
                        while left > 0:
                            sent = os.sendfile(fd, f.fileno(), None, min(left, 1 << 30))
                            if sent == 0:
                                raise OSError(f"{src.path} shrank while being uploaded")
                            left -= sent
                os.fsync(fd)
            finally:
                os.close(fd)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
            except OSError:  # no hard links here (some FUSE/SMB mounts)
                if os.path.exists(final):
                    return False
                os.replace(tmp, final)
            _fsync_dir(os.path.dirname(final))
            return True
        finally:
            _unlink(tmp)

    def _open(self, digest: str) -> int:
        self._dirs()
        try:
            return os.open(self._path(digest), os.O_RDONLY)
        except FileNotFoundError:
            raise MissingBlob(f"remote blob {digest[:12]} is missing from {self.url}") from None

    def get(self, digest: str, size: int) -> bytes:
        fd = self._open(digest)
        with os.fdopen(fd, "rb") as f:
            return _check(f.read(), digest, size)

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str") -> None:
        src = self._open(digest)
        path = os.fspath(path)
        tmp = _tmp_beside(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except BaseException:
            os.close(src)
            raise
        h, written = _hasher(), 0
        try:
            buf = bytearray(CHUNK)
            mv = memoryview(buf)
            with os.fdopen(src, "rb", buffering=0) as f:
                while written <= size:
                    n = f.readinto(buf)
                    if not n:
                        break
                    h.update(mv[:n])
                    os.write(fd, mv[:n])
                    written += n
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        _finish(tmp, fd, path, digest, h.hexdigest(), size, written)

    def exists(self, digest: str) -> bool:
        self._dirs()
        return os.path.exists(self._path(digest))

    def exists_many(self, digests: Iterable[str]) -> Set[str]:
        self._dirs()
        return {d for d in dict.fromkeys(digests) if os.path.exists(self._path(d))}

    def list(self) -> Iterator[Tuple[str, int, float]]:
        self._dirs()
        base = os.path.join(self.root, "blobs")
        for sub in sorted(os.listdir(base)):
            try:
                entries = list(os.scandir(os.path.join(base, sub)))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for e in sorted(entries, key=lambda e: e.name):
                if _DIGEST.match(e.name):
                    try:
                        st = e.stat()
                    except FileNotFoundError:
                        continue
                    yield e.name, st.st_size, st.st_mtime

    def delete(self, digests: Iterable[str]) -> None:
        self._dirs()
        for d in digests:
            _unlink(self._path(d))

    def ping(self, timeout: Optional[float] = None) -> None:
        # a hung NFS mount blocks stat() for minutes: ask from a daemon thread, wait a bounded time
        out: List[BaseException] = []

        def probe() -> None:
            try:
                self._dirs()
            except BaseException as e:
                out.append(e)

        t = threading.Thread(target=probe, name="memolab-remote-ping", daemon=True)
        t.start()
        t.join(self.timeout if timeout is None else timeout)
        if t.is_alive():
            raise RemoteUnavailable(f"team blob store {self.url}: no answer within {timeout or self.timeout:g} s")
        if out:
            if isinstance(out[0], RemoteUnavailable):
                raise out[0]
            raise RemoteUnavailable(f"team blob store {self.url}: {out[0]}") from out[0]


# -- s3:// -----------------------------------------------------------------------------------

_UNAVAILABLE_CODES = {"NoSuchBucket": "the bucket does not exist",
                      "AccessDenied": "access denied",
                      "InvalidAccessKeyId": "unknown access key",
                      "SignatureDoesNotMatch": "wrong secret key",
                      "ExpiredToken": "expired credentials"}


class S3Blobs(RemoteBlobs):
    """Blobs in an S3-protocol bucket through one thread-safe boto3 client.

    Client: connect and read timeouts of ``timeout`` seconds, at most one retry,
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
        self._clients: Dict[str, Any] = {}
        self._slots = threading.BoundedSemaphore(self.concurrency)

    # -- plumbing
    def _key(self, digest: str) -> str:
        return f"{self.prefix}/{blob_key(digest)}" if self.prefix else blob_key(digest)

    def _client(self, kind: str = "main", timeout: Optional[float] = None) -> Any:
        """``main``: every transfer; ``slow``: a long read timeout (completing a multipart
        upload takes the server a while); ``ping``: no retry, the caller's timeout."""
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
                read = t if kind != "slow" else max(60.0, 10 * t)
                cfg = Config(connect_timeout=t, read_timeout=read,
                             retries={"mode": "standard", "total_max_attempts": 1 if kind == "ping" else 2},
                             max_pool_connections=self.concurrency + 2,
                             response_checksum_validation="when_required",
                             user_agent_extra="memolab")
                c = boto3.session.Session().client("s3", config=cfg)
                self._clients[name] = c
        return c

    def _fail(self, e: BaseException, what: str, digest: Optional[str] = None) -> BaseException:
        """The memolab error for a boto3/botocore/network failure."""
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if digest is not None and (code in ("NoSuchKey", "404", "NotFound") or status == 404):
                return MissingBlob(f"remote blob {digest[:12]} is missing from {self.url}")
            if code in ("404", "NotFound") or status == 404:
                code = "NoSuchBucket"  # a HEAD has no body to say so: only a key or the bucket can be absent
            why = _UNAVAILABLE_CODES.get(code) or f"{code or status}: {err.get('Message', '')}".strip()
            return RemoteUnavailable(f"team blob store {self.url} ({what}): {why}")
        if getattr(e, "memolab_local", False):
            return e  # reading the local file being uploaded failed: not a network problem
        if isinstance(e, (BotoCoreError, OSError)):
            return RemoteUnavailable(f"team blob store {self.url} unreachable ({what}): {e}")
        return e

    def _call(self, op: str, digest: Optional[str] = None, kind: str = "main",
              timeout: Optional[float] = None, **kw: Any) -> Any:
        with self._slots:
            try:
                return getattr(self._client(kind, timeout), op)(Bucket=self.bucket, **kw)
            except Exception as e:
                err = self._fail(e, op, digest)
                if err is e:
                    raise
                raise err from e

    @staticmethod
    def _precondition_failed(e: BaseException) -> bool:
        from botocore.exceptions import ClientError

        return isinstance(e, ClientError) and (
            e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict")
            or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412)

    # -- put
    def put(self, digest: str, data: Data) -> bool:
        src = _Source(data)
        if src.size >= MULTIPART_MIN:
            if self.exists(digest):  # one HEAD saves uploading 100 MB for nothing
                return False
            return self._put_multipart(digest, src)
        body = src.small_body()
        try:
            self._call("put_object", Key=self._key(digest), Body=body, IfNoneMatch="*")
            return True
        except RemoteUnavailable as e:
            if self._precondition_failed(e.__cause__):  # type: ignore[arg-type]
                return False
            raise
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
            def one(span: Tuple[int, int, int]) -> Dict[str, Any]:
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
            try:
                self._call("complete_multipart_upload", kind="slow", Key=key, UploadId=upload_id,
                           MultipartUpload={"Parts": parts}, IfNoneMatch="*")
            except RemoteUnavailable as e:
                if self._precondition_failed(e.__cause__):  # type: ignore[arg-type]
                    return False  # written by someone else meanwhile: theirs stays
                raise
            done = True
            return True
        finally:
            if not done:
                try:
                    self._call("abort_multipart_upload", Key=key, UploadId=upload_id)
                except Exception:
                    pass  # best effort: a lifecycle rule reaps abandoned uploads

    # -- get
    def _ranges(self, size: int) -> List[Tuple[int, int]]:
        return [(off, min(PART_SIZE, size - off)) for off in range(0, size, PART_SIZE)]

    def _read_range(self, digest: str, off: int, n: int, sink: Callable[[int, Any], None]) -> int:
        """GET bytes ``off..off+n`` of ``digest``, handing each chunk to ``sink(offset, chunk)``."""
        r = self._call("get_object", digest, Key=self._key(digest), Range=f"bytes={off}-{off + n - 1}")
        return self._drain(r["Body"], digest, off, n, sink)

    def _drain(self, body: Any, digest: str, off: int, limit: int, sink: Callable[[int, Any], None]) -> int:
        got = 0
        try:
            while got <= limit:
                try:
                    chunk = body.read(CHUNK)
                except Exception as e:
                    err = self._fail(e, "get_object", digest)
                    if err is e:
                        raise
                    raise err from e
                if not chunk:
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
        from urllib.parse import urlparse as parse

        host = parse(self._client().meta.endpoint_url).hostname or ""
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
            return _check(buf, digest, size)  # type: ignore[return-value]
        r = self._call("get_object", digest, Key=self._key(digest))
        chunks: List[bytes] = []
        self._drain(r["Body"], digest, 0, size, lambda at, c: chunks.append(c))
        return _check(b"".join(chunks), digest, size)

    def _assert_whole(self, digest: str, size: int) -> None:
        """Ranged reads cannot see an object LONGER than ``size``: ask for one byte past it."""
        try:
            r = self._call("get_object", digest, Key=self._key(digest), Range=f"bytes={size}-{size}")
        except RemoteUnavailable as e:
            cause = e.__cause__
            from botocore.exceptions import ClientError

            if isinstance(cause, ClientError) and cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 416:
                return  # InvalidRange: nothing past size, as it should be
            raise
        r["Body"].close()
        raise CorruptBlob(f"remote blob {digest[:12]} is larger than {size} bytes")

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str") -> None:
        path = os.fspath(path)
        if size >= MULTIPART_MIN and self.ranged:
            return self._get_to_ranged(digest, size, path)
        r = self._call("get_object", digest, Key=self._key(digest))
        tmp = _tmp_beside(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except BaseException:
            r["Body"].close()
            raise
        h = _hasher()

        def sink(at: int, chunk: Any) -> None:
            h.update(chunk)
            os.write(fd, chunk)

        try:
            written = self._drain(r["Body"], digest, 0, size, sink)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        _finish(tmp, fd, path, digest, h.hexdigest(), size, written)

    def _get_to_ranged(self, digest: str, size: int, path: str) -> None:
        """Parallel ranged GETs written in place with ``pwrite``; the parts are hashed in
        order as soon as the ones before them are in (read back through a mapping of the
        file: the page cache, no copy held in Python), so verification overlaps the transfer."""
        import mmap

        tmp = _tmp_beside(path)
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
                    os.pwrite(fd, chunk, at)

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
        _finish(tmp, fd, path, digest, h.hexdigest(), size, size if got == [n for _, n in ranges] else sum(got))

    # -- exists / list / delete / ping
    def exists(self, digest: str) -> bool:
        try:
            self._call("head_object", digest, Key=self._key(digest))
            return True
        except MissingBlob:
            return False

    def exists_many(self, digests: Iterable[str]) -> Set[str]:
        """Concurrent HEADs; a shard (``blobs/ab/``) asked for many digests is listed instead."""
        ds = list(dict.fromkeys(digests))
        shards: Dict[str, List[str]] = {}
        for d in ds:
            shards.setdefault(d[:2], []).append(d)
        listed = [s for s, members in shards.items() if len(members) >= 16]
        heads = [d for s, members in shards.items() if len(members) < 16 for d in members]

        def shard(s: str) -> Set[str]:
            want = set(shards[s])
            return {k for k, _, _ in self._list_under(f"blobs/{s}/") if k in want}

        found: Set[str] = set()
        for part in run_all(shard, listed, self.concurrency):
            found |= part
        found |= RemoteBlobs.exists_many(self, heads)
        return found

    def _list_under(self, sub: str) -> Iterator[Tuple[str, int, float]]:
        prefix = f"{self.prefix}/{sub}" if self.prefix else sub
        token: Optional[str] = None
        while True:
            kw: Dict[str, Any] = {"Prefix": prefix, "MaxKeys": 1000}
            if token:
                kw["ContinuationToken"] = token
            page = self._call("list_objects_v2", **kw)
            for obj in page.get("Contents", ()):
                name = obj["Key"].rsplit("/", 1)[-1]
                if _DIGEST.match(name):
                    yield name, int(obj["Size"]), obj["LastModified"].timestamp()
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def list(self) -> Iterator[Tuple[str, int, float]]:
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

    def ping(self, timeout: Optional[float] = None) -> None:
        """One HEAD of the bucket, no retry, ``timeout`` seconds for connect and read."""
        self._call("head_bucket", kind="ping", timeout=self.timeout if timeout is None else timeout)

    def close(self) -> None:
        with self._lock:
            for c in self._clients.values():
                try:
                    c.close()
                except Exception:
                    pass
            self._clients.clear()


# -- fsspec (other schemes) -------------------------------------------------------------------

class FsspecBlobs(RemoteBlobs):
    """Any fsspec file system (``gs://``, ``az://``, ``memory://``...): best effort.

    fsspec has no conditional write: ``put`` checks existence first, so two
    writers racing on one digest may both write (the same bytes: harmless for
    content-addressed blobs, but not the strict never-rewrite of S3/file).
    Errors: ``FileNotFoundError`` is a missing blob; any other ``OSError``,
    ``ConnectionError`` or ``TimeoutError`` is ``RemoteUnavailable``. Timeouts
    are whatever the backend does (``ping`` alone is bounded here)."""

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        try:
            import fsspec
        except ImportError as e:
            raise StoreConfigError(f"{url}: this scheme needs fsspec and its backend installed") from e
        try:
            self.fs, root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as e:
            raise StoreConfigError(f"{url}: {e}") from e
        self.root = root.rstrip("/")

    def _path(self, digest: str) -> str:
        return f"{self.root}/{blob_key(digest)}"

    def _guard(self, what: str, fn: Callable[[], R], digest: Optional[str] = None) -> R:
        try:
            return fn()
        except FileNotFoundError:
            if digest is None:
                raise
            raise MissingBlob(f"remote blob {digest[:12]} is missing from {self.url}") from None
        except (OSError, ConnectionError, TimeoutError) as e:
            if isinstance(e, RemoteUnavailable):
                raise
            raise RemoteUnavailable(f"team blob store {self.url} ({what}): {e}") from e

    def put(self, digest: str, data: Data) -> bool:
        p = self._path(digest)
        if self._guard("exists", lambda: self.fs.exists(p)):
            return False
        src = _Source(data)
        if src.path is not None:
            self._guard("put", lambda: self.fs.put_file(src.path, p))
        else:
            self._guard("put", lambda: self.fs.pipe_file(p, src.mv.tobytes()))  # type: ignore[union-attr]
        return True

    def get(self, digest: str, size: int) -> bytes:
        return _check(self._guard("get", lambda: self.fs.cat_file(self._path(digest)), digest), digest, size)

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str") -> None:
        path = os.fspath(path)
        f = self._guard("open", lambda: self.fs.open(self._path(digest), "rb"), digest)
        tmp = _tmp_beside(path)
        h, written = _hasher(), 0
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except BaseException:
            f.close()
            raise
        try:
            with f:
                while written <= size:
                    chunk = self._guard("read", lambda: f.read(CHUNK), digest)
                    if not chunk:
                        break
                    h.update(chunk)
                    os.write(fd, chunk)
                    written += len(chunk)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        _finish(tmp, fd, path, digest, h.hexdigest(), size, written)

    def exists(self, digest: str) -> bool:
        return bool(self._guard("exists", lambda: self.fs.exists(self._path(digest))))

    def list(self) -> Iterator[Tuple[str, int, float]]:
        found = self._guard("list", lambda: self.fs.find(f"{self.root}/blobs", detail=True))
        for name, info in sorted(found.items()):
            d = name.rsplit("/", 1)[-1]
            if not _DIGEST.match(d):
                continue
            mtime = info.get("mtime") or info.get("LastModified") or info.get("created") or 0.0
            if hasattr(mtime, "timestamp"):
                mtime = mtime.timestamp()
            yield d, int(info.get("size") or 0), float(mtime)

    def delete(self, digests: Iterable[str]) -> None:
        paths = [self._path(d) for d in digests]
        existing = [p for p in paths if self._guard("exists", lambda p=p: self.fs.exists(p))]
        if existing:
            self._guard("delete", lambda: self.fs.rm(existing))

    def ping(self, timeout: Optional[float] = None) -> None:
        out: List[BaseException] = []

        def probe() -> None:
            try:
                self._guard("ping", lambda: self.fs.ls(self.root) if self.fs.exists(self.root) else None)
            except BaseException as e:
                out.append(e)

        t = threading.Thread(target=probe, name="memolab-remote-ping", daemon=True)
        t.start()
        t.join(self.timeout if timeout is None else timeout)
        if t.is_alive():
            raise RemoteUnavailable(f"team blob store {self.url}: no answer within {timeout or self.timeout:g} s")
        if out:
            raise out[0]


# -- opening by URL ---------------------------------------------------------------------------

def open_blobs(url: str, *, timeout: Optional[float] = None, concurrency: Optional[int] = None,
               ranged_gets: Optional[bool] = None) -> RemoteBlobs:
    """The remote blob store at ``url`` (``s3://bucket/prefix``, ``file:///dir``, fsspec URLs).

    ``timeout``, ``concurrency``, ``ranged_gets`` default to ``MEMOLAB_REMOTE_TIMEOUT``
    (3 s), ``MEMOLAB_REMOTE_CONCURRENCY`` (16), ``MEMOLAB_REMOTE_RANGED_GETS`` (auto:
    on, except for an S3 endpoint on loopback).
    Nothing is contacted here: the first operation (or ``ping``) is."""
    u = urlparse(url)
    kw: Dict[str, Any] = {"timeout": timeout, "concurrency": concurrency, "ranged_gets": ranged_gets}
    if u.scheme == "s3":
        if not u.netloc:
            raise StoreConfigError(f"{url}: expected s3://bucket/prefix")
        return S3Blobs(url, u.netloc, unquote(u.path), **kw)
    if u.scheme == "file":
        if u.netloc not in ("", "localhost"):
            raise StoreConfigError(f"{url}: a file:// URL names a local path (file:///dir)")
        return FileBlobs(url, unquote(u.path), **kw)
    if not u.scheme:
        raise StoreConfigError(f"{url}: not a URL (file:///dir, s3://bucket/prefix, ...)")
    return FsspecBlobs(url, **kw)
