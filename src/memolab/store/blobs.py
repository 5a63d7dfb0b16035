"""Content-addressed blob files.

A blob is named by the BLAKE3 digest of its bytes and written the only way that
survives a crash: into a temporary file in the same file system, fsynced,
renamed over its final name, and the directory fsynced. Readers never see a
partial blob under a final name; a blob that is nonetheless damaged (a disk
error, a hand edit) fails verification and is moved to ``quarantine/``.

Verification of large blobs: hashing 1 GiB on every load would make a
memory-mapped load cost a second. A blob that verified once gets a stamp
(size, mtime_ns, inode), as git's index does; a later load whose ``stat``
matches the stamp skips re-hashing. ``memolab doctor`` re-hashes everything.
Pickle payloads are always verified in full: they run code when loaded.

A load never writes: a stamp earned by verifying during a load is kept in this
process and handed to ``defer_stamp`` (the store writes it with its next batch
of hit counts), so reading works on a read-only or full disk.
"""
from __future__ import annotations

import errno
import functools
import mmap
import os
import stat
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path, PosixPath, WindowsPath
from typing import Any

import blake3

from ..errors import CorruptBlob, swallowed
from . import layout, tmpfiles

Buffer = bytes | bytearray | memoryview
#: a blob is read without following a link at its name (``layout``: memolab never follows one)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
PARALLEL_MIN = 8 << 20  # use both cores for blobs at least this large
_OVERLAP_MIN = 16 << 20  # hash while writing for blobs at least this large
#: bytes between two steps of a progress bar (a write, a hash): small enough for a bar to move
#: every ~50 ms on a fast disk, large enough that the steps cost nothing
_STEP = 32 << 20

#: ``progress(n)``: n more bytes written or verified (``memolab.settings.progress.Bar.update``)
Progress = Callable[[int], None] | None


def digest_bytes(data: Buffer, progress: Progress = None) -> str:
    if type(data) is bytes and len(data) < PARALLEL_MIN and progress is None:
        # (a hit's inline payload: no view to make; ``hexdigest`` builds its text a character at a
        # time, ``digest().hex()`` in one C call: the same text, a third fewer instructions)
        return blake3.blake3(data).digest().hex()
    mv = memoryview(data)
    if mv.nbytes >= PARALLEL_MIN:
        if progress is None or mv.nbytes <= _STEP:
            h = blake3.blake3(mv, max_threads=blake3.blake3.AUTO)
        else:  # in steps, to report them: the same digest (BLAKE3 is incremental)
            h = blake3.blake3(max_threads=blake3.blake3.AUTO)
            flat = mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv
            for i in range(0, flat.nbytes, _STEP):
                h.update(flat[i:i + _STEP])
                progress(min(_STEP, flat.nbytes - i))
            return h.hexdigest()
        digest = h.hexdigest()
    else:
        digest = blake3.blake3(mv).digest().hex()
    if progress is not None:
        progress(mv.nbytes)
    return digest


def fsync_dir(path: os.PathLike[str] | str) -> None:
    """Make the entries of directory ``path`` (a rename into it) durable; where the file
    system cannot fsync a directory, nothing more can be done and nothing is raised."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        swallowed("store.blobs: fsync_dir")
    finally:
        os.close(fd)


Stamp = tuple[int, int, int]  # size, mtime_ns, inode

# Which blob file each of our mappings came from, so a read-only mapping can be
# re-mapped copy-on-write on demand (weak: a dropped mapping leaves no entry).
_mapped_from: weakref.WeakKeyDictionary[mmap.mmap, str] = weakref.WeakKeyDictionary()


def mapped_blob(buf: Any) -> str | None:
    """The path of the blob ``buf`` maps in full (read-only), or None for any other buffer."""
    try:
        mv = memoryview(buf)
    except TypeError:
        return None
    if not mv.readonly or not isinstance(mv.obj, mmap.mmap) or mv.nbytes != len(mv.obj):
        return None
    return _mapped_from.get(mv.obj)


def copy_on_write(buf: Any) -> Any:
    """A private, writable view of ``buf``'s bytes, without a copy where possible.

    torch tensors assume their memory is writable (an in-place op on a
    read-only mapping kills the process), while numpy arrays must stay
    read-only so their digests can be trusted. A mapping of one of our blobs is
    mapped again copy-on-write; anything else is copied.
    """
    mv = memoryview(buf)
    if not mv.readonly:
        return buf
    path = _mapped_from.get(mv.obj) if isinstance(mv.obj, mmap.mmap) else None
    if path is not None and mv.nbytes == len(mv.obj):  # type: ignore[arg-type]  # an mmap (path found)
        try:
            with open(path, "rb") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            if len(m) == mv.nbytes:
                return memoryview(m)
        except OSError:
            swallowed("store.blobs: copy_on_write")  # the blob was collected since: fall back to a copy
    return bytearray(mv)


class BlobFolder:
    """Blobs under ``root/blobs/ab/cdef…``; ``root/tmp`` and ``root/quarantine`` beside."""

    def __init__(self, root: Path,
                 get_stamp: Callable[[str], Stamp | None] = lambda d: None,
                 set_stamp: Callable[[str, Stamp], None] = lambda d, s: None,
                 defer_stamp: Callable[[str, Stamp], None] = lambda d, s: None) -> None:
        self.root = root if type(root) in (PosixPath, WindowsPath) else Path(root)  # (a Path: not parsed again)
        base = os.fspath(self.root)
        for name in ("blobs", "tmp"):
            # (a store opened again: one stat, where mkdir raised and caught EEXIST; by name, no Path made)
            if not os.path.isdir(os.path.join(base, name)):
                (self.root / name).mkdir(parents=True, exist_ok=True)
        self._get_stamp = get_stamp
        self._set_stamp = set_stamp
        self._defer_stamp = defer_stamp
        #: digest -> stamp of blobs verified (or written) by this process
        self._verified: dict[str, Stamp] = {}

    # (the folders' Paths, made on first use: a hit of a result kept in its index row uses none of them)
    @functools.cached_property
    def dir(self) -> Path:
        return self.root / "blobs"

    @functools.cached_property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @functools.cached_property
    def quarantine_dir(self) -> Path:
        return self.root / "quarantine"

    def path(self, digest: str) -> Path:
        """Where blob ``digest`` lives. A name that is no digest (read from a damaged or
        crafted index row: ``../../Documents/thesis.tex``) is never made a path: it raises
        ``CorruptBlob``, which takes the row out of use like any damaged blob."""
        if not layout.is_digest(digest):
            raise CorruptBlob(f"damaged index row: {str(digest)[:80]!r} is not a blob digest")
        return self.dir / digest[:2] / digest[2:]

    @staticmethod
    def _stamp(st: os.stat_result) -> Stamp:
        return (st.st_size, st.st_mtime_ns, st.st_ino)

    def put(self, data: Buffer, digest: str | None = None, progress: Progress = None) -> tuple[str, int]:
        """Store ``data``; returns (digest, size). Existing intact blobs are reused.
        ``progress(n)`` is told of the bytes as they are written."""
        mv = memoryview(data).cast("B") if memoryview(data).ndim != 1 or memoryview(data).format != "B" else memoryview(data)
        size = mv.nbytes
        if digest is None and size >= _OVERLAP_MIN:
            return self._put_overlapped(mv, progress)
        digest = digest or digest_bytes(mv)
        final = self.path(digest)
        if self._intact(final, digest, size):
            if progress is not None:
                progress(size)
            return digest, size  # deduplicated: the same bytes are already here
        tmp = self._write_tmp(mv, digest[:16], progress)
        self._publish(tmp, final, digest)
        return digest, size

    def _put_overlapped(self, mv: memoryview, progress: Progress = None) -> tuple[str, int]:
        """Hash and write at the same time (BLAKE3 releases the GIL): a large store
        costs about one write instead of a hash plus a write. The price: bytes
        that turn out to be stored already were written once for nothing."""
        out: list[Any] = []

        def hash_it() -> None:
            try:
                out.append(blake3.blake3(mv).hexdigest())
            except BaseException as e:  # handed to the writer below
                out.append(e)

        th = threading.Thread(target=hash_it, name="memolab-blob-hash", daemon=True)
        th.start()
        try:
            tmp = self._write_tmp(mv, "pending", progress)
        finally:
            th.join()
        if isinstance(out[0], BaseException):
            tmp.unlink(missing_ok=True)
            raise out[0]
        digest: str = out[0]
        final = self.path(digest)
        if self._intact(final, digest, mv.nbytes):
            tmp.unlink(missing_ok=True)
            return digest, mv.nbytes
        self._publish(tmp, final, digest)
        return digest, mv.nbytes

    def _intact(self, final: Path, digest: str, size: int) -> bool:
        """Is an intact copy already stored? If so, mark it as just used.

        The touch matters for garbage collection: a writer that reuses an old
        blob records its evaluation a moment later, and ``gc`` spares recent
        blobs while computations are in flight (``Store.unreferenced_blobs``).
        """
        try:
            st = final.lstat()
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            # a link, or a file another name also holds (a hard link memolab did not make): never
            # touched in place; our own copy is written and renamed over the store's name
            return False
        if not (st.st_size == size and self._get_stamp(digest) == self._stamp(st)):
            return False
        try:
            os.utime(final, follow_symlinks=False)
            self._set_stamp(digest, self._stamp(final.stat()))  # verified a moment ago: carry the stamp over
        except OSError:
            return False  # collected in between, or not ours to touch: write it again
        return True

    def mtime(self, digest: str) -> float:
        try:
            return self.path(digest).lstat().st_mtime
        except FileNotFoundError:
            return 0.0

    def _write_tmp(self, mv: memoryview, name: str, progress: Progress = None) -> Path:
        tmp = self.tmp / tmpfiles.tmp_name(name)  # names its writer: litter of a dead one is reclaimed at once
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        step = 1 << 30 if progress is None else _STEP
        try:
            view = mv
            while view.nbytes:
                n = os.write(fd, view[:step])
                view = view[n:]
                if progress is not None:
                    progress(n)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        return tmp

    def _publish(self, tmp: Path, final: Path, digest: str) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, final)
        fsync_dir(final.parent)
        try:
            st = final.stat()
        except FileNotFoundError:
            return  # collected at once by a concurrent gc: the record notices and puts it again
        self._set_stamp(digest, self._stamp(st))

    def get(self, digest: str, size: int, *, mapped: bool = False, verify: str = "stamp", writable: bool = False,
            progress: Progress = None) -> Buffer:
        """Read a blob. ``verify='always'`` re-hashes; ``'stamp'`` trusts a matching stamp.

        ``mapped`` maps the file read-only: numpy arrays over it are immutable,
        which lets the identity cache trust their digest. ``writable`` (with
        ``mapped``) maps copy-on-write instead: the caller may write to its
        pages, the blob file never changes. ``copy_on_write`` turns a read-only
        mapping into such a private one later (torch storages need it).

        Raises ``CorruptBlob`` (a miss) when the blob is missing, has the wrong
        size or does not match its digest; a damaged blob is quarantined.
        """
        p = self.path(digest)
        try:
            fd = os.open(p, _READ_FLAGS)
        except FileNotFoundError:
            raise CorruptBlob(f"blob {digest[:12]} is missing") from None
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.EMLINK):  # a link at a blob's name: not ours, never followed
                raise CorruptBlob(f"blob {digest[:12]} is a link, not a file memolab wrote") from None
            raise
        try:
            st = os.fstat(fd)
            if st.st_size != size:
                self.quarantine(digest)
                raise CorruptBlob(f"blob {digest[:12]} has {st.st_size} bytes, expected {size}")
            if size == 0:
                data: Buffer = b""
            elif mapped:
                m = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY if writable else mmap.ACCESS_READ)
                _mapped_from[m] = str(p)
                data = memoryview(m)
            else:
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read()
            stamp = self._stamp(st)
            if verify == "always" or (self._verified.get(digest) != stamp and self._get_stamp(digest) != stamp):
                if digest_bytes(data, progress) != digest:
                    self._verified.pop(digest, None)
                    self.quarantine(digest)
                    raise CorruptBlob(f"blob {digest[:12]} does not match its digest")
                if self._verified.get(digest) != stamp:
                    self._verified[digest] = stamp
                    self._defer_stamp(digest, stamp)  # never a write on the read path
            elif progress is not None:
                progress(size)  # trusted by its stamp: nothing to read now
            return data
        finally:
            os.close(fd)

    def trust(self, digest: str, st: os.stat_result) -> None:
        """The file of ``digest`` (whose stat is ``st``) was verified a moment ago by whoever
        wrote it (a download streamed against its digest): loads trust it by stamp from now on."""
        self._set_stamp(digest, self._stamp(st))

    def verify(self, digest: str) -> str | None:
        """Re-hash one blob in full; returns a problem description or None."""
        p = self.path(digest)
        try:
            st = p.lstat()
        except FileNotFoundError:
            return "missing"
        if not stat.S_ISREG(st.st_mode):
            return "not a file memolab wrote (a link): left alone"
        try:
            data = self.get(digest, st.st_size, mapped=True, verify="always")
            del data
        except CorruptBlob as e:
            return e.reason
        return None

    def quarantine(self, digest: str) -> None:
        """Move a damaged blob into ``quarantine/`` (the evidence). Only a regular file at the
        blob's name, moved relative to descriptors of folders opened without following links
        (``layout.open_dir``): a link, or a folder swapped for one, is never followed."""
        self.path(digest)  # a digest, or CorruptBlob
        try:
            self.quarantine_dir.mkdir(exist_ok=True)
            with layout.open_dir(self.root, "blobs", digest[:2]) as src, layout.open_dir(self.root, "quarantine") as dst:
                if layout.regular_file(digest[2:], src) is None:
                    return
                # unique name: a second damaged copy must not overwrite the first
                os.rename(digest[2:], f"{digest}.{time.time_ns()}.{uuid.uuid4().hex[:6]}", src_dir_fd=src, dst_dir_fd=dst)
        except FileNotFoundError:
            pass

    def delete(self, digest: str) -> None:
        """Remove the blob file ``digest`` (a regular file only, never through a link)."""
        self.path(digest)
        try:
            with layout.open_dir(self.root, "blobs", digest[:2]) as fd:
                if layout.regular_file(digest[2:], fd) is not None:
                    os.unlink(digest[2:], dir_fd=fd)
        except FileNotFoundError:
            pass

    def size(self, digest: str) -> int:
        try:
            return self.path(digest).lstat().st_size
        except FileNotFoundError:
            return 0

    def __iter__(self) -> Iterator[str]:
        """Every stored digest, in order. Plain strings from ``scandir``: a
        listing of 100k blobs must not build and sort 100k ``Path`` objects."""
        # only what memolab writes: the 256 fan-out folders and files named by digests; a link
        # (to a folder or a file) or any other name is not ours and is never listed, so never
        # verified, quarantined or collected
        try:
            subs = sorted(e.name for e in os.scandir(self.dir)
                          if layout.is_fan_out(e.name) and e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return
        for sub in subs:
            try:
                names = sorted(e.name for e in os.scandir(os.path.join(self.dir, sub))
                               if e.is_file(follow_symlinks=False) and layout.is_digest(sub + e.name))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                yield sub + name

    def clean_tmp(self, older_than: float = 3600.0) -> int:
        """Remove temporary files left by crashed writers (dead ones at once; see ``tmpfiles``)."""
        return len(tmpfiles.reclaim(self.tmp, older_than))
