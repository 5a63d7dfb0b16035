"""Serialising results for the store.

Pickle protocol 5 with out-of-band buffers: large contiguous buffers (numpy
arrays) are handed back separately so the store can keep each in its own
content-addressed blob, deduplicated and loaded memory-mapped without a copy.
"""
from __future__ import annotations

import pickle
from typing import Any, List, Optional, Sequence, Tuple

from .errors import StoreMiss

#: Buffers smaller than this stay inside the pickle: a blob per tiny array costs more than it saves.
OUT_OF_BAND_MIN = 64 * 1024
FORMAT = "p1"


def dumps(obj: Any) -> Tuple[bytes, List[memoryview]]:
    """Serialise ``obj``: (pickle bytes, out-of-band buffers in order)."""
    buffers: List[memoryview] = []

    def callback(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True  # serialise in band
        buffers.append(raw)
        return False

    data = pickle.dumps(obj, protocol=5, buffer_callback=callback)
    return data, buffers


def loads(data: bytes, buffers: Sequence[Any] = ()) -> Any:
    try:
        return pickle.loads(data, buffers=buffers)
    except (AttributeError, ImportError, ModuleNotFoundError) as e:
        # The code the result refers to is gone: that is a miss, not a crash.
        raise StoreMiss(f"stored result refers to code that no longer loads: {e}") from e


def find_unpicklable(obj: Any, path: str = "result", _depth: int = 0, _seen: Optional[set] = None) -> Tuple[str, str]:
    """Locate the innermost part of ``obj`` that pickle refuses: (path, reason)."""
    seen = _seen if _seen is not None else set()
    try:
        pickle.dumps(obj, protocol=5, buffer_callback=lambda b: False)
        return "", ""
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
    if id(obj) in seen or _depth > 50:
        return path, reason
    seen.add(id(obj))
    children: List[Tuple[str, Any]] = []
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    else:
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            children = [(f"{path}.{k}", v) for k, v in state.items()]
    for p, child in children:
        sub_path, sub_reason = find_unpicklable(child, p, _depth + 1, seen)
        if sub_path:
            return sub_path, sub_reason
    return path, reason
