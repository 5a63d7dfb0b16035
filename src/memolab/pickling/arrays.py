"""numpy arrays out of band: registered (``register``) the first time an array is
pickled (the lazy hooks in ``memolab.settings.hooks``). Each underlying memory block
goes out as one raw buffer, so views keep sharing their root after a load. The
functions that rebuild arrays stay in ``memolab.pickling``, under the names
stored pickles refer to."""
from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from ..hashing.reducers import Reducer
from . import np_from_buffer, np_view


def register(register_reducer: Callable[[type, Reducer | None], None]) -> None:
    import numpy as np

    register_reducer(np.ndarray, _reduce_ndarray)
    register_reducer(np.memmap, _reduce_ndarray)  # comes back as a plain array mapped from its blob


def _reduce_ndarray(p: Any, arr: Any) -> Any:
    import numpy as np

    if arr.dtype.hasobject or type(arr) not in (np.ndarray, np.memmap):
        return NotImplemented
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is arr or root.dtype.hasobject or not (root.flags.c_contiguous or root.flags.f_contiguous):
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            arr = np.ascontiguousarray(arr)  # a strided array with no ndarray owner: copy it once
        order = "C" if arr.flags.c_contiguous else "F"
        return np_from_buffer, (pickle.PickleBuffer(_np_bytes(arr, order)), arr.dtype, arr.shape, order)
    # A view: reference its root (memoised by pickle, so every view of one root
    # shares one buffer) plus where it sits inside it.
    offset = arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return np_view, (root, arr.dtype, arr.shape, arr.strides, offset)


def _np_bytes(arr: Any, order: str) -> Any:
    """The contiguous ``arr``'s memory as flat bytes, without a copy. The buffer
    protocol refuses some dtypes (datetime64, timedelta64, structs holding
    them), so the buffer is taken from a uint8 view, never from ``arr`` itself."""
    import numpy as np

    if arr.size == 0 or arr.dtype.itemsize == 0:
        return np.empty(0, dtype=np.uint8)
    return arr.reshape(-1, order=order).view(np.uint8)
