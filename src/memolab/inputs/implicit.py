"""What a body reads besides its arguments: the parts of it a key sees, and the warnings
for the parts it cannot.

* **State a result depends on** (``state_deps`` of a stored row): the entry states
  of the global random generators its body drew from (``globalrng``), and the
  versions of the libraries its body imported inside a function
  (``lazy:<package>`` in the code digest, ``imports_frame``). A row is used only by
  a call made in the same states (``mismatch``); another is routed to the key of
  its own states (``routed``).

* **Switches that change results** (torch's default dtype, deterministic
  algorithms, TF32 and matmul precision, …) join every key as one pseudo-argument
  once their library is imported and only while one differs from its default, so
  keys made with the defaults are the same whether or not the library is imported
  (``register_switches``; torch's: ``memolab.torch.numerics``).
* **Environment variables** named in ``@memo(env=[...])`` join the key by value.
  Any other variable a body reads by name from user code (``os.environ[...]``,
  ``os.getenv``, ``in os.environ``) is noted while it computes and warned about
  once per function and variable: its value is not in the key (``watch_environ``).

The other inputs no key sees (``sys.argv``, the working directory, files read by
path, the clock) are listed in docs/cache-rules.md, "What is not in a key".
"""
from __future__ import annotations

import contextvars
import dis
import os
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import MemolabWarning
from ..settings import hooks

__all__ = ["register_switches", "parts", "environ_frame", "env_read", "ENV_ARG", "current", "mismatch", "routed",
           "pseudo_argument", "is_pseudo_argument", "imports_frame", "imports_used", "package_state"]

#: ``name -> reader``: the non-default switches of a library, as a value to hash, or None
_switches: dict[str, Callable[[], dict[str, Any] | None]] = {}

#: the pseudo-argument an environment variable of ``@memo(env=...)`` joins the key as
ENV_ARG = "<env {}>"


def register_switches(name: str, reader: Callable[[], dict[str, Any] | None]) -> None:
    """Key every call by ``reader()`` (the switches of library ``name`` that differ from
    their defaults) whenever it is not None."""
    _switches[name] = reader


_NONE: list[tuple[str, Any]] = []
#: the libraries whose switches hook has not run yet (``hooks.pending``: shrinks as they run)
_SWITCH_HOOKS = hooks.pending("switches")


def parts(env: Sequence[str]) -> list[tuple[str, Any]]:
    """The pseudo-arguments of a call: non-default switches, then ``env``'s variables."""
    for module in _SWITCH_HOOKS:  # (``run_imported``'s own test, without its call while none is imported)
        if module in sys.modules:
            hooks.run_imported("switches")
            break
    if not _switches and not env:
        return _NONE
    out: list[tuple[str, Any]] = []
    for name, reader in _switches.items():
        got = reader()
        if got is not None:
            out.append((f"<{name} switches>", got))
    for var in env:
        out.append((ENV_ARG.format(var), os.environ.get(var)))
    return out


# -- environment variables read while computing ----------------------------------------


class _Reads:
    """The variables one body read by name from user code."""

    __slots__ = ("names", "where")

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.where: dict[str, str] = {}


_reads: contextvars.ContextVar[tuple[_Reads, ...]] = contextvars.ContextVar("memolab_env_reads", default=())

#: the frames between a user's read of one variable and ``__getitem__``: nothing else
#: (a copy, ``items()``, iteration) counts as reading a variable by name
_READERS = frozenset(("get", "getenv", "__contains__", "getenvb"))


class _WatchedEnviron(os._Environ):
    """``os.environ``'s own class, noting a variable a body reads by name (``__class__``
    is swapped in place: the same object, the same data, every reference to it sees it)."""

    def __getitem__(self, key: Any) -> Any:
        if _reads.get():
            _note(key)
        return super().__getitem__(key)


_OS_MODULES = ("os", "_collections_abc", "collections.abc")
_SUBSCRIPT = dis.opmap["BINARY_SUBSCR"]


def _note(key: Any) -> None:
    f: types.FrameType | None = sys._getframe(2)
    direct = True
    while f is not None and f.f_code.co_name in _READERS and f.f_globals.get("__name__") in _OS_MODULES:
        f, direct = f.f_back, False
    if f is None or not _is_user(f):
        return
    if direct and f.f_code.co_code[f.f_lasti] != _SUBSCRIPT:
        return  # read from C by something the user called (``dict(os.environ)``): no variable by name
    where = f"{os.path.basename(f.f_code.co_filename)} line {f.f_lineno}"
    for r in _reads.get():
        if key not in r.names:
            r.names.add(key)
            r.where[key] = where


def _is_user(frame: Any) -> bool:
    from ..codegraph import origins

    return origins.module_origin(frame.f_globals.get("__name__"), frame.f_code.co_filename)[0] == origins.USER


def _watch() -> None:
    if type(os.environ) is os._Environ:
        try:
            os.environ.__class__ = _WatchedEnviron
        except TypeError:  # another library replaced it already: its reads go unnoticed
            pass


def environ_frame() -> tuple[_Reads, Any]:
    """A body starts: note what it reads (``env_read`` ends it)."""
    _watch()
    r = _Reads()
    return r, _reads.set(_reads.get() + (r,))


def env_read(frame: tuple[_Reads, Any], symbol: str, declared: Sequence[str]) -> None:
    """The body is over: warn once per function and variable it read that is not in its key."""
    r, token = frame
    _reads.reset(token)
    for var in sorted(r.names - set(declared)):
        if (symbol, var) in _warned:
            continue
        _warned.add((symbol, var))

        warnings.warn(f"memolab: {symbol} read the environment variable {var} while computing ({r.where[var]}); "
                      f"its value is not part of the key, so a result computed with another value could be "
                      f"returned. Pass it as an argument, or declare it: @memo(env=[{var!r}])", MemolabWarning,
                      stacklevel=2)


_warned: set[tuple[str, str]] = set()


# -- state a result depends on: generator states, libraries imported in a body ---------------

#: how a pseudo-argument of the key names a state (``explain`` shows it)
_PKG = "pkg:"


def pseudo_argument(name: str) -> str:
    if name.startswith(_PKG):
        return f"<library {name[len(_PKG):]}>"
    return f"<global rng {name}>"


def is_pseudo_argument(name: str) -> bool:
    return name.startswith("<global rng ") or name.startswith("<library ")


def package_state(top: str) -> str:
    """An importable library's version (from its metadata, without importing it), or "absent"."""
    from ..codegraph import origins

    if top not in sys.modules and origins.origin_of_name(top) == origins.PACKAGE and not _installed(top):
        return "absent"
    return origins.distribution_of(top)[1]


def _installed(top: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def current(names: Any) -> dict[str, str]:
    """Each named state as a key sees it now: a generator's (``globalrng.current``) or a library's."""
    from . import globalrng

    out = globalrng.current([n for n in names if not n.startswith(_PKG)])
    for n in names:
        if n.startswith(_PKG):
            out[n] = package_state(n[len(_PKG):])
    return out


def mismatch(deps: dict[str, str]) -> dict[str, str] | None:
    """None if every state in ``deps`` is as recorded; else the current states."""
    now = current(deps)
    return None if now == deps else now


def routed(args_digest: str, states: dict[str, str]) -> str:
    """The argument part of the key of a call made in ``states``."""
    import xxhash

    parts = [args_digest] + [f"{n}={d}" for n, d in sorted(states.items())]
    return xxhash.xxh3_128_hexdigest("\0".join(parts).encode())


def imports_frame() -> Any:
    """A body starts: the import attempts it makes are noted (``hooks.note_imports``)."""
    return hooks.note_imports()


def imports_used(frame: Any, lazy: Any) -> dict[str, str]:
    """The body is over: ``pkg:<top>`` -> version of each library of ``lazy`` (imported inside
    a function of its code) that is imported now, or that the body tried to import and could
    not ("absent": a fallback ran). A library the body never reached counts for nothing."""
    attempted = hooks.end_imports(frame)
    out = {}
    for top in lazy:
        if top in sys.modules or top in attempted:
            out[_PKG + top] = package_state(top)
    return out
