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

A function's code and defaults are not in any dict: ``g.__code__ = other`` (what
a hot reloader does to the functions and methods a program still holds) or
``g.__defaults__ = (5,)`` writes the function object itself. ``func_view`` reads those three pointers the same way, after its own
self-test, so a graph checks every function it went through in the one gather
that reads its tags; reading ``__code__`` instead raises an audit event per
function (about 0.5 us with any audit hook installed). ``Model.__bases__ =
(Other,)`` writes no dict either: ``mro_view`` reads a class's ``__bases__`` and
``__mro__`` pointers.
"""
from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from ..errors import swallowed

_works: bool | None = None
_U64: Any = None     # a c_uint64 type
_CHAR8: Any = None   # a c_char * 8 array type
_CHAR24: Any = None  # a c_char * 24 array type
_funcs_work: bool | None = None
_types_work: bool | None = None

# PyObject_HEAD (refcount + type) is 16 bytes on 64-bit builds; then ma_used, then ma_version_tag
_USED_OFFSET = 16
_TAG_OFFSET = 24
# PyFunctionObject: PyObject_HEAD, then globals, builtins, name, qualname, code, defaults, kwdefaults
_FUNC_SLOTS_OFFSET = 48
# PyTypeObject: PyObject_VAR_HEAD and 39 pointer-sized fields, then tp_bases, tp_mro
_TYPE_BASES_OFFSET = 336


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
    global _U64, _CHAR8, _CHAR24

    class c_ssize_t(_ctypes._SimpleCData):
        _type_ = "q"  # 64-bit build (checked above): Py_ssize_t is a long long

    class c_uint64(_ctypes._SimpleCData):
        _type_ = "Q"

    class c_char(_ctypes._SimpleCData):
        _type_ = "c"

    class char8(_ctypes.Array):
        _type_ = c_char
        _length_ = 8

    class char24(_ctypes.Array):
        _type_ = c_char
        _length_ = 24

    _U64, _CHAR8, _CHAR24 = c_uint64, char8, char24
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


def self_test(of: str = "dict") -> bool:
    """The self-test ``tag_reader`` (``of="dict"``), ``func_view`` (``"function"``) or ``mro_view``
    (``"type"``) runs at first use, run again by ``make selftest`` (the dict one first: it makes
    the ``_ctypes`` types the others read with)."""
    return _passes(_self_test) and (of == "dict" or _passes(_MORE[of]))


def _passes(test: Callable[[], bool]) -> bool:
    try:
        return test()
    except Exception:  # a self-test of interpreter internals: on an unknown CPython it may fail in any way
        swallowed("codegraph.dictversion: self_test")
        return False


def func_slots(code: Any, defaults: Any, kwdefaults: Any) -> bytes:
    """The bytes ``func_view`` shows for a function holding these three objects (None: an empty slot)."""
    return b"".join((0 if o is None else id(o)).to_bytes(8, sys.byteorder) for o in (code, defaults, kwdefaults))


def _func_self_test() -> bool:
    if _CHAR24 is None:
        return False

    def probe(a: Any = 1, *, b: Any = 2) -> Any:
        return a

    def other(a: Any = 3) -> Any:
        return a

    view = memoryview(_CHAR24.from_address(id(probe) + _FUNC_SLOTS_OFFSET))

    def shows(f: Any) -> bool:
        return bytes(view) == func_slots(f.__code__, f.__defaults__, f.__kwdefaults__)

    seen = [bytes(view)]
    ok = shows(probe)
    probe.__code__ = other.__code__     # what a hot reloader does to a function held elsewhere
    seen.append(bytes(view))
    ok = ok and shows(probe)
    probe.__defaults__ = (5,)
    seen.append(bytes(view))
    ok = ok and shows(probe)
    probe.__kwdefaults__ = {"b": 6}
    seen.append(bytes(view))
    ok = ok and shows(probe)
    probe.__defaults__ = None           # an empty slot reads as zeros
    probe.__kwdefaults__ = None
    seen.append(bytes(view))
    ok = ok and shows(probe) and seen[-1][8:] == bytes(16)
    return ok and len(set(seen)) == len(seen) and bytes(view) == seen[-1]


def _type_self_test() -> bool:
    if _CHAR24 is None:
        return False

    class A:
        pass

    class B:
        pass

    class C(A):
        pass

    view = memoryview(_CHAR24.from_address(id(C) + _TYPE_BASES_OFFSET))

    def shows() -> bool:
        return bytes(view)[:16] == func_slots(C.__bases__, C.__mro__, None)[:16]

    before = bytes(view)[:16]
    ok = shows()
    C.__bases__ = (B,)
    return ok and shows() and bytes(view)[:16] != before


def mro_view(cls: type) -> memoryview | None:
    """The 16 bytes of a class's ``__bases__`` and ``__mro__`` pointers as a live memoryview
    (compare with ``func_slots(cls.__bases__, cls.__mro__, None)[:16]``), or None where
    unsupported; the caller keeps ``cls`` and both tuples alive, as ``func_view``'s does."""
    global _types_work
    if _types_work is None:
        _types_work = tag_reader({}) is not None and _passes(_type_self_test)  # (the dict test made the types)
    if not _types_work or not isinstance(cls, type):
        return None
    return memoryview(_CHAR24.from_address(id(cls) + _TYPE_BASES_OFFSET)).cast("B")[:16]


def func_view(f: Any) -> memoryview | None:
    """The 24 bytes of a plain function's ``__code__``, ``__defaults__`` and ``__kwdefaults__``
    pointers as a live memoryview (compare with ``func_slots`` of the objects it held), or None
    where unsupported. The caller must keep ``f`` alive as long as it uses the view, and the
    three objects too: while they live, no other object can take their addresses, so equal bytes
    mean these very objects."""
    global _funcs_work
    if _funcs_work is None:
        _funcs_work = tag_reader({}) is not None and _passes(_func_self_test)  # (the dict test made the types)
    if not _funcs_work or type(f) is not types.FunctionType:
        return None
    # (as unsigned bytes: a view of ``c_char`` compares item by item as 1-byte strings, never
    # equal to ``bytes``; ``B`` compares as ``bytes`` do)
    return memoryview(_CHAR24.from_address(id(f) + _FUNC_SLOTS_OFFSET)).cast("B")


#: ``self_test``'s tests after the dict one
_MORE: dict[str, Callable[[], bool]] = {"function": _func_self_test, "type": _type_self_test}


def tag_reader(d: dict) -> Any | None:
    """An object whose ``.value`` is ``d``'s current version tag, or None where unsupported.

    The caller must keep ``d`` alive as long as it uses the reader.
    """
    global _works
    if _works is None:
        _works = self_test()
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
