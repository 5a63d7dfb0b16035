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
import threading
from collections import OrderedDict
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from .. import config


class _StorageMemory:
    """Exposes a CPU storage's bytes to numpy by address; holds the storage alive."""

    __slots__ = ("storage", "__array_interface__")

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.storage = storage
        # the const pointer: a lazy clone (a loaded tensor stored again) must not be materialized
        ptr = torch.empty(0, dtype=torch.uint8).set_(storage).const_data_ptr()
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
        storage = storage.cpu()
    data = _storage_bytes(storage)
    return _rebuild_storage, (pickle.PickleBuffer(data) if len(data) else b"", storage.nbytes(), str(device))


def _rebuild_storage(buf: Any, nbytes: int, device: str) -> torch.UntypedStorage:
    if nbytes == 0:
        s = torch.UntypedStorage(0)
    else:
        s = _lazy_copy_of_blob(buf, nbytes)
        if s is None:
            from ..store.blobs import copy_on_write, mapped_blob

            if mapped_blob(buf) is None:
                # in-band or unmapped bytes: copy them into torch-owned memory (resizable,
                # so the identity cache can see a later ``.numpy()`` export)
                s = _owned_copy(buf, nbytes).untyped_storage()
            else:
                # a torch without lazy clones: a private mapping (never trusted by the
                # identity cache: non-resizable), never the read-only one
                s = torch.frombuffer(copy_on_write(buf), dtype=torch.uint8, count=nbytes).untyped_storage()
    if device != "cpu":
        from ..errors import StoreMiss

        try:
            s = s.to(device=torch.device(device))  # type: ignore[call-arg]
        except (RuntimeError, AssertionError) as e:
            raise StoreMiss(f"stored tensor lived on {device}, which this process cannot use: {e}") from None
    return s


# -- loaded storages: lazy (copy-on-write) clones of one in-memory copy per blob ---------------
#
# A storage over a mapping of its blob (``torch.frombuffer``) is non-resizable
# from birth, so a later ``t.numpy()`` write could never be seen and the
# identity cache could not trust a loaded tensor. Instead, the first load of a
# blob in a process copies it once into torch-owned memory (the *master*), and
# every load hands out ``torch._lazy_clone`` of it: zero-copy, and torch itself
# materializes a private copy on the first access that could write (in-place
# ops, ``.numpy()``, DLPack, ``data_ptr()``). ``torch._C._is_cow_tensor`` then
# turns False for good — the sticky proof ``tensors._stamp`` needs. A master is
# kept while a tensor rebuilt on one of its clones lives (so dropping a result
# frees its memory, as with a mapping), and at most ``MEMOLAB_TORCH_SHARED_BYTES``
# of masters (default 4 GiB, least recently used dropped first; memory still
# shared with live clones stays alive through them). A blob above the limit is
# mapped copy-on-write instead, untrusted by the identity cache.

_masters: "OrderedDict[Tuple[str, int], torch.Tensor]" = OrderedDict()
_master_bytes = 0
_masters_lock = threading.Lock()
#: live tensors per master, and which master a just-rebuilt clone storage belongs to
_live: Dict[Tuple[str, int], int] = {}
_clone_of: Dict[int, Tuple[str, int]] = {}


def _drop_master(key: Tuple[str, int]) -> None:
    global _master_bytes
    old = _masters.pop(key, None)
    if old is not None:
        _master_bytes -= old.numel()
    for k in [k for k, v in _clone_of.items() if v == key]:
        del _clone_of[k]


def _track(t: torch.Tensor, storage: torch.UntypedStorage) -> None:
    """Keep the master of ``storage`` while ``t`` lives."""
    key = _clone_of.get(storage._cdata)
    if key is None:
        return
    with _masters_lock:
        _live[key] = _live.get(key, 0) + 1
    weakref.finalize(t, _release, key)


def _release(key: Tuple[str, int]) -> None:
    with _masters_lock:
        n = _live.get(key, 0) - 1
        if n > 0:
            _live[key] = n
        else:
            _live.pop(key, None)
            _drop_master(key)


def _master_limit() -> int:
    return config.env_setting("MEMOLAB_TORCH_SHARED_BYTES")  # validated in one place (docs/settings.md)


def _owned_copy(buf: Any, nbytes: int) -> torch.Tensor:
    """``buf``'s bytes in torch-owned memory: one ``memmove``. Measured in fresh
    processes on the busy development machine: torch's threaded ``copy_`` was
    2-3x slower, and asking for transparent huge pages (``madvise``) 2x slower
    (compaction), though both won in a warm process."""
    import ctypes

    import numpy as np

    t = torch.empty(nbytes, dtype=torch.uint8)
    src = np.frombuffer(buf, dtype=np.uint8, count=nbytes)
    ctypes.memmove(t.data_ptr(), src.ctypes.data, nbytes)
    return t


def _lazy_copy_of_blob(buf: Any, nbytes: int) -> Optional[torch.UntypedStorage]:
    global _master_bytes
    if not (hasattr(torch, "_lazy_clone") and hasattr(torch._C, "_is_cow_tensor")):
        return None
    from ..store.blobs import mapped_blob

    path = mapped_blob(buf)
    if path is None or nbytes > _master_limit():
        return None
    key = (path, nbytes)
    with _masters_lock:
        master = _masters.get(key)
        if master is not None:
            _masters.move_to_end(key)
    if master is None:
        master = _owned_copy(buf, nbytes)  # torch-owned: lazy clones need its allocator
        with _masters_lock:
            if key not in _masters:
                _masters[key] = master
                _master_bytes += nbytes
                while _master_bytes > _master_limit() and len(_masters) > 1:
                    _drop_master(next(iter(_masters)))
            master = _masters.get(key, master)
    clone = torch._lazy_clone(master).untyped_storage()
    with _masters_lock:
        _clone_of[clone._cdata] = key
    return clone


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
    if _clone_of:
        _track(t, storage)
    if requires_grad:
        t.requires_grad_(True)
    return t


def register(register_reducer: Callable[[type, Optional[Callable[[Any, Any], Any]]], None]) -> None:
    register_reducer(torch.Tensor, _reduce_tensor)
    register_reducer(torch.UntypedStorage, _reduce_untyped_storage)
    register_reducer(torch.TypedStorage, _reduce_typed_storage)
