"""Deterministic, type-tagged deep hashing of argument values.

Why not hash a pickle? Pickle bytes are not canonical (dict order, memo ids,
torch storage addresses, cloudpickle tracker ids), and pickling a large array
copies it. Instead we walk the value once and stream type-tagged tokens into
one hasher; large buffers are fed straight from memory.

The canonical rules (pinned by tests, written down in docs/cache-rules.md):

* every token carries a type tag, so ``1``, ``1.0`` and ``True`` differ;
* floats are hashed by their IEEE bits: ``0.0 != -0.0`` and NaN payloads differ;
* plain ``dict`` order is ignored, ``OrderedDict`` order is not; sets are
  canonicalised by sorting their elements' digests;
* shared references and cycles are encoded by structure, so ``(a, a)`` differs
  from ``(a, copy(a))``;
* functions and classes are hashed by symbol and code digest (``codegraph``);
* plain objects by class code digest plus the state pickle would save
  (``__reduce_ex__``), so a class's own ``__getstate__``/``__reduce__`` is honoured;
* anything that cannot be hashed deterministically raises ``HashError`` naming
  its path; there is no silent fallback.

Dispatch is by exact ``type(obj)`` through a registry (never ``obj.__class__``,
which proxies override), with lazily registered handlers for third-party
modules so that ``import memolab`` imports neither numpy nor torch.
"""
from __future__ import annotations

import struct
import sys
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import xxhash

from .errors import HashError

#: Bump when the encoding changes, so new keys can never collide with old ones.
SCHEMA = "h1"
ALGORITHM = "xxh3_128"
KEY_SCHEMA = f"{SCHEMA}-{ALGORITHM}"

_pack_q = struct.Struct("<q").pack
_pack_d = struct.Struct("<d").pack
_pack_Q = struct.Struct("<Q").pack

Handler = Callable[["Encoder", Any], None]

_dispatch: Dict[type, Handler] = {}
_lazy: Dict[str, Callable[[], None]] = {}


def _new_hasher():
    return xxhash.xxh3_128()


class Encoder:
    """Streams type-tagged tokens of one or more values into a hasher.

    ``memo`` maps ``id(obj)`` of containers already seen to their visit index,
    so cycles terminate and shared references are encoded as back-references.
    ``keep`` holds every memoised object alive while we hash: a temporary
    (a ``__getstate__`` dict, say) freed mid-walk could otherwise hand its id to
    a new object and turn into a false back-reference.
    """

    __slots__ = ("h", "buf", "memo", "keep")

    def __init__(self) -> None:
        self.h = _new_hasher()
        self.buf = bytearray()
        self.memo: Dict[int, int] = {}
        self.keep: List[Any] = []

    # -- low-level output -------------------------------------------------
    def write(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > 1 << 16:
            self.h.update(self.buf)
            self.buf.clear()

    def write_str(self, s: str) -> None:
        b = s.encode("utf-8", "surrogatepass")
        self.write(_pack_Q(len(b)))
        self.write(b)

    def write_buffer(self, mv: memoryview) -> None:
        """Feed a large contiguous buffer directly, without copying it."""
        self.write(_pack_Q(mv.nbytes))
        if self.buf:
            self.h.update(self.buf)
            self.buf.clear()
        self.h.update(mv)

    def hexdigest(self) -> str:
        if self.buf:
            self.h.update(self.buf)
            self.buf.clear()
        return self.h.hexdigest()

    def restart(self) -> None:
        """Start a new digest but keep the memo (used for per-argument digests)."""
        self.hexdigest()
        self.h = _new_hasher()

    # -- traversal ----------------------------------------------------------
    def memoize(self, obj: Any) -> bool:
        """Record ``obj``; if it was seen before write a back-reference and return True."""
        i = id(obj)
        n = self.memo.get(i)
        if n is not None:
            self.write(b"R" + _pack_q(n))
            return True
        self.memo[i] = len(self.memo)
        self.keep.append(obj)
        return False

    def encode(self, obj: Any) -> None:
        t = type(obj)
        handler = _dispatch.get(t)
        if handler is None:
            handler = _resolve(t)
        handler(self, obj)

    def encode_child(self, obj: Any, segment: str) -> None:
        try:
            self.encode(obj)
        except HashError as e:
            raise e.at(segment)
        except RecursionError:
            raise HashError("value is nested too deeply to hash", segment, obj) from None


# -- registry ----------------------------------------------------------------------

def register_hasher(type_: type, fn: Callable[[Any], Any]) -> None:
    """Hash instances of ``type_`` as ``fn(obj)`` (any hashable-by-memolab value).

    The type's qualified name is mixed in, so two types mapping to equal
    substitutes still hash differently.
    """
    tag = _type_name(type_)

    def handler(enc: Encoder, obj: Any) -> None:
        enc.write(b"U")
        enc.write_str(tag)
        enc.encode_child(fn(obj), "")

    _dispatch[type_] = handler


def register_opaque(type_: type) -> None:
    """Leave instances of ``type_`` (loggers, clients, progress bars) out of keys.

    They hash to a constant that depends only on the type, so changing one never
    causes a miss. Use this only for objects that cannot affect a result.
    """
    tag = _type_name(type_)

    def handler(enc: Encoder, obj: Any) -> None:
        enc.write(b"Q")
        enc.write_str(tag)

    _dispatch[type_] = handler


def register_handler(type_: type, handler: Handler) -> None:
    """Low-level: register a streaming handler ``handler(encoder, obj)``."""
    _dispatch[type_] = handler


def register_lazy(toplevel: str, register: Callable[[], None]) -> None:
    """Run ``register()`` the first time a type from module ``toplevel`` is hashed."""
    _lazy[toplevel] = register


def _type_name(t: type) -> str:
    return f"{t.__module__}:{t.__qualname__}"


def _resolve(t: type) -> Handler:
    toplevel = t.__module__.split(".", 1)[0] if isinstance(t.__module__, str) else ""
    reg = _lazy.pop(toplevel, None)
    if reg is not None:
        reg()
        h = _dispatch.get(t)
        if h is not None:
            return h
    # Inherit the handler of the nearest registered base class, except for the
    # built-in containers: a subclass of dict may carry attributes of its own.
    for base in t.__mro__[1:]:
        h = _dispatch.get(base)
        if h is not None and base not in _STRUCTURAL:
            _dispatch[t] = h
            return h
    if hasattr(t, "__memo_hash__"):
        h = _encode_protocol
    elif isinstance(t, type) and issubclass(t, type):
        h = _encode_class
    else:
        h = _encode_object
    _dispatch[t] = h
    return h


# -- atoms -------------------------------------------------------------------------

def _encode_none(enc: Encoder, obj: Any) -> None:
    enc.write(b"N")


def _encode_bool(enc: Encoder, obj: bool) -> None:
    enc.write(b"T" if obj else b"F")


def _encode_int(enc: Encoder, obj: int) -> None:
    if -(1 << 63) <= obj < (1 << 63):
        enc.write(b"i" + _pack_q(obj))
    else:
        b = obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
        enc.write(b"I" + _pack_Q(len(b)) + b)


def _encode_float(enc: Encoder, obj: float) -> None:
    enc.write(b"f" + _pack_d(obj))


def _encode_complex(enc: Encoder, obj: complex) -> None:
    enc.write(b"c" + _pack_d(obj.real) + _pack_d(obj.imag))


def _encode_str(enc: Encoder, obj: str) -> None:
    enc.write(b"s")
    enc.write_str(obj)


def _encode_bytes(enc: Encoder, obj: bytes) -> None:
    enc.write(b"b")
    if len(obj) > 1 << 16:
        enc.write_buffer(memoryview(obj))
    else:
        enc.write(_pack_Q(len(obj)) + obj)


def _encode_bytearray(enc: Encoder, obj: bytearray) -> None:
    enc.write(b"y")
    enc.write_buffer(memoryview(obj))


def _encode_memoryview(enc: Encoder, obj: memoryview) -> None:
    enc.write(b"m")
    enc.write_str(obj.format)
    enc.write(_pack_Q(obj.ndim) + b"".join(_pack_q(s) for s in obj.shape or ()))
    if obj.c_contiguous:
        enc.write_buffer(obj.cast("B") if obj.ndim else obj)
    else:
        enc.write_buffer(memoryview(obj.tobytes()))


# -- containers --------------------------------------------------------------------

def _encode_seq(tag: bytes) -> Handler:
    def handler(enc: Encoder, obj: Sequence) -> None:
        if enc.memoize(obj):
            return
        enc.write(tag + _pack_Q(len(obj)))
        for i, x in enumerate(obj):
            t = type(x)
            h = _dispatch.get(t)
            if h is _encode_int or h is _encode_str or h is _encode_float:
                h(enc, x)  # fast path: atoms cannot fail
            else:
                enc.encode_child(x, f"[{i}]")

    return handler


def _sort_key_digest(x: Any) -> str:
    return hash_value(x)


def _encode_dict(enc: Encoder, obj: dict) -> None:
    if enc.memoize(obj):
        return
    enc.write(b"d" + _pack_Q(len(obj)))
    _encode_items(enc, obj.items(), ordered=False)


def _encode_ordered_dict(enc: Encoder, obj: OrderedDict) -> None:
    if enc.memoize(obj):
        return
    enc.write(b"o" + _pack_Q(len(obj)))
    _encode_items(enc, obj.items(), ordered=True)
    _encode_extra_state(enc, obj)


def _encode_items(enc: Encoder, items: Iterable[Tuple[Any, Any]], ordered: bool) -> None:
    items = list(items)
    if not ordered:
        if all(type(k) is str for k, _ in items):
            items.sort(key=lambda kv: kv[0])
        else:
            # Mixed or non-string keys: order by the key's own digest, which is
            # canonical whatever the keys' types and insertion order.
            items = [kv for _, kv in sorted(((_sort_key_digest(k), (k, v)) for k, v in items), key=lambda p: p[0])]
    for k, v in items:
        seg = f"[{k!r}]" if type(k) in (str, int) else "[<key>]"
        enc.encode_child(k, seg + ".<key>" if seg == "[<key>]" else seg)
        enc.encode_child(v, seg)


def _encode_set(tag: bytes) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        if enc.memoize(obj):
            return
        enc.write(tag + _pack_Q(len(obj)))
        try:
            digests = sorted(hash_value(x) for x in obj)
        except HashError as e:
            raise e.at("{<element>}")
        for d in digests:
            enc.write(d.encode("ascii"))

    return handler


def _encode_extra_state(enc: Encoder, obj: Any) -> None:
    """Attributes that a subclass instance carries besides its container data."""
    d = getattr(obj, "__dict__", None)
    if d:
        enc.write(b"A")
        enc.encode_child(d, "")


# -- code and modules -------------------------------------------------------------

def _encode_function(enc: Encoder, obj: Any) -> None:
    from . import codegraph

    enc.write(b"P")
    enc.write_str(codegraph.symbol_of(obj))
    enc.write_str(codegraph.object_digest(obj))
    # A closure's captured values and a function's defaults are part of what it does.
    cells = getattr(obj, "__closure__", None)
    if cells:
        enc.write(b"(")
        for name, cell in zip(obj.__code__.co_freevars, cells):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (variable not yet bound)
                enc.write(b"-")
                continue
            if value is obj:
                enc.write(b"@")
                continue
            enc.encode_child(value, f".<closure {name}>")
        enc.write(b")")
    if getattr(obj, "__defaults__", None):
        enc.encode_child(obj.__defaults__, ".__defaults__")
    if getattr(obj, "__kwdefaults__", None):
        enc.encode_child(obj.__kwdefaults__, ".__kwdefaults__")


def _encode_builtin_function(enc: Encoder, obj: Any) -> None:
    enc.write(b"B")
    self_ = getattr(obj, "__self__", None)
    if self_ is not None and not isinstance(self_, type(sys)):
        # a bound method of a builtin object, e.g. ``[].append``
        enc.write_str(getattr(obj, "__qualname__", obj.__name__))
        enc.encode_child(self_, ".__self__")
        return
    enc.write_str(f"{getattr(obj, '__module__', None)}:{getattr(obj, '__qualname__', obj.__name__)}")


def _encode_method(enc: Encoder, obj: Any) -> None:
    enc.write(b"W")
    enc.encode_child(obj.__func__, ".__func__")
    enc.encode_child(obj.__self__, ".__self__")


def _encode_class(enc: Encoder, obj: type) -> None:
    from . import codegraph

    enc.write(b"C")
    enc.write_str(codegraph.symbol_of(obj))
    enc.write_str(codegraph.object_digest(obj))


def _encode_module(enc: Encoder, obj: Any) -> None:
    enc.write(b"M")
    enc.write_str(obj.__name__)


def _encode_protocol(enc: Encoder, obj: Any) -> None:
    enc.write(b"X")
    enc.write_str(_type_name(type(obj)))
    enc.encode_child(obj.__memo_hash__(), ".__memo_hash__()")


def _refuse(reason: str) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        raise HashError(reason, "", obj)

    return handler


# -- generic objects ---------------------------------------------------------------

def _encode_object(enc: Encoder, obj: Any) -> None:
    """Class identity (symbol + code digest) plus what pickle would save."""
    if enc.memoize(obj):
        return
    t = type(obj)
    try:
        rv = obj.__reduce_ex__(4)
    except Exception as e:  # the object says it cannot be pickled
        raise HashError(f"cannot hash {t.__qualname__} object ({e})", "", obj) from None
    if isinstance(rv, str):  # a global singleton, pickled by name
        enc.write(b"G")
        enc.write_str(f"{t.__module__}:{rv}")
        return
    enc.write(b"O")
    _encode_class(enc, t)
    func, args = rv[0], rv[1]
    state = rv[2] if len(rv) > 2 else None
    listitems = rv[3] if len(rv) > 3 else None
    dictitems = rv[4] if len(rv) > 4 else None
    # copyreg.__newobj__(cls) is the common case: the class is already hashed.
    if getattr(func, "__name__", "") in ("__newobj__", "__newobj_ex__") and args and args[0] is t:
        enc.write(b"n")
        if len(args) > 1:
            enc.encode_child(args[1:], ".<new args>")
    else:
        enc.encode_child(func, ".<reduce>")
        enc.encode_child(args, ".<reduce args>")
    if state is not None:
        _encode_state(enc, state)
    if listitems is not None:
        enc.write(b"L")
        enc.encode_child(list(listitems), "")
    if dictitems is not None:
        enc.write(b"D")
        ordered = isinstance(obj, OrderedDict)
        items = list(dictitems)
        tmp = OrderedDict(items) if ordered else dict(items)
        enc.encode_child(tmp, "")


def _encode_state(enc: Encoder, state: Any) -> None:
    enc.write(b"S")
    if type(state) is dict:
        # attributes: path segments read as ``.name``
        if enc.memoize(state):
            return
        enc.write(b"d" + _pack_Q(len(state)))
        for k in sorted(state, key=str):
            enc.encode_child(k, "")
            enc.encode_child(state[k], f".{k}")
    elif type(state) is tuple and len(state) == 2 and (state[0] is None or type(state[0]) is dict) and type(state[1]) is dict:
        # (__dict__, __slots__ values)
        enc.write(b"2")
        _encode_state(enc, state[0] or {})
        _encode_state(enc, state[1])
    else:
        enc.encode_child(state, ".<state>")


# -- public API --------------------------------------------------------------------

def hash_value(obj: Any, path: str = "") -> str:
    """The hex digest of ``obj``; raises ``HashError`` naming ``path`` + the inner path."""
    enc = Encoder()
    try:
        enc.encode(obj)
    except HashError as e:
        raise e.at(path)
    except RecursionError:
        raise HashError("value is nested too deeply to hash", path, obj) from None
    return enc.hexdigest()


def hash_arguments(named: Sequence[Tuple[str, Any]], root: str = "args") -> Tuple[str, Dict[str, str]]:
    """Digest bound arguments: (combined digest, {name: per-argument digest}).

    One memo spans all arguments so ``f(a, a)`` and ``f(a, copy(a))`` differ;
    per-argument digests let ``explain`` say which argument changed.
    """
    enc = Encoder()
    per: Dict[str, str] = {}
    for name, value in named:
        enc.restart()
        try:
            enc.encode(value)
        except HashError as e:
            raise e.at(f"{root}[{name!r}]")
        except RecursionError:
            raise HashError("value is nested too deeply to hash", f"{root}[{name!r}]", value) from None
        per[name] = enc.hexdigest()
    top = _new_hasher()
    top.update(KEY_SCHEMA.encode())
    for name, d in per.items():
        top.update(_pack_Q(len(name)) + name.encode() + d.encode())
    return top.hexdigest(), per


def _register_builtins() -> None:
    import datetime
    import decimal
    import enum
    import fractions
    import pathlib
    import types
    import uuid

    reg = _dispatch
    reg[type(None)] = _encode_none
    reg[bool] = _encode_bool
    reg[int] = _encode_int
    reg[float] = _encode_float
    reg[complex] = _encode_complex
    reg[str] = _encode_str
    reg[bytes] = _encode_bytes
    reg[bytearray] = _encode_bytearray
    reg[memoryview] = _encode_memoryview
    reg[list] = _encode_seq(b"l")
    reg[tuple] = _encode_seq(b"t")
    reg[dict] = _encode_dict
    reg[OrderedDict] = _encode_ordered_dict
    reg[set] = _encode_set(b"{")
    reg[frozenset] = _encode_set(b"}")
    reg[types.FunctionType] = _encode_function
    reg[types.BuiltinFunctionType] = _encode_builtin_function
    reg[types.MethodType] = _encode_method
    reg[types.ModuleType] = _encode_module
    reg[type] = _encode_class
    reg[type(Ellipsis)] = lambda enc, obj: enc.write(b".")
    reg[type(NotImplemented)] = lambda enc, obj: enc.write(b"!")
    reg[range] = lambda enc, obj: enc.write(b"r" + _pack_q(obj.start) + _pack_q(obj.stop) + _pack_q(obj.step))
    reg[slice] = lambda enc, obj: (enc.write(b":"), enc.encode_child((obj.start, obj.stop, obj.step), ""))
    for t in (pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath, pathlib.PureWindowsPath):
        reg[t] = (lambda tag: lambda enc, obj: (enc.write(b"p"), enc.write_str(tag), enc.write_str(str(obj))))(t.__name__)
    reg[decimal.Decimal] = lambda enc, obj: (enc.write(b"$"), enc.write_str(str(obj)))
    reg[fractions.Fraction] = lambda enc, obj: (enc.write(b"/"), _encode_int(enc, obj.numerator), _encode_int(enc, obj.denominator))
    reg[uuid.UUID] = lambda enc, obj: enc.write(b"u" + obj.bytes)
    for t in (datetime.datetime, datetime.date, datetime.time, datetime.timedelta, datetime.timezone):
        reg[t] = (lambda tag: lambda enc, obj: (enc.write(b"z"), enc.write_str(tag), enc.write_str(repr(obj))))(t.__name__)

    live = "cannot hash a live {} (its position is hidden state); pass what creates it instead"
    reg[types.GeneratorType] = _refuse(live.format("generator"))
    reg[types.CoroutineType] = _refuse(live.format("coroutine"))
    reg[types.AsyncGeneratorType] = _refuse(live.format("async generator"))
    reg[types.FrameType] = _refuse("cannot hash a stack frame")
    reg[types.TracebackType] = _refuse("cannot hash a traceback")

    import io
    import threading

    for t in (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO):
        reg[t] = _refuse("cannot hash an open file; pass its path (or memolab.File(path)) instead")
    reg[type(threading.Lock())] = _refuse("cannot hash a lock")
    reg[type(threading.RLock())] = _refuse("cannot hash a lock")

    # Enum members are singletons: class identity plus member name.
    def enc_enum(enc: Encoder, obj: Any) -> None:
        enc.write(b"E")
        _encode_class(enc, type(obj))
        enc.write_str(obj.name)

    reg[enum.Enum] = enc_enum
    reg[enum.IntEnum] = enc_enum
    reg[enum.Flag] = enc_enum
    reg[enum.IntFlag] = enc_enum

    import functools

    def enc_partial(enc: Encoder, obj: Any) -> None:
        enc.write(b"~")
        enc.encode_child(obj.func, ".func")
        enc.encode_child(obj.args, ".args")
        enc.encode_child(obj.keywords, ".keywords")

    reg[functools.partial] = enc_partial


def _register_numpy() -> None:
    import numpy as np

    def enc_array(enc: Encoder, arr: Any) -> None:
        if enc.memoize(arr):
            return
        enc.write(b"a")
        enc.write_str(arr.dtype.str if arr.dtype.fields is None else repr(arr.dtype.descr))
        enc.write(_pack_Q(arr.ndim) + b"".join(_pack_q(s) for s in arr.shape))
        if arr.dtype.hasobject:
            enc.encode_child(arr.tolist(), "")
            return
        a = np.ascontiguousarray(arr)
        enc.write_buffer(memoryview(a).cast("B") if a.ndim else memoryview(a.reshape(1)).cast("B"))

    def enc_scalar(enc: Encoder, x: Any) -> None:
        enc.write(b"g")
        enc.write_str(x.dtype.str)
        if x.dtype.hasobject:
            enc.encode_child(x.item(), "")
        else:
            enc.write(x.tobytes())

    def enc_dtype(enc: Encoder, d: Any) -> None:
        enc.write(b"e")
        enc.write_str(d.str if d.fields is None else repr(d.descr))

    _dispatch[np.ndarray] = enc_array
    for t in set(np.sctypeDict.values()):
        _dispatch[t] = enc_scalar
    _dispatch[np.dtype] = enc_dtype
    for t in set(type(np.dtype(c)) for c in "?bBhHiIlLqQefdgFDGSUVOMm"):
        _dispatch[t] = enc_dtype


_STRUCTURAL = frozenset((list, tuple, dict, set, frozenset, bytes, str, int, float))
_register_builtins()
register_lazy("numpy", _register_numpy)
