"""``file:///dir``: blobs as plain files in a (shared) directory, which must exist."""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from ...errors import RemoteUnavailable
from ...store.blobs import fsync_dir
from .common import (
    CHUNK,
    DIGEST_RE,
    Data,
    MissingBlob,
    RemoteBlobs,
    Source as _Source,
    blob_key,
    bounded_probe as _bounded_probe,
    check_bytes as _check,
    copy_verified as _copy_verified,
    unlink_quietly as _unlink,
)


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
        from ...store import tmpfiles

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
            fsync_dir(os.path.dirname(final))
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

    def get_to(self, digest: str, size: int, path: os.PathLike[str] | str, *,
               tmp_dir: os.PathLike[str] | str | None = None, sync_dir: bool = True) -> None:
        f = os.fdopen(self._open(digest), "rb", buffering=0)
        buf = bytearray(CHUNK)
        mv = memoryview(buf)
        _copy_verified(f, lambda: mv[:f.readinto(buf) or 0], digest, size, os.fspath(path), tmp_dir, sync_dir)

    def exists(self, digest: str) -> bool:
        self._dirs()
        return os.path.exists(self._path(digest))

    def size(self, digest: str) -> int | None:
        self._dirs()
        try:
            return os.stat(self._path(digest)).st_size
        except FileNotFoundError:
            return None

    def exists_many(self, digests: Iterable[str]) -> set[str]:
        self._dirs()
        return {d for d in dict.fromkeys(digests) if os.path.exists(self._path(d))}

    def list(self) -> Iterator[tuple[str, int, float]]:
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

    def ping(self, timeout: float | None = None) -> None:
        # a hung NFS mount blocks stat() for minutes: asked within a bounded wait
        e = _bounded_probe(self.url, self._dirs, self.timeout if timeout is None else timeout)
        if e is not None:
            if isinstance(e, RemoteUnavailable):
                raise e
            raise RemoteUnavailable(f"team blob store {self.url}: {e}") from e
