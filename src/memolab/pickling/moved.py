"""Stored results that name memolab's own modules by their place before the layout of
issue 56 (``memolab.files`` is now ``memolab.hashing.files``, ``memolab.memo`` is
``memolab.calls.memo``, …): one map, old dotted module name → new, read when unpickling.

A result pickles memolab's classes and functions by reference: a ``File`` or ``Dir``
inside a returned value, a memoized function among the results (``_memo_by_name``).
Such a pickle written by 0.3.0 or earlier names the old module, which no longer exists:
without this map it would load as a miss ("code that no longer loads") and recompute
once. The fast path is untouched: the store unpickles with ``_pickle`` as before and
comes here only when that failed on a module this map renames.
"""
# relayout: leave this file alone (its map names the old module paths on purpose)
from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from typing import Any

#: the module moves of the layout (``/work/notes/relayout.py``'s ``MOVES``): old -> new
MOVED: dict[str, str] = {
    "memolab.config": "memolab.settings.config",
    "memolab.text": "memolab.settings.text",
    "memolab.progress": "memolab.settings.progress",
    "memolab.hooks": "memolab.settings.hooks",
    "memolab.identity": "memolab.hashing.identity",
    "memolab.files": "memolab.hashing.files",
    "memolab.reducers": "memolab.hashing.reducers",
    "memolab.deadleases": "memolab.store.deadleases",
    "memolab.snapshots": "memolab.team.snapshots",
    "memolab.globalrng": "memolab.inputs.globalrng",
    "memolab.implicit": "memolab.inputs.implicit",
    "memolab.reads": "memolab.inputs.reads",
    "memolab.readcheck": "memolab.inputs.readcheck",
    "memolab.upstream": "memolab.inputs.upstream",
    "memolab.mutations": "memolab.inputs.mutations",
    "memolab.expiry": "memolab.inputs.expiry",
    "memolab.lifecycle": "memolab.calls.lifecycle",
    "memolab.call": "memolab.calls.call",
    "memolab.memo": "memolab.calls.memo",
    "memolab.explain": "memolab.calls.explain",
    "memolab.report": "memolab.calls.report",
    "memolab.summary": "memolab.calls.summary",
    "memolab.acceptance": "memolab.calls.acceptance",
    "memolab.hints": "memolab.calls.hints",
    "memolab.samecode": "memolab.calls.samecode",
    "memolab.arrow": "memolab.arrow.keys",
    "memolab.arrowreads": "memolab.arrow.reads",
    "memolab.numpy_restore": "memolab.numpy.restore",
    "memolab.pagemap": "memolab.torch.pagemap",
    "memolab.display": "memolab.ui.display",
    "memolab.runs": "memolab.ui.runs",
    "memolab.doctor": "memolab.cli.doctor",
    "memolab.selftest": "memolab.cli.selftest",
    "memolab.team.cli": "memolab.cli.team_commands",
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED.get(module, module), name)


def names_moved(e: BaseException) -> bool:
    """Did unpickling fail on a module (or a name in a module) this map renames?"""
    if isinstance(e, ModuleNotFoundError):
        return e.name in MOVED
    # "module 'memolab.arrow' has no attribute 'register_arrow'": a module that became a package
    return isinstance(e, AttributeError) and any(f"module {old!r} " in str(e) for old in MOVED)


def loads(data: bytes, buffers: Sequence[Any] = ()) -> Any:
    """Rebuild ``data`` with the old module names read as the new ones."""
    return _Unpickler(io.BytesIO(data), buffers=buffers).load()
