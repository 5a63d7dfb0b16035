"""Remote content-addressed blobs: the object-storage half of the team store.

``open_blobs(url)`` returns a ``RemoteBlobs`` for

- ``s3://bucket/prefix``: any S3-protocol store through boto3 (``team/s3.py``,
  imported with the first s3:// store: never at ``import memolab``). The standard ``AWS_*`` variables and
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
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple,
                    TypeVar, Union)
from urllib.parse import unquote, urlparse

from .. import config
from ..errors import CorruptBlob, RemoteUnavailable, StoreConfigError
from ..store.blobs import _fsync_dir

Data = Union[bytes, bytearray, memoryview, "os.PathLike[str]", str]
T = TypeVar("T")
R = TypeVar("R")

PART_SIZE = 8 << 20  # multipart part / GET range size
MULTIPART_MIN = 16 << 20  # objects at least this large move in parts
CHUNK = 1 << 20  # streaming read size
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


class MissingBlob(CorruptBlob):
    """The remote store has no object under this digest."""


def remote_timeout() -> float:
    """``MEMOLAB_REMOTE_TIMEOUT``: seconds a connection or request may take (docs/settings.md)."""
    return config.env_setting("MEMOLAB_REMOTE_TIMEOUT")


def remote_concurrency() -> int:
    """``MEMOLAB_REMOTE_CONCURRENCY``: requests at once (docs/settings.md)."""
    return config.env_setting("MEMOLAB_REMOTE_CONCURRENCY")


def remote_ranged_gets() -> Optional[bool]:
    """``MEMOLAB_REMOTE_RANGED_GETS``: True on, False off, None auto (see ``S3Blobs.ranged``)."""
    return config.env_setting("MEMOLAB_REMOTE_RANGED_GETS")


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
    Any other error lets the rest finish, then the first one is raised. The caller's
    thread is one of the workers (``workers=1``: no thread at all)."""
    n = len(items)
    if n == 0:
        return []
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


def _bounded_probe(url: str, probe: Callable[[], Any], timeout: float) -> Optional[BaseException]:
    """Run ``probe`` on a daemon thread and wait at most ``timeout`` seconds: a file system
    that hangs (a dead NFS server) must cost a bounded wait, not minutes. What it raised,
    or None; ``RemoteUnavailable`` if it gave no answer in time."""
    out: List[BaseException] = []

    def run() -> None:
        try:
            probe()
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, name="memolab-remote-ping", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise RemoteUnavailable(f"team blob store {url}: no answer within {timeout:g} s")
    return out[0] if out else None


# -- writing a verified file ----------------------------------------------------------------



def write_all(fd: int, data: Any, at: Optional[int] = None) -> None:
    """``os.write`` (or ``pwrite`` at ``at``) until every byte is out: a write may be short."""
    mv = memoryview(data)
    while mv.nbytes:
        if at is None:
            n = os.write(fd, mv)
        else:
            n = os.pwrite(fd, mv, at)
            at += n
        mv = mv[n:]


def _tmp_beside(path: str, tmp_dir: "Optional[os.PathLike[str] | str]" = None) -> str:
    """A temporary name in ``tmp_dir`` (default: ``path``'s directory; it must be on the same
    file system as ``path``, for the final rename), named as the local store's blob writers
    name theirs (``store.tmpfiles``): a download killed midway into a store's ``tmp/`` is
    litter that store reclaims at once, its writer being provably dead."""
    from ..store import tmpfiles

    where = os.fspath(tmp_dir) if tmp_dir is not None else os.path.dirname(os.path.abspath(path))
    return os.path.join(where, tmpfiles.tmp_name("download"))


def _finish(tmp: str, fd: int, path: str, digest: str, got: str, size: int, written: int,
            sync_dir: bool = True) -> None:
    """Publish ``tmp`` at ``path`` if it holds the right bytes (fsynced, renamed), else remove it.

    The file's data is fsynced BEFORE the rename, always: a name never points at bytes a
    crash could lose. ``sync_dir=False`` skips the fsync of ``path``'s directory (which
    makes the rename itself durable): for a caller that fsyncs each directory once per
    batch before it records anything that relies on the names (``TeamStore.fetch_blobs``)."""
    try:
        if written != size:
            raise CorruptBlob(f"remote blob {digest[:12]} has {written} bytes, expected {size}")
        if got != digest:
            raise CorruptBlob(f"remote blob {digest[:12]} does not match its digest")
        os.fchmod(fd, 0o444)  # read-only, as the local store's blobs
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _copy_verified(source: Any, read: Callable[[], Any], digest: str, size: int, path: str,
                   tmp_dir: "Optional[os.PathLike[str] | str]", sync_dir: bool) -> None:
    """``get_to`` of a store read as a stream: ``read()``'s chunks (until an empty one, or
    past ``size``) hashed and written to a temporary file beside ``path``, published there
    only with the right bytes (``_finish``). ``source``, what ``read`` reads, is closed
    in any case; a chunk may be a view that the next ``read()`` overwrites."""
    with source:
        tmp = _tmp_beside(path, tmp_dir)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        h, written = _hasher(), 0
        try:
            while written <= size:
                chunk = read()
                if not len(chunk):
                    break
                h.update(chunk)
                write_all(fd, chunk)
                written += len(chunk)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
    _finish(tmp, fd, path, digest, h.hexdigest(), size, written, sync_dir)


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

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str", *,
               tmp_dir: "Optional[os.PathLike[str] | str]" = None, sync_dir: bool = True) -> None:
        """Stream ``digest`` into the file ``path``, verified on the way: ``path`` appears
        (atomically, fsynced, replacing any file there) only with the right bytes.

        The bytes are written to a temporary file in ``tmp_dir`` (default: beside ``path``;
        same file system) and renamed onto ``path`` once verified and fsynced. With
        ``sync_dir=False`` the caller fsyncs ``path``'s directory itself (see ``_finish``)."""
        raise NotImplementedError

    def exists(self, digest: str) -> bool:
        raise NotImplementedError

    def size(self, digest: str) -> Optional[int]:
        """The stored size of ``digest`` (one HEAD/stat), or None if absent: for blobs whose
        size no row records (a logs bundle). Not verified: ``get`` still checks it."""
        raise NotImplementedError

    # batches
    def put_many(self, items: Sequence[Tuple[str, Data]]) -> List[bool]:
        return run_all(lambda it: self.put(it[0], it[1]), list(items), self.concurrency)

    def get_many_to(self, items: Sequence[Tuple[str, int, "os.PathLike[str] | str"]], *,
                    tmp_dir: "Optional[os.PathLike[str] | str]" = None, sync_dir: bool = True) -> None:
        """``get_to`` for each ``(digest, size, path)``, concurrently. A corrupt or missing
        blob does not stop the others (their files are in place); its error is raised at the end."""
        run_all(lambda it: self.get_to(it[0], it[1], it[2], tmp_dir=tmp_dir, sync_dir=sync_dir), list(items),
                self.concurrency)

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
        from ..store import tmpfiles

        tmp = os.path.join(self.root, "tmp", tmpfiles.tmp_name(digest[:16]))  # names its writer and host
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

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str", *,
               tmp_dir: "Optional[os.PathLike[str] | str]" = None, sync_dir: bool = True) -> None:
        f = os.fdopen(self._open(digest), "rb", buffering=0)
        buf = bytearray(CHUNK)
        mv = memoryview(buf)
        _copy_verified(f, lambda: mv[:f.readinto(buf) or 0], digest, size, os.fspath(path), tmp_dir, sync_dir)

    def exists(self, digest: str) -> bool:
        self._dirs()
        return os.path.exists(self._path(digest))

    def size(self, digest: str) -> Optional[int]:
        self._dirs()
        try:
            return os.stat(self._path(digest)).st_size
        except FileNotFoundError:
            return None

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
                if DIGEST_RE.match(e.name):
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
        # a hung NFS mount blocks stat() for minutes: asked within a bounded wait
        e = _bounded_probe(self.url, self._dirs, self.timeout if timeout is None else timeout)
        if e is not None:
            if isinstance(e, RemoteUnavailable):
                raise e
            raise RemoteUnavailable(f"team blob store {self.url}: {e}") from e


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

    def get_to(self, digest: str, size: int, path: "os.PathLike[str] | str", *,
               tmp_dir: "Optional[os.PathLike[str] | str]" = None, sync_dir: bool = True) -> None:
        f = self._guard("open", lambda: self.fs.open(self._path(digest), "rb"), digest)
        _copy_verified(f, lambda: self._guard("read", lambda: f.read(CHUNK), digest), digest, size, os.fspath(path),
                       tmp_dir, sync_dir)

    def exists(self, digest: str) -> bool:
        return bool(self._guard("exists", lambda: self.fs.exists(self._path(digest))))

    def size(self, digest: str) -> Optional[int]:
        try:
            return int(self._guard("size", lambda: self.fs.size(self._path(digest)), digest))
        except MissingBlob:
            return None

    def list(self) -> Iterator[Tuple[str, int, float]]:
        found = self._guard("list", lambda: self.fs.find(f"{self.root}/blobs", detail=True))
        for name, info in sorted(found.items()):
            d = name.rsplit("/", 1)[-1]
            if not DIGEST_RE.match(d):
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
        e = _bounded_probe(self.url, lambda: self._guard("ping", lambda: self.fs.ls(self.root)
                                                          if self.fs.exists(self.root) else None),
                           self.timeout if timeout is None else timeout)
        if e is not None:
            raise e


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
        from .s3 import S3Blobs  # boto3 only when an s3:// store is used

        return S3Blobs(url, u.netloc, unquote(u.path), **kw)
    if u.scheme == "file":
        if u.netloc not in ("", "localhost"):
            raise StoreConfigError(f"{url}: a file:// URL names a local path (file:///dir)")
        return FileBlobs(url, unquote(u.path), **kw)
    if not u.scheme:
        raise StoreConfigError(f"{url}: not a URL (file:///dir, s3://bucket/prefix, ...)")
    return FsspecBlobs(url, **kw)
