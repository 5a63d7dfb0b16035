"""The bytes of a result kept in the index row itself (small results, ``INLINE_MAX``): split
into payload and buffers, each checked against its digest, and unpickled."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from blake3 import blake3 as _blake3

from ..errors import CorruptBlob, StoreMiss
from .blobs import digest_bytes

#: ``digest_bytes`` hashes a ``bytes`` shorter than this in one thread, as ``split_inline``'s short way does
_ONE_THREAD = 8 << 20

#: ``_pickle.loads``, once the first result is loaded
_unpickle: Any = None


def loads_result(payload: bytes, buffers: Sequence[Any]) -> Any:
    """``pickling.loads`` without importing ``pickling`` (nor ``pickle``, 3 ms of a
    process's first hit) unless the payload names it or loading fails: plain
    ``_pickle``, the same unpickler ``pickle.loads`` is."""
    global _unpickle
    if _unpickle is None:  # (an ``import`` statement on every hit costs a module lookup and a spec check)
        import _pickle

        _unpickle = _pickle.loads
    try:
        return _unpickle(payload, buffers=buffers)
    except StoreMiss:
        raise
    except Exception as e:  # unpickling runs the stored classes' own code (__setstate__, reducers): said as a load error
        from .. import pickling
        from ..pickling import moved

        if moved.names_moved(e):  # stored before the layout: memolab's modules by their old names
            return pickling.loads(payload, buffers)
        raise pickling.load_error(e) from e


def inline_problem(row: dict[str, Any]) -> str | None:
    """Why the inline bytes of ``row`` (payload, buffers, payload_size, inline) do not match
    what the row says of them, or None: what a load of it would refuse (``doctor``)."""
    try:
        refs = [(d, int(n)) for d, n in json.loads(row["buffers"] or "[]")]
        split_inline(row["inline"], row, refs)
    except CorruptBlob as e:
        return e.reason
    except (ValueError, TypeError, KeyError):
        return "damaged index row (its buffers or sizes do not decode)"
    return None


def split_inline(inline: bytes, row: dict[str, Any], refs: list[tuple[str, int]]) -> tuple[bytes, tuple[memoryview, ...]]:
    """Payload and buffers of an inline row, each checked against its digest
    (the row may be damaged or hand-edited like any file): ``CorruptBlob`` if not."""
    n = row["payload_size"]
    if not refs and type(inline) is bytes and len(inline) == n and n < _ONE_THREAD:
        # (most small results: no buffers, the column is the payload. ``digest_bytes`` of a
        # ``bytes`` this size, without its checks and call: a third of a store hit's load)
        if _blake3(inline).digest().hex() != row["payload"]:
            raise CorruptBlob(f"inline payload of #{row['id']} does not match its digest")
        return inline, ()
    want = n + sum(size for _, size in refs) if refs else n
    if len(inline) != want:
        raise CorruptBlob(f"inline result of #{row['id']} has {len(inline)} bytes, expected {want}")
    mv = memoryview(inline) if refs else None
    payload = mv[:n] if mv is not None else inline  # (no buffers, most small results: the column as it is)
    if digest_bytes(payload) != row["payload"]:
        raise CorruptBlob(f"inline payload of #{row['id']} does not match its digest")
    views = []
    at = n
    for d, size in refs:
        v = mv[at:at + size]  # type: ignore[index]  # refs: the column holds buffers, so mv is set
        at += size
        if digest_bytes(v) != d:
            raise CorruptBlob(f"inline buffer {d[:12]} of #{row['id']} does not match its digest")
        views.append(v)
    return bytes(payload), tuple(views)
