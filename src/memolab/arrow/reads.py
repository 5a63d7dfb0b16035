"""Files Arrow's native readers open, noted as reads of the memoized body (``memolab.inputs.reads``).

``pyarrow`` opens files in C++, past Python's ``open`` and its audit event, so a body calling
``pd.read_parquet("data/t.parquet")`` or ``pyarrow.parquet.read_table(...)`` would record nothing
and a hit would answer the file's next version with the old rows. While a body runs, these
readers' local path arguments (a file, a list of files, or a dataset folder: its files and
listings) are noted before the reader runs. Outside memoized bodies they cost a dict test.

Installed once ``pyarrow.parquet`` is imported, before a memoized function computes (the
``computing`` table of ``memolab.settings.hooks``); ``import memolab`` imports nothing of pyarrow.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ..inputs import reads

__all__ = ["install"]

_MARK = "__memolab_notes_reads__"
#: (module, attribute) of the readers whose first argument names local files
READERS = (("pyarrow.parquet", "read_table"), ("pyarrow.parquet", "read_pandas"), ("pyarrow.feather", "read_table"),
           ("pyarrow.feather", "read_feather"), ("pyarrow.dataset", "dataset"))


def _note_all(source: Any) -> None:
    if isinstance(source, (list, tuple)):
        for s in source:
            _note_all(s)
        return
    if not isinstance(source, (str, os.PathLike)):
        return  # a file object (its open was seen) or a buffer
    path = os.fspath(source)
    if not isinstance(path, str) or ("://" in path and not path.startswith("file://")):
        return  # another filesystem: not a file here
    path = path[len("file://"):] if path.startswith("file://") else path
    if os.path.isdir(path):
        for folder, dirs, names in os.walk(path):  # (the listings are audited: the body's reads)
            dirs.sort()
            for n in sorted(names):
                reads.note(os.path.join(folder, n))
    else:
        reads.note(path)


def _noting(original: Callable[..., Any]) -> Callable[..., Any]:
    def reader(source: Any, *args: Any, **kwargs: Any) -> Any:
        if reads.active():
            _note_all(source)
        return original(source, *args, **kwargs)

    setattr(reader, _MARK, True)
    reader.__wrapped__ = original  # type: ignore[attr-defined]
    reader.__doc__ = getattr(original, "__doc__", None)
    reader.__name__ = getattr(original, "__name__", "reader")
    return reader


def install() -> None:
    """Wrap the readers of ``READERS`` whose modules are imported (idempotent; run again before each
    computation while some are not)."""
    for module, attr in READERS:
        mod = sys.modules.get(module)  # (only what the program imported: nothing is imported here)
        fn = getattr(mod, attr, None)
        if fn is not None and not getattr(fn, _MARK, False):
            setattr(mod, attr, _noting(fn))
