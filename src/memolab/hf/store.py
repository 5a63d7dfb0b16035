"""Storing HF ``datasets``: their Arrow data, never paths into HF's cache.

Registered (``register``) the first time an object of a type from ``datasets``
is pickled, by the lazy hooks of ``memolab.hooks``.

HF pickles a memory-mapped table as its file's path and the transforms to
replay: stored that way, a result is only as good as HF's cache. Delete the
cache, run on another machine, or rewrite the file (``save_to_disk("out")``
of a later call) and the hit is a warning or, worse, other rows. Here every
HF table (in memory, memory-mapped, concatenated; a dataset's data and its
indices) is stored as its data: one Arrow IPC stream per column, each an
out-of-band buffer, so the store writes it as its own content-addressed blob
(deduplicated: a ``.map`` that adds a column shares the other columns' blobs
with its input, when HF wrote them alike) and maps it back read-only, without
a copy. The schema (with HF's features in its metadata) travels in the pickle;
the dataset's info, split, format and fingerprint are its own attributes,
pickled as they are.

A loaded table is an ``InMemoryTable`` over memolab's blobs: HF's cache
plays no part in it, and it behaves as any in-memory dataset (``.map`` keeps
its results in memory unless given a ``cache_file_name``). The digest of its
rows, computed when it was stored, is stored with it, so passing it on to
another memoized function does not rehash it (``keys.remember_loaded``).
"""
from __future__ import annotations

import pickle
from typing import Any, Callable, List, Optional

import pyarrow as pa

from . import keys


def column_stream(field: Any, column: Any) -> Any:
    """One column as an Arrow IPC stream, in one buffer sized exactly (no regrowth copies);
    slices are written as the rows they stand for."""
    schema = pa.schema([field])
    batches = [pa.RecordBatch.from_arrays([chunk], schema=schema) for chunk in column.chunks]
    sizer = pa.MockOutputStream()
    with pa.ipc.new_stream(sizer, schema) as w:
        for b in batches:
            w.write_batch(b)
    buf = pa.allocate_buffer(sizer.size())
    with pa.ipc.new_stream(pa.FixedSizeBufferWriter(buf), schema) as w:
        for b in batches:
            w.write_batch(b)
    return buf


def _reduce_table(p: Any, table: Any) -> Any:
    t = table.table
    d = keys.digest(table)
    columns = [pickle.PickleBuffer(column_stream(t.schema.field(i), t.column(i))) for i in range(t.num_columns)]
    return rebuild_table, (t.schema, columns, d, keys.DIGEST_SCHEMA, t.num_rows)


def _fresh_memory(buf: Any, wrapped: Any) -> bool:
    """Is ``buf`` memory nobody else can write: a read-only mapping of a store blob (then
    recorded with ``keys.trust_mapping``, for the tables derived from it), or bytes
    unpickled in band (referenced by this table alone)?"""
    from ..store.blobs import mapped_blob

    if type(buf) is bytes or type(buf) is bytearray:
        return True
    if mapped_blob(buf) is not None:
        keys.trust_mapping(memoryview(buf).obj, wrapped.address, wrapped.size)
        return True
    return type(buf) is memoryview and buf.readonly and type(buf.obj) is bytes


def rebuild_table(schema: Any, columns: List[Any], digest: bytes, digest_schema: str, num_rows: int = 0) -> Any:
    from datasets.table import InMemoryTable

    wrapped = [pa.py_buffer(buf) for buf in columns]
    arrays = [pa.ipc.open_stream(w).read_all().column(0) for w in wrapped]
    if arrays:
        t = pa.Table.from_arrays(arrays, schema=schema)
    else:  # rows without columns (every column removed): only the count is data
        t = pa.table({"_": pa.nulls(num_rows)}).drop_columns(["_"]).replace_schema_metadata(schema.metadata)
    if all([_fresh_memory(buf, w) for buf, w in zip(columns, wrapped)]):
        keys.remember_loaded(t, digest, digest_schema)
    return InMemoryTable(t)


def register(register_reducer: Callable[[type, Optional[Callable[[Any, Any], Any]]], None]) -> None:
    from datasets import table

    keys.know_kinds(table)
    for kind in (table.InMemoryTable, table.MemoryMappedTable, table.ConcatenationTable):
        register_reducer(kind, _reduce_table)
    from . import cache

    cache.install()
