"""Storing torch tensors: storages out of band, views kept as views.

torch's own pickling embeds a legacy ``torch.save`` blob per storage (keyed by
a memory address, so the bytes differ per process) and plain pickle loses view
aliasing. Here a tensor reduces to (storage, offset, size, stride, dtype), and
the *storage* reduces to one raw out-of-band buffer. Pickle memoises the
storage object, so ``(base, base[1:3])`` comes back sharing one storage, just
as ``torch.save`` keeps it, and the buffer is mapped from its blob without a
copy. No tensor data goes through pickle.

Only plain strided tensors take this path; sparse, quantized, nested and meta
tensors and tensor subclasses keep torch's own reduction (whose storages still
come through the storage reducer below).
"""
from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import torch

from ..errors import StoreMiss
from . import tensors


class _StorageMemory:
    """Exposes a CPU storage's bytes to numpy by address; holds the storage alive."""

    __slots__ = ("storage", "__array_interface__")

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.storage = storage
        # the const pointer: a lazy clone (a loaded tensor stored again) must not be materialized
        ptr = torch.empty(0, dtype=torch.uint8).set_(storage).const_data_ptr()  # type: ignore[attr-defined]  # torch's stubs lag its API
        self.__array_interface__ = {"data": (ptr, False), "shape": (storage.nbytes(),),
                                    "typestr": "|u1", "version": 3}


def _storage_bytes(storage: torch.UntypedStorage) -> Any:
    """A zero-copy, byte-addressed view of a CPU storage.

    Not through ``.numpy()``: that marks the storage non-resizable for good,
    and the identity cache reads exactly that flag as "memory shared with
    numpy, never trust its digest" — a tensor returned by a memoized call would
    then be rehashed on every later call in the process that computed it. The
    array is only read (pickled out of band) while the store writes it.
    """
    if storage.nbytes() == 0:
        return b""
    import numpy as np

    return np.asarray(_StorageMemory(storage))


def _reduce_untyped_storage(p: Any, storage: torch.UntypedStorage) -> Any:
    device = storage.device
    if device.type == "meta":
        return NotImplemented
    if device.type != "cpu":
        storage = storage.cpu()  # type: ignore[no-untyped-call]  # torch's stubs lag its API
    data = _storage_bytes(storage)
    return _rebuild_storage, (pickle.PickleBuffer(data) if len(data) else b"", storage.nbytes(), str(device))


def _rebuild_storage(buf: Any, nbytes: int, device: str) -> torch.UntypedStorage:
    if nbytes == 0:
        s = torch.UntypedStorage(0)  # type: ignore[no-untyped-call]  # torch's stubs lag its API
    else:
        from ..store.blobs import copy_on_write, mapped_blob

        if mapped_blob(buf) is not None and device == "cpu":
            # A blob: a private (copy-on-write) mapping of its file, loaded at the speed of the
            # disk, never copied up front; each load its own pages (a write to one hit never
            # reaches the blob nor another hit). Trusted by the identity cache while the page
            # table says no page of it was written (``tensors._stamp``, ``pagemap``).
            view = copy_on_write(buf)
            s = torch.frombuffer(view, dtype=torch.uint8, count=nbytes).untyped_storage()
            tensors.mapped(s)
        elif device != "cpu":
            s = _to_device(buf, nbytes, device)
            return s
        else:
            # in-band (an inline result) or unmapped bytes: copied into torch-owned memory, which
            # the identity cache makes copy-on-write when the result is loaded (``tensors._track``)
            s = _owned_copy(buf, nbytes).untyped_storage()
    return s


def _to_device(buf: Any, nbytes: int, device: str) -> torch.UntypedStorage:
    """A storage that lived on ``device`` (a GPU), restored there: the blob's bytes read into
    pinned host memory, then copied to the device in one transfer."""
    try:
        dev = torch.device(device)
        pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=dev.type == "cuda")
        _copy_into(pinned, buf, nbytes)
        out = pinned.to(dev, non_blocking=True)
        if dev.type == "cuda":
            torch.cuda.current_stream(dev).synchronize()
        return out.untyped_storage()
    except (RuntimeError, AssertionError) as e:
        raise StoreMiss(f"stored tensor lived on {device}, which this process cannot use: {e}") from None


def _copy_into(t: torch.Tensor, buf: Any, nbytes: int) -> None:
    import ctypes

    import numpy as np

    src = np.frombuffer(buf, dtype=np.uint8, count=nbytes)
    ctypes.memmove(t.data_ptr(), src.ctypes.data, nbytes)


def _owned_copy(buf: Any, nbytes: int) -> torch.Tensor:
    """``buf``'s bytes in torch-owned memory: one ``memmove``."""
    t = torch.empty(nbytes, dtype=torch.uint8)
    _copy_into(t, buf, nbytes)
    return t


def _reduce_typed_storage(p: Any, storage: Any) -> Any:
    return _rebuild_typed_storage, (storage._untyped_storage, storage.dtype)


def _rebuild_typed_storage(untyped: torch.UntypedStorage, dtype: torch.dtype) -> Any:
    return torch.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)  # type: ignore[no-untyped-call]  # torch's stubs lag its API


def _reduce_tensor(p: Any, t: torch.Tensor) -> Any:
    if (t.layout is not torch.strided or t.is_quantized or t.is_nested or t.device.type == "meta"
            or t.is_neg() or t.__dict__):
        return NotImplemented
    if t.is_conj():
        # A conjugate view shares its storage with the unconjugated tensor.
        return torch.conj, (t.conj(),)
    # grad_fn history is not a result: store the data and whether it wants grad.
    return _rebuild_tensor, (t.untyped_storage(), t.storage_offset(), tuple(t.size()), t.stride(), t.dtype,
                             t.requires_grad)


def _rebuild_tensor(storage: torch.UntypedStorage, offset: int, size: tuple, stride: tuple, dtype: torch.dtype,
                    requires_grad: bool) -> torch.Tensor:
    t = torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, size, stride)
    if requires_grad:
        t.requires_grad_(True)
    return t


def register(register_reducer: Callable[[type, Callable[[Any, Any], Any] | None], None]) -> None:
    register_reducer(torch.Tensor, _reduce_tensor)
    register_reducer(torch.UntypedStorage, _reduce_untyped_storage)
    register_reducer(torch.TypedStorage, _reduce_typed_storage)
