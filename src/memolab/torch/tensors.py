"""Tensors (and their small value types: dtype, device, layout, memory format, Size).

Tensors are hashed by (type, dtype, shape, device type, requires_grad) plus
their C-order bytes: views, transposes and clones of equal values hash equal,
``reshape(2, 3)`` and ``reshape(3, 2)`` do not. Bytes, not values: ``0.0`` and
``-0.0`` differ, and so do NaN payloads (same rule as Python floats).

Identity cache (``_stamp``; the rules and their proofs: docs/torch.md, "Identity
caches"): a recorded digest is reused only while torch or the kernel proves the
memory unwritten — a CPU storage made copy-on-write when first hashed (``_track``),
which torch materializes on the first access able to write it, or a stored
tensor's private mapping of its blob, no page of which the page table shows
written (``pagemap``). Version counters alone prove nothing (fused optimizer steps,
BatchNorm kernels and ``.data`` writes move none). Everything else is rehashed.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import torch

from .. import hashing
from ..errors import HashError, swallowed as _swallowed
from ..hashing import Encoder, Leaf
from . import pagemap


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
    ptr = (torch.empty(0, dtype=torch.uint8).set_(x) if isinstance(x, torch.UntypedStorage) else x).const_data_ptr()  # type: ignore[union-attr]  # torch's stubs lag its API
    arr = (ctypes.c_char * n).from_address(ptr)
    arr.owner = x  # type: ignore[attr-defined]  # the memory lives as long as the view
    return memoryview(arr).cast("B")


_is_cow: Any = getattr(torch._C, "_is_cow_tensor", None)
_lazy_clone: Any = getattr(torch, "_lazy_clone", None)
_storage_use_count: Any = getattr(torch._C, "_storage_Use_Count", None)
_TRACKED = _is_cow is not None and _lazy_clone is not None and _storage_use_count is not None \
    and hasattr(torch.Tensor, "_use_count")


def cow_works() -> bool:
    """Self-test (at first use, and ``make selftest``): a lazy clone leaves a storage
    copy-on-write, a const read keeps it so, and each access able to write it ends it (an
    in-place op, ``data_ptr()``, ``.numpy()``): what ``_stamp`` trusts."""
    if not _TRACKED:
        return False
    try:
        writes: tuple[Any, ...] = (lambda t: t.add_(1), lambda t: t.data_ptr(), lambda t: t.numpy())
        for write in writes:
            t = torch.zeros(4)
            _lazy_clone(t)  # the clone dropped: t's storage stays copy-on-write
            if not _is_cow(t):
                return False
            t.const_data_ptr()  # type: ignore[attr-defined]  # torch's stubs lag its API
            if not _is_cow(t):
                return False
            write(t)
            if _is_cow(t):
                return False
        return True
    except Exception:  # a self-test of torch internals: on an unknown torch it may fail in any way
        _swallowed("torch.tensors: cow_works")
        return False


_TRACKED = cow_works()


def _stamp(t: Any, pages: bool = True) -> Any:
    """What must be unchanged for ``t``'s recorded digest to be reused, or None (rehash it).

    Only a storage whose every write torch can see is trusted: a *copy-on-write*
    storage (``_is_cow_tensor``). torch materializes such a storage on the first
    access able to write it — an in-place op, any kernel writing through it (a fused
    optimizer step, BatchNorm's running statistics), a write through ``.data``, a view,
    a ``state_dict()`` alias or ``untyped_storage()``, and every export of its address
    (``.numpy()``, DLPack, ``data_ptr()``) — and from then on it is no longer
    copy-on-write. A digest is recorded only for a storage that is copy-on-write before
    its bytes are read (``_track`` makes it so), and reused only while it still is: a
    storage made copy-on-write again later is a new recording (``_track`` replaces the
    entry), never a match of the old one. Everything else is rehashed: CUDA tensors,
    shared memory, file mappings, memory shared with numpy, inference tensors, storages
    other tensors held when it was first hashed (docs/torch.md, "Identity caches").

    ``pages=False``: a mapping's page table is not read (what ``_track_loaded`` records for a
    mapping made a moment ago: every stamp it is compared with reads it, and a page written at
    any time since the mapping was made, during the unpickling included, shows there then)."""
    if not _TRACKED or t.layout != torch.strided or t.device.type != "cpu":
        return None
    try:
        version = t._version
    except RuntimeError:  # inference tensors track no version
        return None
    storage = t.untyped_storage()
    if _is_cow(t):
        if not storage.resizable():
            return None  # memory shared with numpy (``t.numpy()`` also materializes: belt and braces)
        kind = "cow"
    else:
        # a stored tensor: a private mapping of its blob, unchanged while the kernel's page table
        # shows no page of it written (by anything: torch, numpy, DLPack, ctypes)
        where = _mapping_of(storage) if _mapped else None
        if where is None or (pages and not pagemap.untouched(*where)):
            return None
        kind = "map"
    # the storage's address is pinned by the entry (``_pin``): no later storage can reuse it
    return (kind, storage._cdata, version, t.shape, t.stride(), t.storage_offset(), t.dtype, t.requires_grad)


def _track(t: Any, loaded: bool = False) -> Any:
    """``_stamp``, after making ``t``'s storage copy-on-write if it may be (``_adopt``):
    called on a miss of the identity cache, before the bytes are read. ``loaded``: the
    storage was made by memolab's unpickler a moment ago (an inline result's bytes copied
    into torch-owned memory), so no address of it has gone out, whoever else holds it
    (views within the result)."""
    if (_TRACKED and t.layout == torch.strided and t.device.type == "cpu" and not _is_cow(t)
            and not t.is_inference()):
        storage = t.untyped_storage()
        if storage.resizable():
            _adopt(t, storage, loaded)
    return _stamp(t, pages=not loaded)


def _track_loaded(t: Any) -> Any:
    return _track(t, loaded=True)


def _adopt(t: Any, storage: Any, loaded: bool = False) -> bool:
    """Make ``t``'s storage copy-on-write (``torch._lazy_clone``, the clone dropped at
    once: the storage keeps its memory and address, and the next write takes it back
    without a copy). Only a storage nobody else holds: one tensor (this one, held by
    Python alone) and our storage object. Another tensor on it, or another holder of
    this tensor (a DLPack export holds one), may be how a raw address went out before
    now, and a write through that address would go unseen. Storages torch cannot
    clone lazily (shared memory, file mappings, pinned memory) stay untrusted."""
    if not loaded and (_storage_use_count(storage._cdata) != 2 or t._use_count() != 1):
        return False
    try:
        _lazy_clone(t.detach())
    except RuntimeError:
        return False
    return bool(_is_cow(t))


class _Pin:
    """Holds a storage's address for as long as an identity entry refers to it: a weak
    reference to the storage object keeps its address from being reused by a new storage,
    so a tensor that was given another storage (``.data = other``) never matches its old
    entry."""

    __slots__ = ("handle",)

    def __init__(self, storage: Any) -> None:
        self.handle = storage._weak_ref()

    def expired(self) -> bool:
        """Has the storage been freed (its address held by this pin alone)?"""
        return bool(torch.UntypedStorage._expired(self.handle))

    # bound when the class is made: at interpreter shutdown this module's globals (torch, _swallowed)
    # may already be None, and a pin freed then printed "TypeError: 'NoneType' object is not callable"
    def __del__(self, _free: Any = torch.UntypedStorage._free_weak_ref, _log: Any = _swallowed) -> None:
        try:
            _free(self.handle)
        except Exception:  # interpreter shutdown: torch may be half torn down
            _log("torch.tensors: _Pin.__del__")


def _pin(t: Any) -> Any:
    return _Pin(t.untyped_storage())


# -- stored tensors: private mappings of their blobs, trusted while no page was written ----------
#
# storage address -> (its mapping's start, length, a pin keeping the address from being reused by
# another storage while the entry lives). Recorded by ``pickling`` when it rebuilds a storage.
_mapped: dict[int, tuple[int, int, _Pin]] = {}
_mapped_lock = threading.Lock()


def mapped(storage: Any) -> None:
    """Record ``storage`` as a private mapping of a blob (its pages are the blob's until written)."""
    ptr = _address(storage)
    with _mapped_lock:
        if len(_mapped) > 4096:  # storages freed since: their pins let go of the addresses
            for k in [k for k, (_, _, p) in _mapped.items() if p.expired()]:
                del _mapped[k]
        _mapped[storage._cdata] = (ptr, storage.nbytes(), _Pin(storage))


def _mapping_of(storage: Any) -> tuple[int, int] | None:
    """(start, length) of the blob mapping ``storage`` still is, or None."""
    got = _mapped.get(storage._cdata)
    if got is None:
        return None
    ptr, n, p = got
    if p.expired() or storage.nbytes() != n or _address(storage) != ptr:
        return None  # another storage at that address, or this one given other memory (``share_memory_``)
    return ptr, n


def _address(storage: Any) -> int:
    # the const pointer: reading it must not count as a write anywhere
    return torch.empty(0, dtype=torch.uint8).set_(storage).const_data_ptr()  # type: ignore[attr-defined]  # torch's stubs lag its API


LEAF = Leaf(tensor_digest, _stamp, _track_loaded, pin=_pin, track=_track)


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
