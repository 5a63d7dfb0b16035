"""pandas objects keyed by their content, not by what they cache as they are used.

A DataFrame, Series or Index is keyed by what pickle would save (the generic rule):
its blocks (numpy arrays, datetime64 included, Arrow-backed strings by content),
axes, names, ``attrs`` and flags. pandas also keeps, in ``_cache``, the values of
its ``cache_readonly`` properties, filled as the object is used and pickled with
some of them (a ``DatetimeArray``'s ``_creso``, filled by ``repr(df)``): a
time-series DataFrame keyed differently once it had been printed, and a result
returned by a memoized function (printed, or looked at by pandas while stored)
differently from the same frame built anew. ``_cache`` only ever holds what is
derived from the rest of the object (pandas clears it wherever it changes the
values it derives from), so it is left out.
"""
from __future__ import annotations

import sys
from typing import Any

from .. import hashing
from ..hashing import Encoder

#: where pandas keeps the values of its ``cache_readonly`` properties (filled as the object is used)
CACHE = frozenset({"_cache"})


#: a library object keyed by its integration's own rule (docs/hashing.md)
LEAD = b"\x1c"


def encode_ndarray_backed(enc: Encoder, arr: Any) -> None:
    """An array pandas backs with one numpy array (datetimes, timedeltas, periods, categoricals, numpy
    strings): its class by code, dtype, values and attributes but ``_cache``. Its pickled state is
    ``(dtype, values, __dict__)``, a tuple the generic rule hashes whole: policies never reach it."""
    if enc.memoize(arr):
        return
    enc.write(LEAD)
    enc.write_str("pandas.NDArrayBacked")
    enc.encode_class(type(arr))
    enc.encode_child(arr.dtype, ".dtype")
    enc.encode_child(arr._ndarray, "._ndarray")
    attrs = getattr(arr, "__dict__", None) or {}
    excluded = hashing.excluded_attributes(type(arr))
    enc.encode_child({k: v for k, v in attrs.items() if k not in excluded}, "")


def register() -> None:
    """The ``pandas`` hashing hook (``memolab/settings/hooks.py``)."""
    base = sys.modules["pandas.core.base"]
    arrays = sys.modules["pandas.core.arrays.base"]
    dtypes = sys.modules["pandas.core.dtypes.base"]
    for t in (base.PandasObject, arrays.ExtensionArray, dtypes.ExtensionDtype):
        hashing.register_policy(t, exclude=CACHE)
    hashing.register_handler(sys.modules["pandas._libs.arrays"].NDArrayBacked, encode_ndarray_backed)
