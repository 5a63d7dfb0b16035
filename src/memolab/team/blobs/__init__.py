"""Remote content-addressed blobs: the object-storage half of the team store.

``open_blobs(url)`` returns a ``RemoteBlobs`` for

- ``s3://bucket/prefix``: any S3-protocol store through boto3 (``team/blobs/s3.py``,
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
- **Back-pressure is retried.** S3's throttling (503 SlowDown) and 500s are
  asked again with jittered back-off within the timeout (``S3Blobs._call``).
- **Quick failure.** Network and endpoint failures (refused, timed out, other 5xx,
  throttling past the timeout, no such bucket, bad credentials) raise ``memolab.errors.RemoteUnavailable``
  naming the URL. Connect/read timeouts are ``MEMOLAB_REMOTE_TIMEOUT`` seconds
  (default 10), one retry at most; a batch stops at its first such failure.
  Local failures (a full disk in ``get_to``) raise their own ``OSError``.
- **Concurrent transfers.** ``put_many``/``get_many_to``/``exists_many`` use up
  to ``MEMOLAB_REMOTE_CONCURRENCY`` (default 16) requests at once; large objects
  (16 MB and more) are cut into 8 MB parts moved in parallel (multipart uploads,
  ranged GETs), from a file or a memoryview without copying the whole object.
  Ranged GETs are skipped for an endpoint on loopback (one connection is not
  the bottleneck there; moto even reads the whole object for every range);
  ``MEMOLAB_REMOTE_RANGED_GETS=1``/``0`` forces them on/off. Worker threads are
  daemons started per call: a transfer never keeps the interpreter from exiting.

One module per backend (``file``, ``fsspec``, ``s3``) over ``common`` (the
interface and what the backends share); this module opens a store by URL.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlparse

from ...errors import StoreConfigError
from .common import (
    CHUNK,
    DIGEST_RE,
    MULTIPART_MIN,
    PART_SIZE,
    Data,
    MissingBlob,
    RemoteBlobs,
    Source,
    blob_key,
    remote_concurrency,
    remote_ranged_gets,
    remote_timeout,
    run_all,
    write_all,
)
from .file import FileBlobs
from .fsspec import FsspecBlobs

__all__ = ["CHUNK", "DIGEST_RE", "MULTIPART_MIN", "PART_SIZE", "Data", "FileBlobs", "FsspecBlobs", "MissingBlob",
           "RemoteBlobs", "Source", "blob_key", "open_blobs", "remote_concurrency", "remote_ranged_gets",
           "remote_timeout", "run_all", "write_all"]


def open_blobs(url: str, *, timeout: float | None = None, concurrency: int | None = None,
               ranged_gets: bool | None = None) -> RemoteBlobs:
    """The remote blob store at ``url`` (``s3://bucket/prefix``, ``file:///dir``, fsspec URLs).

    ``timeout``, ``concurrency``, ``ranged_gets`` default to ``MEMOLAB_REMOTE_TIMEOUT``
    (10 s), ``MEMOLAB_REMOTE_CONCURRENCY`` (16), ``MEMOLAB_REMOTE_RANGED_GETS`` (auto:
    on, except for an S3 endpoint on loopback).
    Nothing is contacted here: the first operation (or ``ping``) is."""
    u = urlparse(url)
    kw: dict[str, Any] = {"timeout": timeout, "concurrency": concurrency, "ranged_gets": ranged_gets}
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
