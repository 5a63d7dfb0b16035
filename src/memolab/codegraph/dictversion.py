"""Has a dict been written to since we last looked? One integer read instead of one per name.

A memoized call must notice that any global its binding graph went through was
rebound; a graph spanning a 20,000-line package goes through thousands of
names. CPython 3.11-3.13 keep a version tag in every dict (PEP 509) that
changes on each insertion, deletion or value replacement, so an unchanged tag
proves that no name in that namespace was rebound. The tag is not exposed to
Python; we read it through ``_ctypes`` at its fixed offset, and only after a
self-test on this very interpreter shows that the field sits where expected
and moves on each kind of write. Anywhere else (another implementation, a
Python whose layout we have not verified, a failed self-test) ``tag_reader``
returns None and callers compare every name, which is correct, only slower.
"""
from __future__ import annotations

import sys
from typing import Any

from ..errors import swallowed

_works: bool | None = None
_U64: Any = None     # a c_uint64 type
_CHAR8: Any = None   # a c_char * 8 array type

# PyObject_HEAD (refcount + type) is 16 bytes on 64-bit builds; then ma_used, then ma_version_tag
_USED_OFFSET = 16
_TAG_OFFSET = 24


def _self_test() -> bool:
    if sys.implementation.name != "cpython" or not ((3, 11) <= sys.version_info[:2] <= (3, 13)):
        return False
    if sys.maxsize != 2 ** 63 - 1 or hasattr(sys, "gettotalrefcount"):  # 64-bit, not a debug build
        return False
    # The C extension alone, not the ``ctypes`` package: importing ``ctypes``
    # builds its whole type zoo (about 2-3 ms, on the first call of every
    # script); the three plain types we need are defined here the same way
    # ``ctypes/__init__.py`` defines them.
    try:
        import _ctypes
    except ImportError:
        return False
    global _U64, _CHAR8

    class c_ssize_t(_ctypes._SimpleCData):
        _type_ = "q"  # 64-bit build (checked above): Py_ssize_t is a long long

    class c_uint64(_ctypes._SimpleCData):
        _type_ = "Q"

    class c_char(_ctypes._SimpleCData):
        _type_ = "c"

    class char8(_ctypes.Array):
        _type_ = c_char
        _length_ = 8

    _U64, _CHAR8 = c_uint64, char8
    d: dict = {"a": 1, "b": 2, "c": 3}
    if c_ssize_t.from_address(id(d) + _USED_OFFSET).value != 3:
        return False
    at = id(d) + _TAG_OFFSET
    if bytes(char8.from_address(at)) != c_uint64.from_address(at).value.to_bytes(8, sys.byteorder):
        return False
    tag = c_uint64.from_address(id(d) + _TAG_OFFSET)
    seen = [tag.value]
    d["d"] = 4          # insert
    seen.append(tag.value)
    d["a"] = object()   # replace a value
    seen.append(tag.value)
    del d["b"]          # delete
    seen.append(tag.value)
    d.update(c=5)       # update
    seen.append(tag.value)
    x = seen[-1]
    _ = d["a"]          # a read must not move it
    return len(set(seen)) == len(seen) and tag.value == x


def self_test() -> bool:
    """The self-test ``tag_reader`` runs at first use, run again (``make selftest``)."""
    try:
        return _self_test()
    except Exception:  # a self-test of interpreter internals: on an unknown CPython it may fail in any way
        swallowed("codegraph.dictversion: self_test")
        return False


def tag_reader(d: dict) -> Any | None:
    """An object whose ``.value`` is ``d``'s current version tag, or None where unsupported.

    The caller must keep ``d`` alive as long as it uses the reader.
    """
    global _works
    if _works is None:
        try:
            _works = _self_test()
        except Exception:  # a self-test of interpreter internals: on an unknown CPython it may fail in any way
            swallowed("codegraph.dictversion: tag_reader")
            _works = False
    if not _works or type(d) is not dict:
        return None
    return _U64.from_address(id(d) + _TAG_OFFSET)


def tag_view(d: dict) -> memoryview | None:
    """The 8 bytes of ``d``'s version tag as a live memoryview, or None where unsupported.

    ``b"".join(views)`` reads many tags in one C-level pass (about 12 ns a
    dict, against about 75 ns for a Python-level ``reader.value`` compare),
    which is what lets a repeat call check hundreds of namespaces at once. The
    caller must keep ``d`` alive as long as it uses the view.
    """
    if tag_reader(d) is None:
        return None
    return memoryview(_CHAR8.from_address(id(d) + _TAG_OFFSET))
