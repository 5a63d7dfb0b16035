"""Tensors (and their small value types: dtype, device, layout, memory format, Size).

Tensors are hashed by (type, dtype, shape, device type, requires_grad) plus
their C-order bytes: views, transposes and clones of equal values hash equal,
``reshape(2, 3)`` and ``reshape(3, 2)`` do not. Bytes, not values: ``0.0`` and
``-0.0`` differ, and so do NaN payloads (same rule as Python floats).

Identity cache: a tensor's ``_version`` counter changes on every in-place op
(including ``x[i] = ...``, ``out=`` and writes through views), so a tensor we
have hashed and whose stamp (version, data pointer, shape, strides, dtype,
device) is unchanged keeps its digest. Measured exceptions, where memory
changes without the counter moving, are excluded (see docs/torch.md):

* ``nn.Parameter`` and other leaf tensors that require grad: ``p.data.add_()``
  is idiomatic and bypasses the counter;
* everything inside an ``nn.Module`` or an optimizer (``modules``, ``optim``):
  BatchNorm updates its running stats in the kernel without bumping their version;
* tensors sharing memory with numpy or a Python buffer (``from_numpy``,
  ``frombuffer``, after ``t.numpy()``): writes on the numpy side are invisible
  to the counter. Torch marks such storage non-resizable (measured:
  ``t.numpy()`` flips ``untyped_storage().resizable()`` to False), so these are
  recognised and always rehashed;
* tensors loaded from the store are lazy (copy-on-write) clones of one copy of
  their blob (``pickling``): trusted while ``torch._C._is_cow_tensor`` holds,
  which every access that could write ends for good;
* inference-mode tensors, which have no version counter.
"""
from __future__ import annotations

import ctypes
from typing import Any

import torch

from .. import hashing
from ..errors import HashError
from ..hashing import Encoder, Leaf


def tensor_digest(t: Any) -> bytes:
    """The digest of one tensor's own encoding (metadata + C-order bytes)."""
    sub = Encoder()
    sub.write_str(str(t.dtype))
    sub.write_ints(t.shape)
    sub.write_str(t.device.type)
    sub.write(b"g" if t.requires_grad else b"-")
    if t.layout == torch.sparse_coo:
        # an uncoalesced tensor and its coalesced form are the same value
        c = t.detach().coalesce()
        sub.write(b"coo")
        sub.write(tensor_digest(c.indices()) + tensor_digest(c.values()))
        return sub.digest()
    if t.layout != torch.strided:
        raise HashError(f"cannot hash a tensor with layout {t.layout}; convert it with .to_dense()", "", t)
    if t.is_quantized:
        raise HashError("cannot hash a quantized tensor; pass t.int_repr() with its scale and zero point", "", t)
    if t.is_meta:
        sub.write(b"meta")  # no data, only its metadata
        return sub.digest()
    x = t.detach().resolve_conj().resolve_neg()
    if x.device.type != "cpu":
        x = x.cpu()
    x = x.contiguous()
    sub.write(b"s")
    sub.write_buffer(raw_bytes(x))
    return sub.digest()


def raw_bytes(x: Any) -> memoryview:
    """The bytes of contiguous CPU tensor (or untyped storage) ``x``, without copying them.

    Not through ``x.numpy()``: exporting to numpy marks the storage
    non-resizable for good, which is exactly the signal ``_stamp`` uses to
    detect memory shared with numpy — hashing and storing must not set it.
    The view keeps ``x`` alive.
    """
    n = x.nbytes() if isinstance(x, torch.UntypedStorage) else x.numel() * x.element_size()
    if n == 0:
        return memoryview(b"")
    # const: reading a lazy (copy-on-write) clone must not materialize it
    ptr = (torch.empty(0, dtype=torch.uint8).set_(x) if isinstance(x, torch.UntypedStorage) else x).const_data_ptr()
    arr = (ctypes.c_char * n).from_address(ptr)
    arr.owner = x  # type: ignore[attr-defined]  # the memory lives as long as the view
    return memoryview(arr).cast("B")


_is_cow = getattr(torch._C, "_is_cow_tensor", None)


def _stamp(t: Any) -> Any:
    if t.requires_grad and t.is_leaf:
        return None  # parameters: ``p.data`` writes do not move the version counter
    if t.layout != torch.strided:
        return None
    try:
        version = t._version
    except RuntimeError:  # inference tensors track no version
        return None
    storage = t.untyped_storage()
    if _is_cow is not None and _is_cow(t):
        # A lazy clone of a stored blob (``pickling._lazy_copy_of_blob``) that no
        # access able to write has touched since: torch materializes a private
        # copy on the first such access (in-place op, ``.numpy()``, DLPack,
        # ``data_ptr()``), and then this is False for good. No pointer is read
        # here: ``data_ptr()`` itself would materialize.
        return ("cow", storage._cdata, version, t.shape, t.stride(), t.storage_offset(), t.dtype, t.device,
                t.requires_grad)
    if not storage.resizable():
        # Memory shared with numpy or a buffer (``from_numpy``, ``frombuffer``,
        # after ``t.numpy()``): writes there are invisible to the counter, so
        # such tensors are rehashed, at memory speed, rather than trusted.
        return None
    # a tensor exported with ``.numpy()`` afterwards flips ``resizable`` (stamp
    # None from then on); ``.data = other`` moves the data pointer
    return (version, t.const_data_ptr(), storage._cdata, t.shape, t.stride(), t.storage_offset(), t.dtype,
            t.device, t.requires_grad)


LEAF = Leaf(tensor_digest, _stamp, _stamp)


def encode_tensor(enc: Encoder, t: Any) -> None:
    if enc.memoize(t):
        return
    enc.write(b"\x10T")  # torch tokens: lead byte 0x10, then a kind letter
    enc.write_type(type(t))
    enc.write_leaf(t, LEAF)
    extra = getattr(t, "__dict__", None)
    if extra:  # attributes set on a tensor or Parameter are state too
        enc.write(b"+")
        enc.encode_child(extra, "")
    else:
        enc.write(b"-")


def register() -> None:
    reg = hashing.register_handler
    for t in (torch.Tensor, torch.nn.Parameter):
        reg(t, encode_tensor)
        hashing.register_leaf(t, LEAF)
    reg(torch.dtype, lambda enc, d: (enc.write(b"\x10d"), enc.write_str(str(d))))
    reg(torch.device, lambda enc, d: (enc.write(b"\x10v"), enc.write_str(str(d))))
    reg(torch.layout, lambda enc, d: (enc.write(b"\x10l"), enc.write_str(str(d))))
    reg(torch.memory_format, lambda enc, d: (enc.write(b"\x10m"), enc.write_str(str(d))))
    reg(torch.Size, lambda enc, s: (enc.write(b"\x10S"), enc.write_ints(s)))
