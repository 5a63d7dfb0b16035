"""What every team blob backend shares: the constants and settings, the source
of a put (memory or file, read in windows), concurrent batches (``run_all``),
the bounded probe of a ping, writing a downloaded blob verified (``finish``,
``copy_verified``), and the interface itself (``RemoteBlobs``). The rules every
backend keeps are in the package docstring (``memolab.team.blobs``)."""
from __future__ import annotations

import builtins
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, Union

from ...errors import CorruptBlob, RemoteUnavailable
from ...settings import config
from ...store.blobs import fsync_dir

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


def remote_ranged_gets() -> bool | None:
    """``MEMOLAB_REMOTE_RANGED_GETS``: True on, False off, None auto (see ``S3Blobs.ranged``)."""
    return config.env_setting("MEMOLAB_REMOTE_RANGED_GETS")


def blob_key(digest: str) -> str:
    """The key of ``digest`` under a store's prefix: ``blobs/ab/abcd…``. A name read from a team
    row that is no digest (``../../x``: a crafted or damaged row) never becomes a key or a path:
    ``CorruptBlob``, as for a blob that does not verify."""
    from ...store.layout import is_digest

    if not is_digest(digest):
        raise CorruptBlob(f"damaged team row: {str(digest)[:80]!r} is not a blob digest")
    return f"blobs/{digest[:2]}/{digest}"


# -- what a put may be given ----------------------------------------------------------------

class Source:
    """The bytes of one put: in memory (a zero-copy view) or in a file (read as needed)."""

    def __init__(self, data: Data) -> None:
        self.path: str | None = None
        self.mv: memoryview | None = None
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

    def window(self, offset: int, length: int) -> _Window:
        return _Window(self, offset, length)


class _Window:
    """A read-only, seekable file object over ``length`` bytes of a source from ``offset``.

    Over memory it hands out memoryview slices (no copy; http.client and the
    checksum code accept any bytes-like); over a file it reads with ``pread``.
    Seekable so botocore can compute a checksum and rewind, and retry."""

    def __init__(self, src: Source, offset: int, length: int) -> None:
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

def run_all(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(x) for x in items]`` on up to ``workers`` daemon threads, results in order.

    The first ``RemoteUnavailable`` stops the batch (items not yet started are
    skipped: a dead network costs one timeout, not one per item) and is raised.
    Any other error lets the rest finish, then the first one is raised. The caller's
    thread is one of the workers (``workers=1``: no thread at all)."""
    n = len(items)
    if n == 0:
        return []
    results: list[Any] = [None] * n
    errors: list[tuple[int, BaseException]] = []
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


def bounded_probe(url: str, probe: Callable[[], Any], timeout: float) -> BaseException | None:
    """Run ``probe`` on a daemon thread and wait at most ``timeout`` seconds: a file system
    that hangs (a dead NFS server) must cost a bounded wait, not minutes. What it raised,
    or None; ``RemoteUnavailable`` if it gave no answer in time."""
    out: list[BaseException] = []

    def run() -> None:
        try:
            probe()
        except BaseException as e:  # handed to the caller, which raises it
            out.append(e)

    t = threading.Thread(target=run, name="memolab-remote-ping", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise RemoteUnavailable(f"team blob store {url}: no answer within {timeout:g} s")
    return out[0] if out else None


# -- writing a verified file ----------------------------------------------------------------


def write_all(fd: int, data: Any, at: int | None = None) -> None:
    """``os.write`` (or ``pwrite`` at ``at``) until every byte is out: a write may be short."""
    mv = memoryview(data)
    while mv.nbytes:
        if at is None:
            n = os.write(fd, mv)
        else:
            n = os.pwrite(fd, mv, at)
            at += n
        mv = mv[n:]


def tmp_beside(path: str, tmp_dir: os.PathLike[str] | str | None = None) -> str:
    """A temporary name in ``tmp_dir`` (default: ``path``'s directory; it must be on the same
    file system as ``path``, for the final rename), named as the local store's blob writers
    name theirs (``store.tmpfiles``): a download killed midway into a store's ``tmp/`` is
    litter that store reclaims at once, its writer being provably dead."""
    from ...store import tmpfiles

    where = os.fspath(tmp_dir) if tmp_dir is not None else os.path.dirname(os.path.abspath(path))
    return os.path.join(where, tmpfiles.tmp_name("download"))


def finish(tmp: str, fd: int, path: str, digest: str, got: str, size: int, written: int,
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
        unlink_quietly(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def copy_verified(source: Any, read: Callable[[], Any], digest: str, size: int, path: str,
                   tmp_dir: os.PathLike[str] | str | None, sync_dir: bool) -> None:
    """``get_to`` of a store read as a stream: ``read()``'s chunks (until an empty one, or
    past ``size``) hashed and written to a temporary file beside ``path``, published there
    only with the right bytes (``finish``). ``source``, what ``read`` reads, is closed
    in any case; a chunk may be a view that the next ``read()`` overwrites."""
    with source:
        tmp = tmp_beside(path, tmp_dir)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        h, written = new_hasher(), 0
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
            unlink_quietly(tmp)
            raise
    finish(tmp, fd, path, digest, h.hexdigest(), size, written, sync_dir)


def unlink_quietly(p: str) -> None:
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass


def new_hasher() -> Any:
    import blake3

    return blake3.blake3()


def check_bytes(data: Any, digest: str, size: int) -> Any:
    from ...store.blobs import digest_bytes

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

    def __init__(self, url: str, *, timeout: float | None = None, concurrency: int | None = None,
                 ranged_gets: bool | None = None) -> None:
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

    def get_to(self, digest: str, size: int, path: os.PathLike[str] | str, *,
               tmp_dir: os.PathLike[str] | str | None = None, sync_dir: bool = True) -> None:
        """Stream ``digest`` into the file ``path``, verified on the way: ``path`` appears
        (atomically, fsynced, replacing any file there) only with the right bytes.

        The bytes are written to a temporary file in ``tmp_dir`` (default: beside ``path``;
        same file system) and renamed onto ``path`` once verified and fsynced. With
        ``sync_dir=False`` the caller fsyncs ``path``'s directory itself (see ``finish``)."""
        raise NotImplementedError

    def exists(self, digest: str) -> bool:
        raise NotImplementedError

    def size(self, digest: str) -> int | None:
        """The stored size of ``digest`` (one HEAD/stat), or None if absent: for blobs whose
        size no row records (a logs bundle). Not verified: ``get`` still checks it."""
        raise NotImplementedError

    # batches
    def put_many(self, items: Sequence[tuple[str, Data]]) -> builtins.list[bool]:
        return run_all(lambda it: self.put(it[0], it[1]), list(items), self.concurrency)

    def get_many_to(self, items: Sequence[tuple[str, int, os.PathLike[str] | str]], *,
                    tmp_dir: os.PathLike[str] | str | None = None, sync_dir: bool = True) -> None:
        """``get_to`` for each ``(digest, size, path)``, concurrently. A corrupt or missing
        blob does not stop the others (their files are in place); its error is raised at the end."""
        run_all(lambda it: self.get_to(it[0], it[1], it[2], tmp_dir=tmp_dir, sync_dir=sync_dir), list(items),
                self.concurrency)

    def exists_many(self, digests: Iterable[str]) -> set[str]:
        ds = list(dict.fromkeys(digests))
        found = run_all(self.exists, ds, self.concurrency)
        return {d for d, ok in zip(ds, found, strict=False) if ok}

    def list(self) -> Iterator[tuple[str, int, float]]:
        """Every stored blob as (digest, size, last-modified epoch seconds), for ``gc --remote``."""
        raise NotImplementedError

    def delete(self, digests: Iterable[str]) -> None:
        """Delete these blobs (absent ones are fine), in batches."""
        raise NotImplementedError

    def ping(self, timeout: float | None = None) -> None:
        """Return quickly if the store answers, else raise ``RemoteUnavailable``."""
        raise NotImplementedError

    def close(self) -> None:
        pass
