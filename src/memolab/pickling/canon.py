"""Code by value, written deterministically: the sets inside stored code sorted
(``canon``), and the global names a code object uses (``global_names``)."""
from __future__ import annotations

import types
from typing import Any


class Sorted:
    """A set or frozenset that is part of stored *code* (a constant, a class
    attribute, a global or cell a function uses), written in sorted order: set
    iteration order follows string hashes, which change per process. (Sets in
    result data keep pickle's order; they are data, not code.)"""

    __slots__ = ("items",)

    def __init__(self, items: Any) -> None:
        self.items = items

    def __reduce__(self) -> Any:
        return type(self.items), (sorted(self.items, key=repr),)


def canon(v: Any, p: Any) -> Any:
    if type(v) not in (set, frozenset):
        return v
    # One wrapper per set and payload: pickle memoises the wrapper, so every
    # function or class that uses one set gets one set back, as before.
    w, _ = p.sorted_sets.setdefault(id(v), (Sorted(v), v))
    return w


def global_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.extend(global_names(c))
    return names
