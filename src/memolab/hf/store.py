"""Storing HF ``datasets``: their Arrow data, never paths into HF's cache.

Registered (``register``) the first time an object of a type from ``datasets``
is pickled, by the lazy hooks of ``memolab.settings.hooks``.

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

A memory-mapped table whose rows are most of its file goes as that file
instead (``mapped_file``): one out-of-band buffer read from HF's own mapping,
so nothing is copied into memory, plus the replays HF recorded for it; a
concatenation of such tables (shards) goes block by block.

A loaded table is an ``InMemoryTable`` over memolab's blobs: HF's cache
plays no part in it, and it behaves as any in-memory dataset (``.map`` keeps
its results in memory unless given a ``cache_file_name``). The digest of its
rows, computed when it was stored, is stored with it, so passing it on to
another memoized function does not rehash it (``keys.remember_loaded``).
"""
from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

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


def mapped_file(table: Any) -> Any:
    """HF's own read-only mapping of the whole file a ``MemoryMappedTable`` reads (a
    ``pyarrow.Buffer``), when its rows are most of that file; else None.

    HF maps the file once and reads its record batches as slices of that mapping:
    walking a column buffer's parents reaches it (measured with datasets 5.2,
    pyarrow 26). The file plus the table's replays (the transforms HF records,
    which its own pickling replays) is the table, by HF's invariant; a mapping is
    what the page cache backs, so storing it copies nothing into memory."""
    import os

    try:
        size = os.path.getsize(table.path)
    except OSError:
        return None
    t = table.table
    if size == 0 or t.nbytes * 2 < size:
        return None  # a small slice of a large file: its columns, not the whole file
    for col in t.columns:
        for chunk in col.chunks:
            for buf in chunk.buffers():
                if buf is None:
                    continue
                root = buf
                while root.parent is not None:
                    root = root.parent
                if root.size != size or root.is_mutable:
                    return None  # (new memory a replay made: the columns instead)
                try:
                    pa.ipc.open_stream(root)  # the file itself starts with a stream's schema
                except (pa.ArrowInvalid, OSError):
                    return None
                return root
    return None


def _reduce_table(p: Any, table: Any) -> Any:
    t = table.table
    d = keys.digest(table)
    if _mapped is not None and type(table) is _mapped:
        whole = mapped_file(table)
        if whole is not None:
            return rebuild_mapped, (pickle.PickleBuffer(whole), list(table.replays), t.schema, t.num_rows, d,
                                    keys.DIGEST_SCHEMA)
    if (_concatenation is not None and type(table) is _concatenation
            and any(type(b) is _mapped for row in table.blocks for b in row)):
        # shards of load_from_disk, concatenate_datasets: block by block, so memory-mapped
        # blocks go as their files (each block is reduced by this function again)
        return rebuild_concatenation, ([list(row) for row in table.blocks], t.schema, t.num_rows, d,
                                       keys.DIGEST_SCHEMA)
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


def rebuild_table(schema: Any, columns: list[Any], digest: bytes, digest_schema: str, num_rows: int = 0) -> Any:
    from datasets.table import InMemoryTable

    wrapped = [pa.py_buffer(buf) for buf in columns]
    arrays = [pa.ipc.open_stream(w).read_all().column(0) for w in wrapped]
    if arrays:
        t = pa.Table.from_arrays(arrays, schema=schema)
    else:  # rows without columns (every column removed): only the count is data
        t = pa.table({"_": pa.nulls(num_rows)}).drop_columns(["_"]).replace_schema_metadata(schema.metadata)
    if all([_fresh_memory(buf, w) for buf, w in zip(columns, wrapped, strict=False)]):
        keys.remember_loaded(t, digest, digest_schema)
    return InMemoryTable(t)


def rebuild_mapped(file: Any, replays: list[Any], schema: Any, num_rows: int, digest: bytes,
                   digest_schema: str) -> Any:
    """A memory-mapped table stored as its file: the stream read from memolab's blob, HF's
    replays applied; checked against the rows and schema it was stored with."""
    from datasets.table import InMemoryTable, MemoryMappedTable

    wrapped = pa.py_buffer(file)
    t = MemoryMappedTable._apply_replays(pa.ipc.open_stream(wrapped).read_all(), replays)
    if t.num_rows != num_rows or not t.schema.equals(schema, check_metadata=True):
        raise ValueError(f"the stored file and its replays give {t.num_rows} rows of {t.schema}, "
                         f"not the {num_rows} rows of {schema} that were stored")
    if _fresh_memory(file, wrapped):
        keys.remember_loaded(t, digest, digest_schema)
    return InMemoryTable(t)


def rebuild_concatenation(blocks: list[list[Any]], schema: Any, num_rows: int, digest: bytes,
                          digest_schema: str) -> Any:
    """A concatenation of rebuilt blocks, as HF's own unpickling joins them."""
    from datasets.table import ConcatenationTable

    table = ConcatenationTable.__new__(ConcatenationTable)
    table.__setstate__({"blocks": blocks, "schema": schema})
    t = table.table
    if t.num_rows != num_rows or not t.schema.equals(schema, check_metadata=True):
        raise ValueError(f"the stored blocks give {t.num_rows} rows of {t.schema}, "
                         f"not the {num_rows} rows of {schema} that were stored")
    keys.remember_concatenation(table, digest, digest_schema)
    return table


#: ``datasets.table.MemoryMappedTable`` and ``ConcatenationTable``, once registered
_mapped: Any = None
_concatenation: Any = None


def register(register_reducer: Callable[[type, Callable[[Any, Any], Any] | None], None]) -> None:
    from datasets import table

    global _mapped, _concatenation
    _mapped, _concatenation = table.MemoryMappedTable, table.ConcatenationTable
    keys.know_kinds(table)
    for kind in (table.InMemoryTable, table.MemoryMappedTable, table.ConcatenationTable):
        register_reducer(kind, _reduce_table)
    from . import cache

    cache.install()
