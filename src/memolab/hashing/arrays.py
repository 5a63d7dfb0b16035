"""numpy arrays, scalars and dtypes: registered (``register``) before the first
type from numpy is hashed (the lazy hooks in ``memolab.settings.hooks``). Arrays are large
leaves: they enter their parent as their own digest, reused from the identity
cache where a stamp vouches the memory cannot have changed.

An array's content is its dtype, shape and the bytes of its values in C order,
read through a ``uint8`` view: the buffer protocol refuses ``datetime64`` and
``timedelta64`` (and structs holding them), whose int64 values with the unit in
the dtype string are their content. Bytes that are no value's are left out:
the padding of aligned or sparse structs and the six (or two) unused bytes of an
x87 ``longdouble``, which numpy leaves as whatever was in memory (measured:
``np.array([1.5], np.longdouble)`` differs there between two processes)."""
from __future__ import annotations

import sys
from typing import Any

from . import identity
from .encoder import Encoder
from .objects import encode_class, encode_extra_state
from .primitives import pack_Q, pack_q
from .registry import Leaf, dispatch, leaves, type_name


def register() -> None:
    import mmap

    import numpy as np

    def dtype_str(d: Any) -> str:
        # a struct by its repr: names, formats, offsets, itemsize and alignment (``descr`` cannot
        # spell overlapping fields); any other dtype by its str, the unit of a datetime included
        return d.str if d.fields is None else repr(d)

    extended = extended_precision(np)

    def array_digest(arr: Any) -> bytes:
        sub = Encoder()
        sub.write_str(dtype_str(arr.dtype))
        sub.write(pack_Q(arr.ndim) + b"".join(pack_q(s) for s in arr.shape))
        a = np.ascontiguousarray(arr)  # C order: views and transposes hash by value
        if padded(a.dtype, extended):
            write_values(sub, a, extended)
        else:
            sub.write_buffer(raw_bytes(np, a))
        return sub.digest()

    def exporter(arr: Any) -> Any:
        """The object that owns ``arr``'s memory, or None if an ndarray owns it."""
        base = arr.base
        while isinstance(base, np.ndarray):
            base = base.base
        return base

    def immutable_memory(base: Any) -> bool:
        if type(base) is bytes:
            return True
        if type(base) is memoryview:
            return base.readonly and (type(base.obj) is bytes or identity.is_trusted_exporter(base.obj))
        return base is not None and identity.is_trusted_exporter(base)

    def array_stamp(arr: Any) -> Any:
        # A read-only flag alone proves nothing: an array that owns its memory
        # can be made writeable again, and a read-only view may share memory
        # with a writeable array. Only memory nobody can write qualifies.
        if arr.flags.writeable or arr.dtype.hasobject:
            return None
        if not immutable_memory(exporter(arr)):
            return None
        # in-place ``arr.shape = ...`` / ``arr.dtype = ...`` change the stamp
        return (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype)

    def array_loaded(arr: Any) -> Any:
        base = exporter(arr)
        if type(base) is memoryview and base.readonly and type(base.obj) is mmap.mmap:
            identity.trust_exporter(base.obj)  # a read-only mapping of a store blob
        return array_stamp(arr)

    leaf = Leaf(array_digest, array_stamp, array_loaded)

    def enc_array(enc: Encoder, arr: Any) -> None:
        if enc.memoize(arr):
            return
        # A memmap is the array it maps (a stored one loads as a plain array over
        # its blob, and must key the same there); other subclasses (matrix, masked,
        # a user's) behave differently from a plain array, so their type counts.
        plain = type(arr) is np.ndarray or type(arr) is np.memmap
        if not plain:
            enc.write(b"\x18")
            enc.write_str(type_name(type(arr)))
        if arr.dtype.hasobject:
            enc.write(b"\x19")
            enc.write_str(dtype_str(arr.dtype))
            enc.write(pack_Q(arr.ndim) + b"".join(pack_q(s) for s in arr.shape))
            enc.encode_child(arr.tolist(), "")
        else:
            enc.write(b"a")
            enc.write_leaf(arr, leaf)
        if not plain:
            subclass_state(enc, arr)

    def subclass_state(enc: Encoder, arr: Any) -> None:
        """What a subclass holds besides its data: a masked array's mask, a user subclass's attributes."""
        ma = sys.modules.get("numpy.ma")
        if ma is not None and isinstance(arr, ma.MaskedArray):
            # masked values are still in the data; which ones are masked is what counts
            enc.write(b"k")
            enc.encode_child(ma.getmaskarray(arr), ".mask")
            enc.encode_child(arr.fill_value, ".fill_value")
            enc.write(b"T" if arr.hardmask else b"F")
        elif type(arr).__module__.split(".", 1)[0] != "numpy":
            # a user or third-party subclass (units, tags) may carry state and override behaviour
            encode_class(enc, type(arr))
            encode_extra_state(enc, arr)

    def enc_scalar(enc: Encoder, x: Any) -> None:
        enc.write(b"g")
        enc.write_str(x.dtype.str)
        if x.dtype.hasobject:
            enc.encode_child(x.item(), "")
        elif padded(x.dtype, extended):  # a long double, a struct record: its values, not its padding
            enc.write(b"H" + array_digest(np.asarray(x)))
        else:
            enc.write(x.tobytes())

    def enc_dtype(enc: Encoder, d: Any) -> None:
        enc.write(b"e")
        enc.write_str(dtype_str(d))

    dispatch[np.ndarray] = enc_array
    leaves[np.ndarray] = leaf
    t: type
    for t in set(np.sctypeDict.values()):
        dispatch[t] = enc_scalar
    dispatch[np.dtype] = enc_dtype
    for t in set(type(np.dtype(c)) for c in "?bBhHiIlLqQefdgFDGSUVOMm"):
        dispatch[t] = enc_dtype


def extended_precision(np: Any) -> tuple[int, int]:
    """``(significant, size)`` of a ``longdouble`` whose last bytes are padding: ``(10, 16)``
    (or ``(10, 12)``) for the x87 80-bit format on a little-endian machine; ``(0, 0)`` where
    every byte counts (IEEE quad, double-double, a long double that is a double)."""
    ld = np.dtype(np.longdouble)
    if ld.itemsize > 10 and np.finfo(np.longdouble).nmant == 63 and sys.byteorder == "little":
        return 10, ld.itemsize
    return 0, 0


def padded(d: Any, extended: tuple[int, int]) -> bool:
    """Does an array of ``d`` hold bytes that are no value's (struct padding, bytes two fields
    share or none covers, a long double's unused bytes)?"""
    if d.subdtype is not None:
        return padded(d.subdtype[0], extended)
    if d.fields is None:
        return extended[1] > 0 and d.kind in "fc" and d.itemsize == extended[1] * (2 if d.kind == "c" else 1)
    end = 0
    for name in d.names:
        fd, offset = d.fields[name][:2]
        if offset != end or padded(fd, extended):
            return True
        end = offset + fd.itemsize
    return bool(end != d.itemsize)


def write_values(sub: Encoder, a: Any, extended: tuple[int, int]) -> None:
    """The values of the C-contiguous ``a`` whose dtype is ``padded``: a struct field by field
    (its name, then its values, a subarray flattened), a long double by its significant bytes
    (the first ones, the last ones where it is stored byte-swapped)."""
    import numpy as np

    d = a.dtype
    if d.fields is not None:
        sub.write(pack_Q(len(d.names)))
        for name in d.names:
            sub.write_str(name)
            write_values(sub, np.ascontiguousarray(a[name]), extended)
    elif padded(d, extended):
        significant, size = extended
        parts = np.frombuffer(raw_bytes(np, a), np.uint8).reshape(-1, size)
        kept = parts[:, size - significant:] if d.byteorder == ">" else parts[:, :significant]
        sub.write_buffer(memoryview(np.ascontiguousarray(kept).reshape(-1)))  # type: ignore[arg-type]  # numpy's stubs: no __buffer__
    else:
        sub.write_buffer(raw_bytes(np, a))


def raw_bytes(np: Any, a: Any) -> memoryview:
    """The C-contiguous ``a``'s memory as flat bytes, without a copy, through a ``uint8`` view
    (the buffer protocol refuses ``datetime64``, ``timedelta64`` and structs holding them)."""
    if a.size == 0 or a.dtype.itemsize == 0:
        return memoryview(b"")
    return memoryview(a.reshape(-1).view(np.uint8))
