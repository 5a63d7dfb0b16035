"""Handlers of the built-in types: atoms, containers, code and modules, and the
standard library's value types (paths, dates, enums, partials…), registered by
``register_builtins``. Atoms append to ``enc.buf`` directly (a method call per
token is most of the cost of a small config); containers flush it as they go."""
from __future__ import annotations

import struct
import sys
import types
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from .. import codegraph
from ..errors import HashError
from .encoder import Encoder, hash_value
from .objects import child_error, encode_class, encode_extra_state, resolve
from .primitives import pack_d, pack_Q, pack_q
from .registry import TYPE_BLIND, Handler, dispatch


def _encode_none(enc: Encoder, obj: Any) -> None:
    enc.buf += b"N"


def _encode_bool(enc: Encoder, obj: bool) -> None:
    enc.buf += b"T" if obj else b"F"


def _encode_int(enc: Encoder, obj: int) -> None:
    if -(1 << 63) <= obj < (1 << 63):
        enc.buf += b"i" + pack_q(obj)
    else:
        b = obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
        enc.write(b"I" + pack_Q(len(b)) + b)


def _encode_float(enc: Encoder, obj: float) -> None:
    enc.buf += b"f" + pack_d(obj)


def _encode_complex(enc: Encoder, obj: complex) -> None:
    enc.write(b"c" + pack_d(obj.real) + pack_d(obj.imag))


def encode_str(enc: Encoder, obj: str) -> None:
    b = obj.encode("utf-8", "surrogatepass")
    if len(b) > 1 << 16:
        enc.write(b"s" + pack_Q(len(b)))
        enc.write(b)
    else:
        enc.buf += b"s" + pack_Q(len(b)) + b


def _encode_bytes(enc: Encoder, obj: bytes) -> None:
    enc.write(b"b")
    if len(obj) > 1 << 16:
        enc.write_buffer(memoryview(obj))
    else:
        enc.write(pack_Q(len(obj)) + obj)


def _encode_bytearray(enc: Encoder, obj: bytearray) -> None:
    enc.write(b"y")
    enc.write_buffer(memoryview(obj))


def _encode_memoryview(enc: Encoder, obj: memoryview) -> None:
    enc.write(b"m")
    enc.write_str(obj.format)
    enc.write(pack_Q(obj.ndim) + b"".join(pack_q(s) for s in obj.shape or ()))
    if obj.c_contiguous:
        enc.write_buffer(obj.cast("B") if obj.ndim else obj)
    else:
        enc.write_buffer(memoryview(obj.tobytes()))


def _encode_seq(tag: bytes, int_tag: bytes, float_tag: bytes) -> Handler:
    def handler(enc: Encoder, obj: Sequence[Any]) -> None:
        if enc.memoize(obj):
            return
        n = len(obj)
        if n >= 16:
            # A run of plain ints or floats is packed in one call (20x faster
            # than element by element). Its own tag keeps the grammar
            # unambiguous; which form is used depends only on the value.
            types = set(map(type, obj))
            if len(types) == 1:
                t = types.pop()
                packed = None
                if t is int:
                    try:
                        packed = struct.pack(f"<{n}q", *obj)
                    except struct.error:  # an int beyond 64 bits: element by element
                        pass
                    ptag = int_tag
                elif t is float:
                    packed = struct.pack(f"<{n}d", *obj)  # IEEE bits, like single floats
                    ptag = float_tag
                if packed is not None:
                    enc.write(ptag + pack_Q(n))
                    enc.flush()
                    enc.h.update(packed)
                    return
        enc.write(tag + pack_Q(n))
        i = 0
        get = dispatch.get
        buf = enc.buf
        try:
            for i, x in enumerate(obj):  # noqa: B007 (i names the failing element in the except below)
                h = get(type(x))
                if h is None:
                    h = resolve(type(x))
                h(enc, x)
                if len(buf) > 1 << 16:
                    enc.flush()
        except (HashError, RecursionError) as e:
            raise child_error(e, f"[{i}]", obj) from None

    return handler


def _sort_key_digest(x: Any) -> str:
    return hash_value(x)


def _encode_dict(enc: Encoder, obj: dict[Any, Any]) -> None:
    if enc.memoize(obj):
        return
    enc.write(b"d" + pack_Q(len(obj)))
    _encode_items(enc, obj.items(), ordered=False)


def _encode_ordered_dict(enc: Encoder, obj: OrderedDict[Any, Any]) -> None:
    if enc.memoize(obj):
        return
    enc.write(b"o" + pack_Q(len(obj)))
    _encode_items(enc, obj.items(), ordered=True)
    encode_extra_state(enc, obj)


def _first(kv: tuple[Any, Any]) -> Any:
    return kv[0]


def _encode_items(enc: Encoder, items: Iterable[tuple[Any, Any]], ordered: bool) -> None:
    items = list(items)
    if not ordered:
        if all([type(kv[0]) is str for kv in items]):
            items.sort(key=_first)
        else:
            # Mixed or non-string keys: order by the key's own digest, which is
            # canonical whatever the keys' types and insertion order.
            items = [kv for _, kv in sorted(((_sort_key_digest(k), (k, v)) for k, v in items), key=lambda p: p[0])]
    encode = enc.encode
    for k, v in items:
        tk = type(k)
        if tk is str:
            encode_str(enc, k)
        else:
            try:
                encode(k)
            except (HashError, RecursionError) as e:
                raise child_error(e, "[<key>].<key>", k) from None
        try:
            encode(v)
        except (HashError, RecursionError) as e:
            raise child_error(e, f"[{k!r}]" if tk in (str, int) else "[<key>]", v) from None


def _encode_set(tag: bytes) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        if enc.memoize(obj):
            return
        enc.write(tag + pack_Q(len(obj)))
        try:
            digests = sorted(hash_value(x) for x in obj)
        except HashError as e:
            e.at("{<element>}")  # the same error, its path completed
            raise
        for d in digests:
            enc.write(d.encode("ascii"))

    return handler


# -- code and modules -------------------------------------------------------------

def _encode_function(enc: Encoder, obj: Any) -> None:
    # memolab's own wrappers of library functions (``globalrng``'s seed watchers) hash as what they wrap
    obj = getattr(obj, "__memolab_wraps__", None) or obj
    enc.write(b"P")
    enc.write_str(codegraph.symbol_of(obj))
    enc.write_str(codegraph.object_digest(obj))
    # A closure's captured values and a function's defaults are part of what it does.
    cells = getattr(obj, "__closure__", None)
    if cells:
        enc.write(b"(")
        for name, cell in zip(obj.__code__.co_freevars, cells, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (variable not yet bound)
                enc.write(b"-")
                continue
            if value is obj:
                enc.write(b"@")
                continue
            if type(value) is types.FunctionType and value.__closure__ and not codegraph.is_user_code(value):
                # library code captured by a closure (singledispatch's ``dispatch``) counts by
                # its digest; its own captured state is library bookkeeping (weak caches)
                enc.write(b"p")
                enc.write_str(codegraph.symbol_of(value))
                enc.write_str(codegraph.object_digest(value))
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


def _encode_module(enc: Encoder, obj: Any) -> None:
    enc.write(b"M")
    enc.write_str(obj.__name__)
    # A module held as a value (``MODS = {"ops": ops}``, an argument, a submodule
    # bound after the graph was built) runs the code it binds: a name alone would
    # keep the key when that code is edited.
    enc.write_str(codegraph.object_digest(obj))


def _refuse(reason: str) -> Handler:
    def handler(enc: Encoder, obj: Any) -> None:
        raise HashError(reason, "", obj)

    return handler


def _encode_fraction(enc: Any, obj: Any) -> None:  # a fractions.Fraction
    enc.write(b"/")
    _encode_int(enc, obj.numerator)
    _encode_int(enc, obj.denominator)


def register_builtins() -> None:
    import datetime
    import decimal
    import enum
    import fractions
    import pathlib
    import types
    import uuid

    reg = dispatch
    reg[type(None)] = _encode_none
    reg[bool] = _encode_bool
    reg[int] = _encode_int
    reg[float] = _encode_float
    reg[complex] = _encode_complex
    reg[str] = encode_str
    reg[bytes] = _encode_bytes
    reg[bytearray] = _encode_bytearray
    reg[memoryview] = _encode_memoryview
    # Lead bytes below 0x20 are the multi-byte and packed forms; every token's
    # first byte decides how the rest is read, so no two encodings can collide.
    reg[list] = _encode_seq(b"l", b"\x14", b"\x16")
    reg[tuple] = _encode_seq(b"t", b"\x15", b"\x17")
    reg[dict] = _encode_dict
    reg[OrderedDict] = _encode_ordered_dict
    reg[set] = _encode_set(b"{")
    reg[frozenset] = _encode_set(b"}")
    reg[types.FunctionType] = _encode_function
    reg[types.BuiltinFunctionType] = _encode_builtin_function
    reg[types.MethodType] = _encode_method
    reg[types.ModuleType] = _encode_module
    reg[type] = encode_class
    reg[type(Ellipsis)] = lambda enc, obj: enc.write(b".")
    reg[type(NotImplemented)] = lambda enc, obj: enc.write(b"!")
    reg[range] = lambda enc, obj: enc.write(b"r" + pack_q(obj.start) + pack_q(obj.stop) + pack_q(obj.step))
    reg[slice] = lambda enc, obj: (enc.write(b":"), enc.encode_child((obj.start, obj.stop, obj.step), ""))
    t: type
    for t in (pathlib.PosixPath, pathlib.WindowsPath, pathlib.PurePosixPath, pathlib.PureWindowsPath):
        reg[t] = (lambda tag: lambda enc, obj: (enc.write(b"p"), enc.write_str(tag), enc.write_str(str(obj))))(t.__name__)
    reg[decimal.Decimal] = lambda enc, obj: (enc.write(b"$"), enc.write_str(str(obj)))
    reg[fractions.Fraction] = _encode_fraction
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
        encode_class(enc, type(obj))
        if obj.name is None:
            # a Flag with no named bits set (P(0)) or bits no member names (IntFlag(8)):
            # its value is what it is
            enc.write(b"\x00")
            enc.encode_child(obj._value_, "._value_")
        else:
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

    def enc_lru_cache(enc: Encoder, obj: Any) -> None:
        # pickled by name alone: it counts as the function it wraps (code digest, closure, defaults)
        # and the parameters that decide which calls share a cached value
        enc.write(b"\x1c")
        enc.write_str("functools.lru_cache")
        enc.encode_child(obj.__wrapped__, ".__wrapped__")
        params = obj.cache_parameters()
        enc.encode_child((params.get("maxsize"), params.get("typed")), ".cache_parameters()")

    reg[type(functools.lru_cache(maxsize=None)(_encode_none))] = enc_lru_cache
    TYPE_BLIND.update((OrderedDict, functools.partial, decimal.Decimal, fractions.Fraction, uuid.UUID,
                        pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath, pathlib.WindowsPath,
                        datetime.datetime, datetime.date, datetime.time, datetime.timedelta, datetime.timezone))
