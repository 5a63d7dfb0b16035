"""The bytes of a result kept in the index row itself (small results, ``INLINE_MAX``): split
into payload and buffers, each checked against its digest, and unpickled."""
from __future__ import annotations

import json
import struct
import sys
from collections.abc import Sequence
from typing import Any

from blake3 import blake3 as _blake3

from ..errors import CorruptBlob, StoreMiss
from .blobs import PARALLEL_MIN, digest_bytes

#: ``_pickle.loads``, once the first result is loaded
_unpickle: Any = None


def loads_result(payload: bytes, buffers: Sequence[Any]) -> Any:
    """``pickling.loads`` without importing ``pickling`` (nor ``pickle``, 3 ms of a
    process's first hit) unless the payload names it or loading fails: plain
    ``_pickle``, the same unpickler ``pickle.loads`` is. While no module of the process has
    loaded ``_pickle`` (its import: about 0.6 ms of a fresh process's first hit), a plain
    scalar's pickle is read here (``plain_scalar``)."""
    global _unpickle
    if _unpickle is None:  # (an ``import`` statement on every hit costs a module lookup and a spec check)
        if not buffers and "_pickle" not in sys.modules:
            plain, value = plain_scalar(payload)
            if plain:
                return value
        import _pickle

        _unpickle = _pickle.loads
    try:
        # (no buffers: no keyword either, 700 instructions of a small hit. Without ``buffers=`` a
        # pickle that asks for an out-of-band buffer fails as it does with none given)
        return _unpickle(payload, buffers=buffers) if buffers else _unpickle(payload)
    except StoreMiss:
        raise
    except Exception as e:  # unpickling runs the stored classes' own code (__setstate__, reducers): said as a load error
        from .. import pickling
        from ..pickling import moved

        if moved.names_moved(e):  # stored before the layout: memolab's modules by their old names
            return pickling.loads(payload, buffers)
        raise pickling.load_error(e) from e


_unpack_double = struct.Struct(">d").unpack_from
#: per opcode of a scalar: (bytes of its length field, 0: a fixed size; that size or the field's width)
_SCALAR_OPS = {
    0x4E: (0, 0),  # NONE
    0x88: (0, 0),  # NEWTRUE
    0x89: (0, 0),  # NEWFALSE
    0x4B: (0, 1),  # BININT1: unsigned
    0x4D: (0, 2),  # BININT2: unsigned, little-endian
    0x4A: (0, 4),  # BININT: signed, little-endian
    0x47: (0, 8),  # BINFLOAT: big-endian double
    0x8A: (1, 0),  # LONG1: signed, little-endian, its length in 1 byte
    0x8C: (1, 0),  # SHORT_BINUNICODE
    0x58: (4, 0),  # BINUNICODE
    0x43: (1, 0),  # SHORT_BINBYTES
    0x42: (4, 0),  # BINBYTES
}
_NOT_PLAIN = (False, None)


def plain_scalar(p: bytes) -> tuple[bool, Any]:
    """(True, the value) when ``p`` is the pickle of one ``None``, bool, int, float, str or bytes
    written by protocol 2 to 5 (``PROTO``, an optional ``FRAME`` holding exactly the rest, the
    scalar's one opcode, an optional ``MEMOIZE``, ``STOP`` as the last byte); else (False, None),
    and ``_pickle`` reads it. Such a pickle names no class and runs no code: its value is what
    ``_pickle.loads`` gives (strings decoded as it decodes them, ``surrogatepass``), pinned on
    every opcode and on damaged and truncated payloads by
    ``tests/test_first_call.py::test_a_plain_scalar_reads_as_pickle_reads_it``."""
    n = len(p)
    if n < 4 or p[0] != 0x80 or not 2 <= p[1] <= 5 or p[n - 1] != 0x2E:
        return _NOT_PLAIN
    i = 2
    if p[2] == 0x95:  # FRAME: 8 bytes of the frame's length, which must be all that follows
        if n < 13 or int.from_bytes(p[3:11], "little") != n - 11:
            return _NOT_PLAIN
        i = 11
    op = p[i]
    shape = _SCALAR_OPS.get(op)
    if shape is None:
        return _NOT_PLAIN
    width, size = shape
    i += 1
    if width:
        if i + width > n:
            return _NOT_PLAIN
        size = int.from_bytes(p[i:i + width], "little")
        i += width
    end = i + size
    if end == n - 2 and p[end] == 0x94:  # MEMOIZE: remembered, never read again
        pass
    elif end != n - 1:
        return _NOT_PLAIN
    if op == 0x4E:
        return True, None
    if op == 0x88 or op == 0x89:
        return True, op == 0x88
    if op == 0x47:
        return True, _unpack_double(p, i)[0]
    if op == 0x8C or op == 0x58:
        try:
            return True, str(p[i:end], "utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return _NOT_PLAIN
    if op == 0x43 or op == 0x42:
        return True, bytes(p[i:end])
    return True, int.from_bytes(p[i:end], "little", signed=op != 0x4B and op != 0x4D)


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
    if not refs and type(inline) is bytes and len(inline) == n and n < PARALLEL_MIN:
        # (most small results: no buffers, the column is the payload. ``digest_bytes``'s one-thread
        # way for a ``bytes`` under ``PARALLEL_MIN``, without its checks and call: a third of a
        # store hit's load)
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
