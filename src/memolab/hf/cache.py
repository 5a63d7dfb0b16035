"""HF's cache never outranks memolab's: inside a memoized computation, HF's cache
files are named with memolab's code digest.

HF names the result of ``.map`` (and of every fingerprinted transform) by a
fingerprint of the input and of the function as ``dill`` pickles it. A helper
the function calls is pickled by reference, so editing it leaves the name
unchanged: memolab misses (the helper is part of its code digest) and
recomputes, but ``.map`` then returns the rows HF cached for the *old* code,
and memolab would store them under the new code.

So, while a memoized function computes (``memolab.calls.call.running()``), every
new fingerprint HF makes is mixed with the memoized function's symbol and code
digest: an edit anywhere in the code memolab sees gives ``.map`` another cache
file, which it computes with the current code; reverting the edit finds the
file that code wrote. Outside memoized computations HF is untouched. We chose
this over disabling HF's cache during computations: a computation that fails
halfway and is rerun still reuses the ``.map`` results it finished, and a
dataset's cache files stay where HF puts them. Not covered: a user's own
``new_fingerprint=`` or ``cache_file_name=`` (HF then uses the name given).

Also while a memoized function computes: the local data files HF resolves (``load_dataset``'s
``data_files``) are noted as the body's reads (``memolab.inputs.reads``): HF reuses its cache of a
local file by the file's mtime without opening it, so the body would otherwise record HF's
cache, not the CSV; and HF's cache folders are left out of the record (what HF derives from
those files, and its locks).

Installed when ``datasets`` is first hashed or pickled, and before any memoized
function computes once ``datasets`` is imported (``memolab.settings.hooks``, the
``computing`` table).
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import xxhash

from ..calls.call import running
from ..inputs import reads

_MARK = "__memolab_code_fingerprint__"


def _mixed(original: Callable[..., str]) -> Callable[..., str]:
    def update_fingerprint(fingerprint: Any, transform: Any, transform_args: Any) -> str:
        fp = original(fingerprint, transform, transform_args)
        ev = running()
        if ev is None:
            return fp
        fn, code = ev.key[0], ev.key[1]
        return xxhash.xxh3_64_hexdigest(f"{fp}\0{fn}\0{code}".encode())

    setattr(update_fingerprint, _MARK, True)
    update_fingerprint.__wrapped__ = original  # type: ignore[attr-defined]
    update_fingerprint.__doc__ = original.__doc__
    return update_fingerprint


def install() -> None:
    """Wrap ``update_fingerprint`` where HF's transforms look it up (idempotent)."""
    fingerprint = sys.modules.get("datasets.fingerprint")
    if fingerprint is None:
        return
    original = fingerprint.update_fingerprint
    if not getattr(original, _MARK, False):
        fingerprint.update_fingerprint = _mixed(original)  # type: ignore[attr-defined]  # datasets' module, patched
    data_files = sys.modules.get("datasets.data_files")
    origin = getattr(data_files, "_get_origin_metadata", None)  # (absent in another HF: nothing noted)
    if data_files is not None and origin is not None and not getattr(origin, _MARK, False):
        data_files._get_origin_metadata = _noting(origin)  # type: ignore[attr-defined]  # datasets' module, patched
        # HF's cache holds what it derives from those files (and its own locks): not an input
        hf_config = sys.modules.get("datasets.config")
        for where in (getattr(hf_config, "HF_DATASETS_CACHE", None), getattr(hf_config, "HF_MODULES_CACHE", None)):
            if where is not None:
                reads.exclude(where)
    # modules that imported it by name (``from .fingerprint import update_fingerprint``)
    for name in ("datasets.arrow_dataset",):
        mod = sys.modules.get(name)
        if mod is not None and not getattr(getattr(mod, "update_fingerprint", None), _MARK, False):
            mod.update_fingerprint = fingerprint.update_fingerprint  # type: ignore[attr-defined]  # datasets' module, patched


def _noting(original: Callable[..., Any]) -> Callable[..., Any]:
    def _get_origin_metadata(data_files: Any, *args: Any, **kwargs: Any) -> Any:
        # HF keys its cache of a local data file by the file's mtime, and on a warm cache never
        # opens it: a memoized body would record only HF's cache files, and a hit would miss the
        # data file's next version (``memolab.inputs.reads``). So the local data files it resolves are
        # noted as the body's inputs.
        for f in data_files if isinstance(data_files, (list, tuple)) else ():
            if isinstance(f, str) and ("://" not in f or f.startswith("file://")):
                reads.note(f[len("file://"):] if f.startswith("file://") else f)
        return original(data_files, *args, **kwargs)

    setattr(_get_origin_metadata, _MARK, True)
    _get_origin_metadata.__wrapped__ = original  # type: ignore[attr-defined]
    return _get_origin_metadata


def installed() -> bool:
    fingerprint = sys.modules.get("datasets.fingerprint")
    return fingerprint is not None and getattr(fingerprint.update_fingerprint, _MARK, False)
