"""Where code lives: library code (pickled by name) or user code (by checked
reference or by value), how a symbol is looked up in the running program, and
the *anchor* a by-value definition is checked against."""
from __future__ import annotations

import functools
import importlib
import os
import sys
import sysconfig
import types
from typing import Any

from ..codegraph.origins import key_module
from ..errors import swallowed


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    # The interpreter's own library folders only, not sys.prefix as a whole:
    # with a system Python (prefix /usr) user code under /usr/src/app would
    # otherwise pass for library code and lose its change checks.
    import site

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except AttributeError:  # some embedded interpreters lack them
        pass
    return tuple(sorted(os.path.realpath(r).rstrip(os.sep) + os.sep for r in roots if r))


@functools.cache
def is_library_module(modname: str) -> bool:
    """Library code is pickled by name; user code by checked reference."""
    top = modname.partition(".")[0]
    if top in ("memolab", "builtins") or top in sys.builtin_module_names:
        return True
    if modname == "__main__":
        return False
    f = getattr(sys.modules.get(modname), "__file__", None)
    if not f:
        return top in getattr(sys, "stdlib_module_names", ())
    # By where the file lies, not by name: a project's own profile.py or
    # secrets.py shadows the stdlib module of that name and is user code.
    return os.path.realpath(f).startswith(_library_roots())


def walk_qualname(root: Any, qualname: str) -> Any:
    obj = root
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def lookup_symbol(modname: str, qualname: str, *, import_: bool) -> tuple[bool, Any]:
    """(True, obj) if ``modname:qualname`` resolves, else (False, None)."""
    mod = sys.modules.get(modname)
    if mod is None and import_:
        try:
            mod = importlib.import_module(modname)
        except Exception:  # importing runs the module's own code
            swallowed("pickling.locate: lookup_symbol")
            return False, None
    if mod is None:
        return False, None
    try:
        return True, walk_qualname(mod, qualname)
    except AttributeError:
        return False, None


def code_digest(obj: Any) -> str:
    from ..codegraph import object_digest

    return object_digest(obj)


def name_of(obj: Any) -> tuple[str, str]:
    # A spawned child's copy of the script (``__mp_main__``) is the script: stored
    # like ``__main__`` code, so a program that never imports multiprocessing loads it.
    mod = key_module(getattr(obj, "__module__", None) or "__main__")
    return mod, getattr(obj, "__qualname__", None) or obj.__name__


def anchor_of(obj: Any) -> str | None:
    """The qualname, inside ``obj``'s module, of what a change check resolves:
    ``obj`` itself when reachable by name, else the outermost enclosing named
    function or class, else a module global bound to ``obj``."""
    modname, qual = name_of(obj)
    mod = sys.modules.get(modname)
    if mod is None:
        return None
    ok, found = lookup_symbol(modname, qual, import_=False)
    if ok and found is obj:
        return qual
    parts = qual.split(".")
    for i, p in enumerate(parts):
        if p.startswith("<"):
            if i:
                ok, enclosing = lookup_symbol(modname, ".".join(parts[:i]), import_=False)
                if ok and isinstance(enclosing, (type, types.FunctionType)):
                    return ".".join(parts[:i])
            break
    for name, value in vars(mod).copy().items():  # an import elsewhere may add a submodule mid-walk
        if value is obj:
            return name
    return None
