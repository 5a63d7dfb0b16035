"""What counts as code and where it lives (user code, a third-party
distribution, the standard library), the ``CodeVersion`` a digest comes as, and
the small helpers the class analysis and the graph share: unwrapping decorated
functions, reading cells and defaults, short reprs, and the value hasher that
``memolab.hashing`` hands over (codegraph never imports hashing)."""
from __future__ import annotations

import functools
import inspect
import reprlib
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..errors import swallowed
from . import origins
from .origins import STDLIB, USER

#: c3 (memolab 0.2): names by their text in the digest, annotations of nested functions left out;
#: c4: a library decorator's arguments (its wrapper's closure) and a library wrapper between @memo and
#: the code count (codegraph.decorators)
CODE_SCHEMA = "c4"


@dataclass(frozen=True)
class CodeVersion:
    """The code part of a key, with what ``explain`` needs to say what changed."""

    digest: str
    #: symbol -> digest of every piece of code the function depends on (itself
    #: included); ``pkg:<dist>`` / ``python:stdlib`` map to their full version
    deps: dict[str, str] = field(default_factory=dict)
    #: symbol -> source excerpt, for diffs in ``explain``
    sources: dict[str, str] = field(default_factory=dict)
    #: how much of a package version joined ``digest`` (exact|minor|major|ignore)
    sensitivity: str = "minor"
    #: top-level packages the code imports inside a function body: their versions are not in
    #: ``digest``; a computation that imported one records it (``memolab.inputs.implicit``)
    lazy: frozenset[str] = frozenset()


def symbol_of(obj: Any) -> str:
    """``module:qualname`` for a function or class."""
    mod = origins.key_module(getattr(obj, "__module__", None) or "?")
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{mod}:{qual}"


# -- where code lives ----------------------------------------------------------------

MISSING = object()


def symbol_module(ns: dict[str, Any]) -> str:
    """The module part of a symbol: the same ``module:qualname`` form as ``symbol_of``."""
    return origins.key_module(ns.get("__name__") or "?")


def module_ns(name: str | None) -> dict[str, Any]:
    m = sys.modules.get(name or "")
    return getattr(m, "__dict__", None) or {}


def origin_of(obj: Any) -> tuple[str, str, str]:
    if isinstance(obj, types.FunctionType):
        name = obj.__globals__.get("__name__") or obj.__module__
        filename = obj.__code__.co_filename
        if filename.startswith("<"):
            # made by exec (dataclass and namedtuple methods): it belongs where its module does
            filename = obj.__globals__.get("__file__") or module_ns(name).get("__file__") or filename
        return origins.module_origin(name, filename)
    if isinstance(obj, types.ModuleType):
        where = getattr(obj, "__file__", None)
        if where is None:
            # a namespace package (a folder without __init__.py) is placed by its folder
            where = next(iter(getattr(obj, "__path__", None) or ()), None)
        return origins.module_origin(obj.__name__, where)
    mod = getattr(obj, "__module__", None)
    if not isinstance(mod, str):
        return (STDLIB, "python:stdlib", origins.PYTHON_VERSION)
    ns = module_ns(mod)
    if not ns and isinstance(obj, type):
        # ``__module__`` names no loaded module: place the class by its methods' file
        for v in obj.__dict__.values():
            if isinstance(v, types.FunctionType):
                return origins.module_origin(v.__globals__.get("__name__") or mod, v.__code__.co_filename)
    return origins.module_origin(mod, ns.get("__file__"))


def is_user_code(obj: Any) -> bool:
    """Is ``obj`` (a function, class or module) the user's code, hashed by its source?"""
    return origin_of(obj)[0] == USER


#: ``errors.warn_once`` for the code analysis: pointing at the user's call three frames out,
#: forgotten by ``clear_caches``
warn_once = functools.partial(errors.warn_once, stacklevel=4, scope="codegraph")


def defaults_of(f: types.FunctionType, named: bool = False) -> list[tuple[Any, Any]]:
    """(position, or the parameter's name if ``named``, and value) of every default ``f``
    was defined with; keyword-only ones by name. Plain functions keep positions, as
    their labels have always been (a new label would recompute every stored result)."""
    pos = f.__defaults__ or ()
    if named and pos:
        code = f.__code__
        params = code.co_varnames[:code.co_argcount][-len(pos):]
        first: list[tuple[Any, Any]] = list(zip(params, pos, strict=False))
    else:
        first = list(enumerate(pos))
    return first + sorted((f.__kwdefaults__ or {}).items())


def cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


# -- the graph ---------------------------------------------------------------------------

_IMMUTABLE = frozenset((int, float, complex, str, bytes, bool, type(None), range))

_repr = reprlib.Repr()
_repr.maxstring = 120
_repr.maxother = 120


def short(v: Any) -> str:
    try:
        return _repr.repr(v)
    except Exception:  # the user's __repr__
        swallowed("codegraph.where: short")
        return f"<{type(v).__qualname__}>"


def is_immutable(v: Any) -> bool:
    t = type(v)
    if t in _IMMUTABLE:
        return True
    if t is tuple or t is frozenset:
        return all(type(x) in _IMMUTABLE for x in v)
    return False


def unwrap(obj: Any) -> Any:
    """A decorated function (``functools.wraps``, ``@memo``, ``lru_cache``) counts as what it wraps."""
    if isinstance(obj, type) or isinstance(obj, types.ModuleType):
        return obj
    if hasattr(obj, "__wrapped__"):
        try:
            return inspect.unwrap(obj)
        except Exception:  # the user's objects' __wrapped__ (a cycle raises ValueError; a __getattr__ anything)
            swallowed("codegraph.where: unwrap")
            return obj
    return obj


def is_code(obj: Any) -> bool:
    return isinstance(obj, (types.FunctionType, type, types.ModuleType, types.BuiltinFunctionType))


def held_functions(f: types.FunctionType) -> list[Any]:
    """The functions and classes a function holds in its closure cells and defaults: what a
    wrapper made by a decorator without ``functools.wraps`` runs (its ``fn`` cell)."""
    held = [cell_value(c) for c in f.__closure__ or ()] + [v for _, v in defaults_of(f)]
    out: list[Any] = []
    for v in held:
        v = unwrap(v)
        if v is not f and isinstance(v, (types.FunctionType, type)) and not any(v is o for o in out):
            out.append(v)
    return out


def runs(obj: Any, depth: int = 0) -> Any:
    """The user code a memoized callable really runs, for its name (``symbol_of``).

    ``functools.wraps`` leaves ``__wrapped__``; a library decorator that does not
    leaves only a wrapper named like every other wrapper it makes
    (``lib:deco.<locals>.wrapper``), holding the user's function in a closure cell:
    two memoized functions under it would share one name. So a library function counts
    as the one user function it holds (through further library wrappers); a partial as
    its function, a bound method as its function. Anything else — user code, a library
    function holding no user function or several — counts as itself. (A user's own
    closure is not followed: a closure that *calls* a function it holds is no wrapper
    of it, and its code digest already covers what it holds.)"""
    f = unwrap(obj)
    while isinstance(f, functools.partial):
        f = unwrap(f.func)
    if isinstance(f, types.MethodType):
        f = unwrap(f.__func__)
    if not isinstance(f, types.FunctionType) or depth > 4 or is_user_code(f):
        return f
    found = [g for g in (runs(h, depth + 1) for h in held_functions(f))
             if isinstance(g, (types.FunctionType, type)) and is_user_code(g)]
    return found[0] if len(found) == 1 else f
