"""A library decorator's arguments: what a wrapper function keeps in its closure.

``@torch.autocast("cpu", dtype=torch.bfloat16)``, ``@torch.no_grad()``,
``@torch.compile(mode=...)`` return a *library* function (``functools.wraps``:
the user's code is its ``__wrapped__``) whose closure holds the decorator's
arguments: the autocast instance, the context manager's factory, the compiler's
configuration. They decide what the wrapped code computes (bfloat16 or float16,
with or without a graph), so they count by value, as the decorator's arguments
(docs/code-dependencies.md). Which cells count:

* plain immutable values (a string, a number, a tuple of them): by value;
* an object of a type an integration registered (``register``, through
  ``hooks.LAZY_HOOKS["decorators"]``): by the value its reader returns — only
  the configuration, never what the object caches or records per call
  (``autocast`` writes the state it restores on ``__exit__`` into itself;
  a compiled function's callback keeps its compiled frames);
* a bound method of such an object (``torch.no_grad()``'s ``clone``): its object;
* a ``functools.partial``: its function (as code) and its arguments.

Code in a cell counts as code already (``Graph.target``). Anything else — a
dict or list (a decorator's cache or registry), an object of a type nobody
registered — is left out: hashing a cache would split keys by what ran before.
"""
from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from .where import cell_value, is_code, is_immutable, unwrap

__all__ = ["register", "closure_state"]

#: type -> reader of the part of its instances that is a decorator's configuration; a partial
#: (``functools.partial(torch.autocast, "cpu")`` kept by a wrapper) by its function and arguments
_readers: dict[type, Callable[[Any], Any]] = {functools.partial: lambda p: (p.func, p.args, p.keywords)}


def register(cls: type, reader: Callable[[Any], Any]) -> None:
    """Count an object of ``cls`` held by a library wrapper's closure by ``reader(obj)``."""
    _readers[cls] = reader


def _reader(t: type) -> Callable[[Any], Any] | None:
    from ..settings import hooks

    hooks.run_imported("decorators")
    for klass in t.__mro__:
        r = _readers.get(klass)
        if r is not None:
            return r
    return None


def closure_state(wrapper: types.FunctionType) -> list[tuple[str, Any]]:
    """(cell name, value to hash) of each cell of a library wrapper's closure that is a
    decorator argument (see the module docstring), in the closure's order."""
    out: list[tuple[str, Any]] = []
    for name, cell in zip(wrapper.__code__.co_freevars, wrapper.__closure__ or (), strict=False):
        v = cell_value(cell)
        if isinstance(v, types.MethodType) and not is_code(unwrap(v.__self__)):
            v = v.__self__  # a factory bound to its configuration (``no_grad().clone``)
        if is_code(unwrap(v)):
            continue
        if is_immutable(v):
            out.append((name, v))
            continue
        read = _reader(type(v))
        if read is not None:
            out.append((name, (f"{type(v).__module__}.{type(v).__qualname__}", read(v))))
    return out


def unwrap_objects(obj: Any) -> Any:
    """``unwrap(obj)``, stopping at a library wrapper *function* on the way (``@memo`` over
    ``@torch.autocast(...)``): that function holds decorator arguments the graph must read."""
    from .origins import USER
    from .where import origin_of

    seen = 0
    f = obj
    while hasattr(f, "__wrapped__") and not isinstance(f, (type, types.ModuleType)) and seen < 100:
        seen += 1
        if isinstance(f, types.FunctionType) and f.__closure__ and origin_of(f)[0] != USER:
            return f
        f = f.__wrapped__
    return unwrap(obj)
