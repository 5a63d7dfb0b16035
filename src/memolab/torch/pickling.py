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
from typing import Any, Callable, Optional

import torch


class _StorageMemory:
    """Exposes a CPU storage's bytes to numpy by address; holds the storage alive."""

    __slots__ = ("storage", "__array_interface__")

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.storage = storage
        self.__array_interface__ = {"data": (storage.data_ptr(), False), "shape": (storage.nbytes(),),
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
        storage = storage.cpu()
    data = _storage_bytes(storage)
    return _rebuild_storage, (pickle.PickleBuffer(data) if len(data) else b"", storage.nbytes(), str(device))


def _rebuild_storage(buf: Any, nbytes: int, device: str) -> torch.UntypedStorage:
    if nbytes == 0:
        s = torch.UntypedStorage(0)
    else:
        from ..store.blobs import copy_on_write

        # torch writes in place freely: never hand it a read-only mapping
        s = torch.frombuffer(copy_on_write(buf), dtype=torch.uint8, count=nbytes).untyped_storage()
    if device != "cpu":
        from ..errors import StoreMiss

        try:
            s = s.to(device=torch.device(device))  # type: ignore[call-arg]
        except (RuntimeError, AssertionError) as e:
            raise StoreMiss(f"stored tensor lived on {device}, which this process cannot use: {e}") from None
    return s


def _reduce_typed_storage(p: Any, storage: Any) -> Any:
    return _rebuild_typed_storage, (storage._untyped_storage, storage.dtype)


def _rebuild_typed_storage(untyped: torch.UntypedStorage, dtype: torch.dtype) -> Any:
    return torch.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


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


def register(register_reducer: Callable[[type, Optional[Callable[[Any, Any], Any]]], None]) -> None:
    register_reducer(torch.Tensor, _reduce_tensor)
    register_reducer(torch.UntypedStorage, _reduce_untyped_storage)
    register_reducer(torch.TypedStorage, _reduce_typed_storage)
