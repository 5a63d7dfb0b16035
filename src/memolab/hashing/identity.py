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

**Lineage** (the second table, ``mark_result`` / ``origin_entry``): every object a memoized
call returns, computed or loaded, is marked with the evaluation it came from (an ``Origin``:
the store, the evaluation id, its key), so that a later memoized call whose arguments hold it
records that evaluation as an input (``memolab.inputs.upstream``). Marks are information, never part
of a key, and follow the same identity rules: a weak reference compared with ``is`` (an id
reused after the object died never matches), or, for a small ``dict``/``list`` of plain
scalars (which cannot be weakly referenced: a dict of metrics), the object itself held in a
bounded table, so its id cannot be reused while the mark exists.
"""
from __future__ import annotations

import sys
import threading
import types
import weakref
from collections import OrderedDict
from typing import Any

from ..key import Key

__all__ = ["lookup", "remember", "forget", "origin_of", "clear", "trust_exporter", "is_trusted_exporter", "enabled",
           "Origin", "mark_result", "origin_entry", "origin_where", "path_segment", "marked", "lineage"]

#: Switch for benchmarks and for the paranoid; the cache is on by default.
enabled = True


class _Entry:
    __slots__ = ("ref", "stamp", "digest", "origin", "keep")

    def __init__(self, ref: weakref.ref[Any], stamp: Any, digest: bytes, origin: Any, keep: Any) -> None:
        self.ref = ref
        self.stamp = stamp
        self.digest = digest
        self.origin = origin
        self.keep = keep  # what the stamp's addresses need kept (a tensor's storage pin)


_entries: dict[int, _Entry] = {}
_lock = threading.Lock()


def _drop(key: int, ref: weakref.ref[Any]) -> None:
    # Called when the object dies: remove the entry unless a newer object with
    # the same id has already replaced it.
    with _lock:
        e = _entries.get(key)
        if e is not None and e.ref is ref:
            del _entries[key]


def lookup(obj: Any, stamp: Any) -> bytes | None:
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
        ref = weakref.ref(obj, lambda r, key=key: _drop(key, r))  # type: ignore[misc]  # (a default it cannot type)
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
    """The evaluation ``obj`` came from (an evaluation id), or None."""
    o = origin_entry(obj)
    if o is not None:
        return o[1]
    e = _entries.get(id(obj))
    if e is None or e.ref() is not obj:
        return None
    return e.origin


def clear() -> None:
    with _lock:
        _entries.clear()
        _exporters.clear()
    _origins.clear()
    _held.clear()


# -- lineage: the evaluation each returned object came from -------------------------------

#: Switch for benchmarks (lineage off: nothing is marked, so nothing is collected).
lineage = True


#: The evaluation an object came from: (the store it is recorded in (its root), its id there,
#: its key (function, code digest, argument digest, key schema)). A plain tuple: one is made
#: on every hit.
Origin = tuple[Any, int, Key]


#: id(obj) -> (weak reference to obj, its origin, where it sat in the result); entries of dead
#: objects are swept now and then (``_set``). Where it sat: the keys and indexes from the result to it (``()`` for
#: the result itself, ``(0,)`` for the first of a returned tuple; ``path_segment`` writes them)
_origins: dict[int, tuple[Any, Origin, tuple[Any, ...]]] = {}
#: id(obj) -> (obj, its origin, where) for small dicts and lists of scalars (no weak reference to
#: them): held, so their id cannot be reused while marked; the oldest go first
_held: OrderedDict[int, tuple[Any, Origin, tuple[Any, ...]]] = OrderedDict()
_HELD_MAX = 1024
_HELD_LEN = 64  # items at most in a held container
_ATOMS = frozenset((int, float, complex, bool, str, bytes, type(None)))
#: never marked: shared by the whole program, not made by the call that returned them
_SHARED = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, types.MethodType)
#: how far into a returned container (a tuple of datasets, a dict of arrays) marks go
_MARK_DEPTH = 3
_MARK_MAX = 64


#: ``_origins`` is swept of entries whose object died once it holds this many (then twice what is
#: left): plain weak references without a callback are what CPython makes fastest (one shared
#: reference per object), and a dead entry is harmless meanwhile (its reference answers None)
_sweep_at = 4096


def _set(key: int, entry: tuple[Any, Origin, tuple[Any, ...]]) -> None:
    global _sweep_at
    _origins[key] = entry
    if len(_origins) >= _sweep_at:
        for k in [k for k, e in list(_origins.items()) if e[0]() is None]:
            _origins.pop(k, None)
        _sweep_at = max(4096, 2 * len(_origins))


def _small_scalars(obj: Any) -> bool:
    """A dict or list of at most ``_HELD_LEN`` small values none of which can be marked itself (plain
    numbers and strings, numpy scalars): cheap to hold."""
    if len(obj) > _HELD_LEN or not obj:
        return False
    for x in (obj.values() if type(obj) is dict else obj):
        tx = type(x)
        if tx in _ATOMS:
            if (tx is str or tx is bytes) and len(x) > 1024:
                return False
        elif tx.__weakrefoffset__ or isinstance(x, (tuple, list, dict, set, frozenset)) or sys.getsizeof(x) > 1024:
            return False
    return True


def path_segment(k: Any) -> str:
    """How a key or index reads in an argument path: ``[0]``, ``['X']`` (``[<key>]`` for a key that
    is not a plain scalar)."""
    if isinstance(k, (str, int, float, bool)) or k is None:
        text = repr(k)
        return f"[{text if len(text) <= 60 else text[:57] + '...'}]"
    return "[<key>]"


_NONE: frozenset = frozenset()


def mark_result(value: Any, origin: Origin, arguments: Any = ()) -> None:
    """Mark what a memoized call returned (and, inside a tuple, list or dict that cannot be marked
    itself, what it holds: a tuple of datasets, a dict of arrays) as coming from ``origin``.
    A plain scalar is never marked: equal numbers and strings are often one shared object.
    ``arguments``: the call's own argument objects: one returned inside the result
    (``{"cfg": cfg, "model": m}``) did not come from it (the result itself is marked whatever it
    is: a body that changes its argument in place and returns it made what it returns).
    (On every hit: the common results, an object or a dict of arrays, take a microsecond or two.)"""
    if not lineage:
        return
    t = type(value)
    if t in _ATOMS:
        return
    if t.__weakrefoffset__:
        if not isinstance(value, _SHARED):
            _set(id(value), (weakref.ref(value), origin, ()))
        return
    _mark_inside(value, t, origin, (), [_MARK_MAX], frozenset(map(id, arguments)) if arguments else _NONE)


def _mark_inside(value: Any, t: type, origin: Origin, where: tuple[Any, ...], budget: list, passed: frozenset) -> None:
    """``value`` cannot be weakly referenced: hold it (a small dict or list of scalars), else mark
    what it holds. ``where``: the keys and indexes from the result to it."""
    if (t is dict or t is list) and _small_scalars(value):
        key = id(value)
        _held[key] = (value, origin, where)
        _held.move_to_end(key)
        while len(_held) > _HELD_MAX:
            _held.popitem(last=False)
        return
    if len(where) >= _MARK_DEPTH:
        return
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, (tuple, list)):
        items = enumerate(value)
    else:
        return
    for i, (k, x) in enumerate(items):
        if i >= _MARK_MAX or budget[0] <= 0:
            break
        tx = type(x)
        if tx in _ATOMS or id(x) in passed:
            continue
        budget[0] -= 1
        if tx.__weakrefoffset__:
            if not isinstance(x, _SHARED):
                _set(id(x), (weakref.ref(x), origin, where + (k,)))
        else:
            _mark_inside(x, tx, origin, where + (k,), budget, passed)


def marked() -> bool:
    """Is any object marked at all? (When not, a call's arguments hold no upstream result.)"""
    return bool(_origins) or bool(_held)


def origin_entry(obj: Any) -> Origin | None:
    """The evaluation ``obj`` itself came from (``mark_result``), or None."""
    got = origin_where(obj)
    return None if got is None else got[0]


def origin_where(obj: Any) -> tuple[Origin, tuple[Any, ...]] | None:
    """(the evaluation ``obj`` came from, the keys and indexes from its result to it), or None."""
    key = id(obj)
    e = _origins.get(key)
    if e is not None:
        return (e[1], e[2]) if e[0]() is obj else None
    h = _held.get(key)
    if h is not None and h[0] is obj:
        return h[1], h[2]
    return None


# -- buffers whose memory nobody can write ------------------------------------------
#
# A read-only numpy array is not immutable by itself: it may be a view of a
# writeable array, or the owner may flip ``flags.writeable`` back on. It is
# immutable only if the memory behind it cannot be written at all: ``bytes``, or
# a read-only mmap of a blob the store owns (content-addressed files that are
# never rewritten). The store's mmaps are registered here when a result is
# loaded; a user's own read-only mmap is *not* trusted, since another process
# may rewrite the file under it.

_exporters: dict[int, weakref.ref[Any]] = {}


def trust_exporter(obj: Any) -> None:
    key = id(obj)
    try:
        ref = weakref.ref(obj, lambda r, key=key: _exporters.pop(key, None) if _exporters.get(key) is r else None)  # type: ignore[misc]
    except TypeError:
        return
    _exporters[key] = ref


def is_trusted_exporter(obj: Any) -> bool:
    r = _exporters.get(id(obj))
    return r is not None and r() is obj


def stats() -> tuple[int, int]:
    """(entries, trusted exporters) — for tests and benchmarks."""
    return len(_entries), len(_exporters)
