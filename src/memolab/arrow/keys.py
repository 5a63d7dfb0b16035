"""Arrow data hashed by content: pyarrow tables, record batches and arrays.

Imported only once pyarrow has been imported: the lazy hooks of
``memolab.settings.hooks`` name ``register_arrow`` by dotted path, so ``hashing`` never
imports this module; this module registers through ``hashing``'s public functions.

Why not what pickle would save (the generic rule)? pyarrow's protocol-4
reduction writes a buffer as ``bytearray`` if it is mutable and as ``bytes``
if not, and the store hands results back over read-only mappings of their
blobs: a table keyed one way where it was computed and another way wherever it
was loaded, so the next step recomputed once on every machine (issue 22).
Chunking, slice offsets, spare buffer capacity and memory maps are
representation too. The key of Arrow data is its *value*:

* the schema (field names, types, nullability, field metadata) as Arrow's own
  serialization, and the schema metadata as a dict (its order does not count);
* per column, the logical data streamed into *lanes*: the positions of nulls,
  fixed-width values (their bytes, values under null slots included), the
  lengths and bytes of variable-width values, booleans one byte each, and the
  children of nested types by field position. Each lane is one continuous
  stream whatever the chunk boundaries, so a column split into chunks keys as
  its concatenation, and a slice as the copy it stands for;
* dictionary arrays as their decoded values, extension arrays as their
  storage, string and binary views as their plain counterparts; the few
  layouts left (unions, run-end encoding, list views) by their IPC encoding,
  chunk by chunk.

Nothing is copied for fixed-width and variable-width data: lanes read the
buffers in place (temporaries are bounded: at most ``_BLOCK`` rows at a time).
No identity cache for bare pyarrow objects: Arrow memory may be shared with a
writeable numpy array, so a table is rehashed, at memory speed, on every call.
HF ``datasets`` tables are keyed in ``memolab.hf.keys``, with an identity cache.
"""
from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from ..hashing import register_handler

_pack_Q = struct.Struct("<Q").pack
#: rows handled at once: bounds the temporaries (null positions, lengths, booleans)
_BLOCK = 1 << 20


class _Lanes:
    """The lanes of one column: ``path -> hasher`` plus the elements seen at each nesting level."""

    __slots__ = ("h", "count")

    def __init__(self) -> None:
        self.h: dict[str, Any] = {}
        self.count: dict[str, int] = {}

    def feed(self, path: str, data: Any) -> None:
        if memoryview(data).nbytes == 0:
            return  # an empty feed creates no lane: lanes depend on the data, never on chunking
        h = self.h.get(path)
        if h is None:
            h = self.h[path] = xxhash.xxh3_128()
        h.update(data)

    def digest(self) -> bytes:
        out = xxhash.xxh3_128()
        for path in sorted(set(self.h) | set(self.count)):
            p = path.encode()
            out.update(_pack_Q(len(p)) + p + _pack_Q(self.count.get(path, 0)))
            h = self.h.get(path)
            out.update(h.digest() if h is not None else b"-")
        return out.digest()


def _offsets(arr: Any, n: int) -> Any:
    """The ``n + 1`` value offsets of a (sliced) variable-width or list array, in their own
    width: lengths are streamed in it too (int32 for ``string``, int64 for ``large_string``,
    whose types key apart anyway). Widening first cost 9x the hashing itself (measured:
    ``astype`` of 8M offsets 25 ms, ``np.diff`` in place width 2.7 ms)."""
    t = arr.type
    large = (pa.types.is_large_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_list(t))
    dtype = np.dtype("<i8") if large else np.dtype("<i4")
    o = arr.offset
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=o + n + 1)[o:]


def _plain(arr: Any) -> Any:
    """The array whose layout the lanes read: dictionaries decoded, extensions unwrapped, views made plain."""
    while True:
        t = arr.type
        if pa.types.is_dictionary(t):
            arr = arr.dictionary_decode()
        elif isinstance(t, pa.BaseExtensionType):
            arr = arr.storage
        elif pa.types.is_string_view(t):
            arr = arr.cast(pa.large_string())
        elif pa.types.is_binary_view(t):
            arr = arr.cast(pa.large_binary())
        else:
            return arr


def _feed(lanes: _Lanes, arr: Any, path: str) -> None:
    n = len(arr)
    if n > _BLOCK:
        for i in range(0, n, _BLOCK):
            _feed(lanes, arr.slice(i, _BLOCK), path)
        return
    arr = _plain(arr)
    t = arr.type
    base = lanes.count.get(path, 0)
    lanes.count[path] = base + n
    if n == 0 or pa.types.is_null(t):
        return
    if arr.null_count and not (pa.types.is_union(t) or pa.types.is_run_end_encoded(t)):
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        lanes.feed(path + "n", (np.flatnonzero(~valid) + base).astype("<i8"))
    o = arr.offset
    if pa.types.is_boolean(t):
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(o + n + 7) // 8)[o // 8:]
        lanes.feed(path + "v", np.unpackbits(bits, bitorder="little")[o % 8:o % 8 + n])
    elif (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
          or pa.types.is_large_binary(t)):
        offs = _offsets(arr, n)
        lanes.feed(path + "l", np.diff(offs))
        data = arr.buffers()[2]
        if data is not None:
            lanes.feed(path + "v", memoryview(data)[offs[0]:offs[-1]])
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offs = _offsets(arr, n)
        lanes.feed(path + "l", np.diff(offs))
        _feed(lanes, arr.values.slice(offs[0], offs[-1] - offs[0]), path + "e.")
    elif pa.types.is_fixed_size_list(t):
        k = t.list_size
        _feed(lanes, arr.values.slice(o * k, n * k), path + "e.")
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            _feed(lanes, arr.field(i), f"{path}{i}.")  # ``field`` applies the struct's own offset
    else:
        width = _byte_width(t)
        if width:
            lanes.feed(path + "v", memoryview(arr.buffers()[1])[o * width:(o + n) * width])
        else:
            # unions, run-end encoding, list views (whose cast to lists leaves a null slot's end
            # offset unset, measured with pyarrow 26): their IPC encoding, chunk by chunk
            lanes.feed(path + "x", pa.RecordBatch.from_arrays([arr], ["_"]).serialize())


def _byte_width(t: Any) -> int:
    """Bytes per value of a fixed-width type with one data buffer (ints, floats, temporal, decimal,
    fixed-size binary), else 0."""
    if pa.types.is_union(t) or pa.types.is_run_end_encoded(t):
        return 0
    try:
        bits = t.bit_width
    except ValueError:  # not fixed-width
        return 0
    return 0 if bits % 8 else bits // 8


def _schema_bytes(schema: Any) -> bytes:
    """Fields, types, nullability and field metadata (Arrow's flatbuffer, deterministic); schema
    metadata is hashed apart, as a dict, since its order is not content."""
    return schema.remove_metadata().serialize().to_pybytes()


def column_digest(chunks: Any) -> bytes:
    """The digest of one column's logical data (an Array or the chunks of a ChunkedArray)."""
    lanes = _Lanes()
    for chunk in chunks:
        _feed(lanes, chunk, "")
    lanes.count.setdefault("", 0)
    return lanes.digest()


def schema_metadata(schema: Any) -> dict[bytes, bytes]:
    """The schema metadata that is content: HF's ``fingerprint`` (a name for its own cache,
    random where a transform cannot be hashed) is left out of the ``huggingface`` entry."""
    meta = dict(schema.metadata or {})
    hf = meta.get(b"huggingface")
    if hf is not None and b"fingerprint" in hf:
        try:
            doc = json.loads(hf)
        except ValueError:
            return meta
        if isinstance(doc, dict) and doc.pop("fingerprint", None) is not None:
            meta[b"huggingface"] = json.dumps(doc, sort_keys=True).encode()
    return meta


def encode_columns(enc: Any, schema: Any, columns: Any, num_rows: int) -> None:
    """Write a table's schema, row count and each column's ``column_digest``."""
    sb = _schema_bytes(schema)
    enc.write(_pack_Q(len(sb)) + sb)
    enc.encode_child(schema_metadata(schema), ".schema.metadata")
    enc.write_uint(num_rows)
    for _name, col in zip(schema.names, columns, strict=False):
        enc.write(b"H" + column_digest(col.chunks if isinstance(col, pa.ChunkedArray) else [col]))


def encode_table(enc: Any, table: Any) -> None:
    if enc.memoize(table):
        return
    enc.write(b"\x1bt")  # Arrow tokens: lead byte 0x1b, then a kind letter
    encode_columns(enc, table.schema, table.columns, table.num_rows)


def encode_record_batch(enc: Any, batch: Any) -> None:
    if enc.memoize(batch):
        return
    enc.write(b"\x1bb")
    encode_columns(enc, batch.schema, batch.columns, batch.num_rows)


def encode_array(enc: Any, arr: Any) -> None:
    if enc.memoize(arr):
        return
    enc.write(b"\x1ba")
    encode_columns(enc, pa.schema([pa.field("", arr.type)]), [arr], len(arr))


def encode_chunked_array(enc: Any, arr: Any) -> None:
    if enc.memoize(arr):
        return
    enc.write(b"\x1bc")
    encode_columns(enc, pa.schema([pa.field("", arr.type)]), [arr], len(arr))


def register_arrow() -> None:
    register_handler(pa.Table, encode_table)
    register_handler(pa.RecordBatch, encode_record_batch)
    register_handler(pa.Array, encode_array)
    register_handler(pa.ChunkedArray, encode_chunked_array)
