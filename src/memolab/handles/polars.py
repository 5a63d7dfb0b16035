"""A polars ``LazyFrame`` is a query, not data: refused.

Keyed by what pickle saves, its plan, a ``scan_csv``/``scan_parquet`` query was keyed
by the *path* it reads: the file rewritten, a memoized call taking the query hit
and returned the result of the old rows (a wrong result). A plan cannot say
whether what it reads has changed, so any ``LazyFrame`` is refused with what to
pass instead. A polars ``DataFrame`` or ``Series`` holds its data and is keyed by it.
"""
from __future__ import annotations

import sys

from .. import hashing
from . import refuse_live


def register() -> None:
    """The ``polars`` hashing hook (``memolab/settings/hooks.py``)."""
    pl = sys.modules["polars"]
    hashing.register_handler(pl.LazyFrame, refuse_live(
        "a polars LazyFrame", "it is a query whose data (the files it scans) is not in it, so a file rewritten "
        "would not change its key", "its data (lf.collect()), or the files it reads as memolab.File(path) with "
        "the query built inside the memoized function"))
