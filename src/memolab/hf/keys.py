"""Keys of HF ``datasets``: Arrow data by content, computed once per underlying table.

Registered (``register``) before the first type from ``datasets`` is hashed, by
the lazy hooks of ``memolab.settings.hooks``.

A ``Dataset`` hashes as a plain object (info, split, format, indices table),
``_fingerprint`` left out: HF's name for its own cache, random where a
transform cannot be hashed. Its tables (``InMemoryTable``,
``MemoryMappedTable``, ``ConcatenationTable``) enter as the digest of the rows
they hold (``memolab.arrow.keys``), whatever their kind: a dataset and its copy
stored and loaded by memolab, or saved and loaded by HF, key alike.

That digest is reused for the same underlying ``pyarrow.Table`` object (the
identity cache of ``memolab.hashing.identity``) while its *stamp* holds:

* memory-mapped tables: ``(path, device, inode, size, mtime_ns, ctime_ns)`` of
  each file mapped, read at every call (one ``stat`` per file); a file
  rewritten in place or replaced changes it and the table is rehashed. A file
  modified less than ``files.RACY_NS`` before it was hashed is not trusted
  (a rewrite within the same timestamp tick could keep its stat);
* in-memory tables: only those whose memory memolab vouches for, the
  read-only mappings of store blobs (a dataset loaded from the store, and
  what is derived from it without a copy). Any other in-memory table is
  rehashed, at memory speed, on every call (see below why).
"""
from __future__ import annotations

import bisect
import os
import sys
import threading
import time
import weakref
from typing import Any

import pyarrow as pa

from ..arrow.keys import encode_columns
from ..hashing import KEY_SCHEMA, Encoder, excluded_attributes, identity, register_handler, register_policy
from ..hashing.files import RACY_NS

#: the version of a table digest's encoding: a digest stored with a result (``store``)
#: is believed on load only if it was made the same way. Bump it with any change to
#: ``table_digest`` or to ``memolab.arrow.keys``'s encoding (hf2: lengths in their offsets' width)
DIGEST_SCHEMA = KEY_SCHEMA + "/hf2"
#: the stamp of in-memory Arrow data that nobody can write
_MEMORY = ("memory",)


def table_digest(table: Any) -> bytes:
    """The digest of a ``pyarrow.Table``'s content, as a dataset's key holds it."""
    sub = Encoder()
    sub.write(b"\x1bh")
    encode_columns(sub, table.schema, table.columns, table.num_rows)
    return sub.digest()


# -- which in-memory tables can be trusted ---------------------------------------------------
#
# Arrow's own memory cannot be told apart, from Python, from memory shared with
# numpy or pandas: ``Dataset.from_pandas`` keeps the DataFrame's arrays (and a
# write to the DataFrame changes the dataset), ``Dataset.from_dict`` holds numpy
# arrays of its own, and neither buffer's flags nor its address say which is
# which (measured: a pandas-shared buffer reports itself immutable, and numpy's
# allocations are 64-byte aligned as often as not). So only memory memolab
# vouches for is trusted: the read-only mappings of store blobs a table was
# rebuilt on (``remember_loaded``), and tables derived from them (a ``select``,
# a slice, a concatenation) whose every buffer lies inside such a mapping.

_verdicts: dict[int, tuple[weakref.ref[Any], bool]] = {}
#: id(mapping) -> (weakref to it, start address, end address): blob mappings tables were rebuilt on
_blob_ranges: dict[int, tuple[weakref.ref[Any], int, int]] = {}
_lock = threading.Lock()


#: the live ranges of ``_blob_ranges`` sorted by start, rebuilt after a change (None)
_sorted: list[tuple[int, int, weakref.ref[Any]]] | None = None


def _forget(table: dict[int, Any], key: int, ref: weakref.ref[Any]) -> None:
    global _sorted
    with _lock:
        got = table.get(key)
        if got is not None and got[0] is ref:
            del table[key]
            _sorted = None


def _set_verdict(table: Any, trusted: bool) -> None:
    key = id(table)
    ref = weakref.ref(table, lambda r, key=key: _forget(_verdicts, key, r))  # type: ignore[misc]  # (a default it cannot type)
    with _lock:
        _verdicts[key] = (ref, trusted)


def trust_mapping(mapping: Any, start: int, size: int) -> None:
    """Memory ``[start, start + size)`` belongs to ``mapping``, a read-only mapping of a store
    blob: nobody can write it while it lives (and the entry goes when it dies)."""
    global _sorted
    key = id(mapping)
    ref = weakref.ref(mapping, lambda r, key=key: _forget(_blob_ranges, key, r))  # type: ignore[misc]  # (a default it cannot type)
    with _lock:
        _blob_ranges[key] = (ref, start, start + size)
        _sorted = None


def _ranges() -> list[tuple[int, int, weakref.ref[Any]]]:
    global _sorted
    with _lock:
        if _sorted is None:
            _sorted = sorted(((lo, hi, ref) for ref, lo, hi in _blob_ranges.values()), key=lambda r: r[0])
        return _sorted


def _in_blobs(address: int, size: int, ranges: list[tuple[int, int, weakref.ref[Any]]]) -> bool:
    # live mappings never overlap: the one starting last at or before ``address`` is the candidate
    i = bisect.bisect_right(ranges, address, key=lambda r: r[0]) - 1
    if i < 0:
        return False
    lo, hi, ref = ranges[i]
    return address + size <= hi and ref() is not None


def _vouched(arr: Any, ranges: list[tuple[int, int, weakref.ref[Any]]]) -> bool:
    for buf in arr.buffers():  # children's buffers included
        if buf is not None and buf.size and not _in_blobs(buf.address, buf.size, ranges):
            return False
    if isinstance(arr, pa.DictionaryArray):
        return _vouched(arr.dictionary, ranges)
    return True


def _memory_stamp(table: Any) -> tuple[str] | None:
    got = _verdicts.get(id(table))
    if got is not None and got[0]() is table:
        return _MEMORY if got[1] else None
    ranges = _ranges() if _blob_ranges else []
    trusted = bool(ranges) and all(_vouched(chunk, ranges) for col in table.columns for chunk in col.chunks)
    _set_verdict(table, trusted)
    return _MEMORY if trusted else None


def _file_stamp(path: str) -> tuple[Any, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if max(st.st_mtime_ns, st.st_ctime_ns) + RACY_NS > time.time_ns():
        return None  # modified just now: a second rewrite within the same tick could keep this stat
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stamp(table: Any) -> Any:
    """A value that changes whenever the rows of HF table ``table`` can have changed, or
    None where a change could go unnoticed (then it is rehashed on every call)."""
    kind = _kinds.get(type(table))
    if kind == "memory":
        return _memory_stamp(table.table)
    if kind == "mapped":
        return _file_stamp(table.path)
    if kind == "concatenation":
        parts = []
        for row in table.blocks:
            for block in row:
                s = stamp(block)
                if s is None:
                    return None
                parts.append(s)
        return tuple(parts)
    return None  # a subclass of HF's or a user's: its memory is not known


_kinds: dict[type, str] = {}


def digest(table: Any, trusted: bool = True) -> bytes:
    """The digest of HF table ``table``'s rows, from the identity cache where its stamp vouches."""
    t = table.table
    s = stamp(table) if trusted and identity.enabled else None
    d = identity.lookup(t, s) if s is not None else None
    if d is None:
        d = table_digest(t)
        if s is not None:
            identity.remember(t, s, d)
    return d


def remember_loaded(table: Any, digest: bytes, schema: str) -> None:
    """A ``pyarrow.Table`` just rebuilt over memory nobody else can write (read-only blob
    mappings, bytes unpickled in band), with the digest stored with it."""
    _set_verdict(table, True)
    if schema == DIGEST_SCHEMA:
        identity.remember(table, _MEMORY, digest)


def remember_concatenation(table: Any, digest: bytes, schema: str) -> None:
    """A ``ConcatenationTable`` just rebuilt from blocks rebuilt by the store: its digest as
    stored, under the stamp its blocks give (trusted ones, unless a block was not)."""
    s = stamp(table)
    if s is not None and schema == DIGEST_SCHEMA:
        identity.remember(table.table, s, digest)


def encode_hf_table(enc: Any, table: Any) -> None:
    """``datasets.table.Table``: the digest of the rows it holds, whatever its kind.

    A memory-mapped table pickles as its cache file's path and the transforms
    to replay: keyed by that, a rewritten file would keep its key, and the same
    rows in memory would key apart."""
    if enc.memoize(table):
        return
    enc.write(b"\x1bh")
    enc.write(b"H" + digest(table))


# -- the objects around the tables: HF's own classes by their attributes ----------------------
#
# A ``Dataset`` hashed by the generic rule costs 60-80 µs a call (measured) whatever its
# size, most of it the code digests of HF's classes looked up for the dataset, its info
# and each feature. Those are library classes: their code is the installed ``datasets``,
# as for any library (docs/hashing.md). So HF's own classes are keyed by their name and
# attributes; a user's subclass of them still goes the generic way (its code counts).

_own: set = set()


def _state(enc: Any, obj: Any, exclude: Any = ()) -> None:
    d = vars(obj)
    names = sorted(k for k in d if k not in exclude)
    enc.write_uint(len(names))
    for k in names:
        enc.write_str(k)
        enc.encode_child(d[k], "." + k)


def encode_dataset(enc: Any, ds: Any) -> None:
    """A ``Dataset``: its info, split, format, data and indices tables; ``_fingerprint`` out."""
    if type(ds) not in _own:
        enc.encode_object(ds)  # a user's subclass: its code counts
        return
    if enc.memoize(ds):
        return
    enc.write(b"\x1bd")
    enc.write_type(type(ds))
    _state(enc, ds, excluded_attributes(type(ds)))


#: dataclass -> the fields its constructor takes (the rest, ``Value.pa_type`` or
#: ``ClassLabel._str2int``, is derived from them)
_init_fields: dict[type, tuple[str, ...]] = {}


def encode_hf_value(enc: Any, obj: Any) -> None:
    """HF's info, split and feature classes: name and the fields they are made of."""
    t = type(obj)
    if t not in _own:
        enc.encode_object(obj)
        return
    if enc.memoize(obj):
        return
    enc.write(b"\x1bv")
    enc.write_type(t)
    names = _init_fields.get(t)
    if names is None:
        _state(enc, obj)  # not a dataclass (NamedSplit): its attributes
        return
    # fields left None are not written (most of a DatasetInfo's): every instance of a
    # dataclass has every field, so leaving out the None ones is still unambiguous
    given = [(k, v) for k, v in ((k, getattr(obj, k, None)) for k in names) if v is not None]
    enc.write_uint(len(given))
    for k, v in given:
        enc.write_str(k)
        enc.encode_child(v, "." + k)


def encode_features(enc: Any, features: Any) -> None:
    """``Features``: a dict of column name to feature, in column order."""
    if type(features) not in _own:
        enc.encode_object(features)
        return
    if enc.memoize(features):
        return
    enc.write(b"\x1bF")
    enc.write_uint(len(features))
    for k, v in features.items():
        enc.write_str(k)
        enc.encode_child(v, f"[{k!r}]")
    # its one attribute, ``_column_requires_decoding``, is derived from the features


def _register_objects() -> None:
    import dataclasses

    ds = sys.modules.get("datasets.arrow_dataset")
    if ds is not None:
        # a name for HF's own cache, derived from the data and the transforms, or random where
        # a transform cannot be hashed: the data itself is keyed in full
        register_policy(ds.Dataset, exclude={"_fingerprint"})
        _own.add(ds.Dataset)
        register_handler(ds.Dataset, encode_dataset)
    feats = sys.modules.get("datasets.features")
    if feats is not None:
        _own.add(feats.Features)
        register_handler(feats.Features, encode_features)
        for name in dir(feats):
            cls = getattr(feats, name)
            if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__.startswith("datasets."):
                _own.add(cls)
                register_handler(cls, encode_hf_value)
    for module, names in (("datasets.info", ("DatasetInfo",)), ("datasets.splits", ("NamedSplit", "SplitInfo"))):
        mod = sys.modules.get(module)
        for name in names:
            cls = getattr(mod, name, None) if mod is not None else None
            if isinstance(cls, type):
                _own.add(cls)
                register_handler(cls, encode_hf_value)
    for cls in _own:
        if dataclasses.is_dataclass(cls):
            _init_fields[cls] = tuple(sorted(f.name for f in dataclasses.fields(cls) if f.init))  # type: ignore[index]  # a dataclass type


def know_kinds(table: Any) -> None:
    """Learn HF's table classes from ``datasets.table`` (exact types: a subclass's memory is not known)."""
    _kinds.update({table.InMemoryTable: "memory", table.MemoryMappedTable: "mapped",
                   table.ConcatenationTable: "concatenation"})


def register() -> None:
    table = sys.modules.get("datasets.table")
    if table is not None:
        register_handler(table.Table, encode_hf_table)
        know_kinds(table)
    _register_objects()
    from . import cache

    cache.install()
