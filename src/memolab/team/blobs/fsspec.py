"""Any other scheme fsspec knows (``gs://``, ``az://``, ``memory://``...), when fsspec and
its backend are installed: best effort (see ``FsspecBlobs``). fsspec is imported when
such a store is opened, never at ``import memolab.team.blobs``."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ...errors import RemoteUnavailable, StoreConfigError
from .common import (
    CHUNK,
    DIGEST_RE,
    Data,
    MissingBlob,
    R,
    RemoteBlobs,
    Source as _Source,
    blob_key,
    bounded_probe as _bounded_probe,
    check_bytes as _check,
    copy_verified as _copy_verified,
)


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

    def _guard(self, what: str, fn: Callable[[], R], digest: str | None = None) -> R:
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

    def get_to(self, digest: str, size: int, path: os.PathLike[str] | str, *,
               tmp_dir: os.PathLike[str] | str | None = None, sync_dir: bool = True) -> None:
        f = self._guard("open", lambda: self.fs.open(self._path(digest), "rb"), digest)
        _copy_verified(f, lambda: self._guard("read", lambda: f.read(CHUNK), digest), digest, size, os.fspath(path),
                       tmp_dir, sync_dir)

    def exists(self, digest: str) -> bool:
        return bool(self._guard("exists", lambda: self.fs.exists(self._path(digest))))

    def size(self, digest: str) -> int | None:
        try:
            return int(self._guard("size", lambda: self.fs.size(self._path(digest)), digest))
        except MissingBlob:
            return None

    def list(self) -> Iterator[tuple[str, int, float]]:
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
        existing = [p for p in paths if self._guard("exists", lambda p=p: self.fs.exists(p))]  # type: ignore[misc]  # (a default it cannot type)
        if existing:
            self._guard("delete", lambda: self.fs.rm(existing))

    def ping(self, timeout: float | None = None) -> None:
        e = _bounded_probe(self.url, lambda: self._guard("ping", lambda: self.fs.ls(self.root)
                                                          if self.fs.exists(self.root) else None),
                           self.timeout if timeout is None else timeout)
        if e is not None:
            raise e
