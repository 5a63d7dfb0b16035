"""Identity caches: skip rehashing an object we have already hashed, when that is provably safe.

Passing the same 1 GiB dataset to memoized functions again and again must not
rehash it each time, but a digest reused for an object that has since changed
is the worst bug a cache can have. So an entry is trusted only when three
things hold at lookup time:

* the object is the *same object*: entries hold a weak reference and compare
  it with ``is``, so an ``id`` reused after the original was freed never
  matches (the weakref callback also drops the entry);
* its *stamp* is unchanged: a cheap tuple computed by the type's handler that
  changes whenever the content can have changed (a tensor's version counter,
  an array's data pointer, shape, strides and dtype);
* the type's handler said a stamp exists at all. Handlers return ``None`` for
  objects whose mutation cannot be detected (a writeable numpy array, a plain
  list, a tensor that shares memory with numpy); those are always rehashed.

``origin`` records the evaluation an object was loaded from (``id → evaluation``),
so tools can tell a memoized result when they see one.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Dict, Optional, Tuple

__all__ = ["lookup", "remember", "forget", "origin_of", "clear", "trust_exporter", "is_trusted_exporter", "enabled"]

#: Switch for benchmarks and for the paranoid; the cache is on by default.
enabled = True


class _Entry:
    __slots__ = ("ref", "stamp", "digest", "origin", "keep")

    def __init__(self, ref: "weakref.ref[Any]", stamp: Any, digest: bytes, origin: Any, keep: Any) -> None:
        self.ref = ref
        self.stamp = stamp
        self.digest = digest
        self.origin = origin
        self.keep = keep  # what the stamp's addresses need kept (a tensor's storage pin)


_entries: Dict[int, _Entry] = {}
_lock = threading.Lock()


def _drop(key: int, ref: "weakref.ref[Any]") -> None:
    # Called when the object dies: remove the entry unless a newer object with
    # the same id has already replaced it.
    with _lock:
        e = _entries.get(key)
        if e is not None and e.ref is ref:
            del _entries[key]


def lookup(obj: Any, stamp: Any) -> Optional[bytes]:
    """The digest recorded for ``obj`` if it is the same object with the same stamp."""
    if not enabled:
        return None
    e = _entries.get(id(obj))
    if e is None or e.ref() is not obj or e.stamp != stamp:
        return None
    return e.digest


def remember(obj: Any, stamp: Any, digest: bytes, origin: Any = None, keep: Any = None) -> None:
    """Record ``digest`` for ``obj`` as long as it lives and keeps ``stamp``; ``keep`` is held
    with the entry (what keeps an address in the stamp from being reused)."""
    if not enabled or stamp is None:
        return
    key = id(obj)
    try:
        ref = weakref.ref(obj, lambda r, key=key: _drop(key, r))
    except TypeError:  # not weak-referenceable: we could not tell a reused id apart
        return
    with _lock:
        old = _entries.get(key)
        if origin is None and old is not None and old.ref() is obj:
            origin = old.origin
        _entries[key] = _Entry(ref, stamp, digest, origin, keep)


def forget(obj: Any) -> None:
    with _lock:
        e = _entries.get(id(obj))
        if e is not None and e.ref() is obj:
            del _entries[id(obj)]


def origin_of(obj: Any) -> Any:
    """The evaluation ``obj`` was loaded from (an evaluation id), or None."""
    e = _entries.get(id(obj))
    if e is None or e.ref() is not obj:
        return None
    return e.origin


def clear() -> None:
    with _lock:
        _entries.clear()
        _exporters.clear()


# -- buffers whose memory nobody can write ------------------------------------------
#
# A read-only numpy array is not immutable by itself: it may be a view of a
# writeable array, or the owner may flip ``flags.writeable`` back on. It is
# immutable only if the memory behind it cannot be written at all: ``bytes``, or
# a read-only mmap of a blob the store owns (content-addressed files that are
# never rewritten). The store's mmaps are registered here when a result is
# loaded; a user's own read-only mmap is *not* trusted, since another process
# may rewrite the file under it.

_exporters: Dict[int, "weakref.ref[Any]"] = {}


def trust_exporter(obj: Any) -> None:
    key = id(obj)
    try:
        ref = weakref.ref(obj, lambda r, key=key: _exporters.pop(key, None) if _exporters.get(key) is r else None)
    except TypeError:
        return
    _exporters[key] = ref


def is_trusted_exporter(obj: Any) -> bool:
    r = _exporters.get(id(obj))
    return r is not None and r() is obj


def stats() -> Tuple[int, int]:
    """(entries, trusted exporters) — for tests and benchmarks."""
    return len(_entries), len(_exporters)
