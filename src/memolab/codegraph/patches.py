"""User code planted into libraries: a dependency of every memoized function.

``transformers.models.llama.LlamaAttention.forward = my_forward`` (the
flash-attention style patch), ``torch.nn.functional.relu = my_relu``,
``math.sqrt = my_sqrt``: a library counts by its version, but once user code is
planted into it, the library runs that code, and any memoized function whose
computation reaches the library may run it — with no name in the user's own code
leading there.

A plant is made by user code, so that is where memolab looks: the source of every
loaded user module (``__main__`` included) is compiled once (cached by its stat in
the process, and on disk by a digest of its bytes: ``code_cache``) and its code
scanned for *patch sites* — ``X.attr = ...``, ``setattr(X, "attr", ...)`` and
``del X.attr`` whose ``X`` is a library module or class, resolved in the module's
namespace without ``getattr``. Each site is a slot
to watch on every call (``Graph.build``): user code found there now is part of every
code digest, and whatever is assigned there later is seen on the next call. A
``setattr`` with a computed name watches the whole library class or module it targets.
This scales with the user's code, not with the libraries' (torch alone has 110,000
names). Not seen: a plant made by code memolab cannot read (a notebook cell once
executed, ``exec`` of a string), unless the memoized function's own code names the
planted slot (``Graph.library_chain`` watches every library slot a chain reaches).
"""
from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from itertools import compress, filterfalse, repeat
from operator import eq, is_, itemgetter
from typing import Any

from ..settings.files import read_bytes
from . import bytecode, code_cache
from .origins import USER, kinds_of
from .where import origin_of

#: (where, the namespace it sits in: a module's dict or a class's mappingproxy, its name, the value there
#: now, the user's code it is or holds, or None)
Plant = tuple[str, Any, str, Any, Any]
#: a patch site: (chain of names from a module global, attribute or None for a computed one)
Site = tuple[tuple[str, ...], str | None]

MISSING = _MISSING = object()
_sites_cache: dict[str, tuple[tuple[int, int], list[Site]]] = {}
_cache: tuple[int, list[Any], list[Any]] = (-1, [], [])


def user_code(v: Any) -> Any | None:
    """The user function (or class) ``v`` is or holds (through a staticmethod, classmethod,
    property), or None."""
    t = type(v)
    if t is staticmethod or t is classmethod:
        v = v.__func__
    elif t is property:
        v = v.fget
    if type(v) is types.FunctionType:
        return v if origin_of(v)[0] == USER and _in_user_module(v) else None
    if issubclass(type(v), type) and origin_of(v)[0] == USER:
        m = sys.modules.get(v.__module__)
        return v if m is not None and origin_of(m)[0] == USER else None
    return None


def _in_user_module(f: types.FunctionType) -> bool:
    """Is ``f`` defined in a user module that is loaded (not code a library generated from a
    string: namedtuple's ``__new__`` runs in globals named ``namedtuple_Point``)?"""
    name = f.__globals__.get("__name__")
    m = sys.modules.get(name) if isinstance(name, str) else None
    return m is not None and getattr(m, "__dict__", None) is f.__globals__ and origin_of(m)[0] == USER


#: Library slots whose code cannot change what a computation returns, only what the process shows
#: or does on its way out: a warning's display, the hooks of uncaught exceptions and of the
#: interactive display, ``atexit``, and the whole of ``logging`` (handlers, formatters, loggers).
#: User code planted there (``warnings.showwarning = show``, ``sys.excepthook = hook``,
#: ``logging.Formatter.format = fmt``) joins no key: it would join *every* memoized function's,
#: and one that reads a start-time global (a run directory, a timestamp) would make every key
#: differ in every process. A memoized function that names such a slot itself
#: (``Graph.library_chain``) still depends on it. (docs/code-dependencies.md, "Patched libraries")
NEUTRAL_SLOTS: dict[str, frozenset[str] | None] = {
    "warnings": frozenset(("showwarning", "formatwarning", "_showwarnmsg", "_formatwarnmsg")),
    "sys": frozenset(("excepthook", "displayhook", "unraisablehook", "breakpointhook")),
    "threading": frozenset(("excepthook",)),
    "atexit": None,   # every name
    "logging": None,  # every name of the package, its submodules' and its classes'
}


def neutral(target: Any, attr: str | None) -> bool:
    """Is ``target.attr`` (``attr`` None: any name of it) a slot that cannot change a result?"""
    name = target.__name__ if issubclass(type(target), types.ModuleType) else getattr(target, "__module__", "")
    if not isinstance(name, str):
        return False
    top = name.split(".")[0]
    if top not in NEUTRAL_SLOTS:
        return False
    names = NEUTRAL_SLOTS[top]
    if names is None:
        return True
    # the named slots are module attributes: ``warnings.showwarning``, not a class's
    return name == top and attr is not None and attr in names


#: a watched site: (where, the namespace it sits in, its name or None for every name, the target)
_Site = tuple[str, Any, str | None, Any]


def planted() -> tuple[list[Plant], list[Any]]:
    """(the slots of library namespaces user code patches, with what they hold now; the library
    classes and modules it patches by computed names).

    Which slots are watched is cached until more modules load; what they hold is read on every
    call: a value cached with them went stale when the slot was written after the cache was
    made (a patch restored, ``torch.nn.Linear.forward = orig``), and a graph built from that
    stale value was out of date the moment it was built."""
    global _cache
    n = len(sys.modules)
    if _cache[0] != n:
        _cache = (n, *_watched_sites())
    plants: list[Plant] = []
    for where, owner, a, _target in _cache[1]:
        names = [a] if a is not None else list(owner)
        for name in names:
            v = owner.get(name, _MISSING)
            f = user_code(v) if v is not _MISSING else None
            if a is None and f is None:
                continue  # a whole library class or module: only what user code put there
            plants.append((f"{where}.{name}", owner, name, v, f))
    seen: set[tuple[int, str]] = set()
    out = []
    for p in sorted(plants, key=lambda p: p[0]):
        k = (id(p[1]), p[2])
        if k not in seen:
            seen.add(k)
            out.append(p)
    return out, _cache[2]


def _watched_sites() -> tuple[list[_Site], list[Any]]:
    sites: dict[tuple[int, str | None], _Site] = {}
    wholes: dict[int, Any] = {}
    # A copy, not list(items()): building the item tuples can run a collection, whose finalizers
    # (or the thread they let in) may import a module mid-walk ("dictionary changed size").
    mods = sys.modules.copy()
    # Names first, each top-level name's in C: a module is read (its namespace, its ``__file__``)
    # only where its top-level package is new here (then that package's own module, or its first
    # module with a file) or is the user's. A fresh process's first call read every one of them,
    # cold memory each: 2-3 ms of a torch program's (1,200 modules), for the ~20 the user wrote.
    names = list(mods)
    try:
        tops = list(map(_first, map(str.partition, names, repeat("."))))
    except TypeError:  # a name that is no string: nothing imports by it
        names = [n for n in names if isinstance(n, str)]
        tops = list(map(_first, map(str.partition, names, repeat("."))))
    unique = dict.fromkeys(tops)  # (each top-level name once, in sys.modules' order)
    new = list(filterfalse(_kinds.__contains__, unique))
    objs = list(map(mods.get, new))
    plain = list(map(is_, map(type, objs), repeat(types.ModuleType)))
    # A plain module's ``__file__`` is its namespace's (ModuleType has no descriptor of that name), read
    # in C; or, with none there, its PEP 562 ``__getattr__``'s. A package placed by its own module's file.
    spaces = list(map(getattr, compress(objs, plain), repeat("__dict__")))
    paths = list(map(dict.get, spaces, repeat("__file__")))
    todo: dict[str, str | None] = dict(compress(zip(compress(new, plain), paths, strict=True), paths))
    if len(todo) < len(new):  # the others: builtins, namespace packages, lazy modules, module subclasses
        spaces_of = dict(zip(compress(new, plain), spaces, strict=True))
        for top in list(filterfalse(todo.__contains__, new)):
            ns = spaces_of.get(top)
            if ns is not None and "__getattr__" not in ns and "__path__" not in ns and top not in _MAINS:
                continue  # a builtin: never placed (``_place``)
            _place(top, mods.get(top), ns, todo, (mods, names, tops))
    if todo:  # the kinds of the new top-level packages, in one batch (a folder many lie in: one listing)
        _kinds.update(zip(todo, kinds_of(list(todo.items())), strict=True))
    for top in list(compress(unique, map(eq, map(_kinds.get, unique), repeat(USER)))):
        for name in _named(top, names, tops):
            found = _file(mods[name])
            if found is None:
                continue
            ns, path = found
            for chain, attr in _sites(path):
                target = _resolve(chain, ns)
                if target is None or neutral(target, attr):
                    continue
                where = target.__name__ if issubclass(type(target), types.ModuleType) \
                    else f"{target.__module__}.{target.__qualname__}"
                if attr is None:
                    wholes.setdefault(id(target), target)
                sites.setdefault((id(target.__dict__), attr), (where, target.__dict__, attr, target))
    return sorted(sites.values(), key=lambda s: (s[0], s[2] or "")), list(wholes.values())


_first = itemgetter(0)
_MAINS = ("__main__", "__mp_main__")


def _named(top: str, names: list[str], tops: list[str]) -> Iterator[str]:
    """The names of ``names`` whose top-level name (``tops``, alike) is ``top``, in order: found with
    ``list.count`` and ``list.index`` (a comparison in C a name), not a test in Python a name."""
    i = -1
    for _ in range(tops.count(top)):
        i = tops.index(top, i + 1)
        yield names[i]


def _place(top: str, m: Any, ns: dict[str, Any] | None, todo: dict[str, str | None],
           walk: tuple[dict[str, Any], list[str], list[str]]) -> None:
    """Put the file that places top-level name ``top`` in ``todo``, for a package whose own module
    ``m`` (``ns``: a plain module's namespace) has no ``__file__`` there, or is no plain module, or is
    gone, as the walk module by module placed it: by ``_top_file`` of its first module with a file,
    if any (a package with none is left unplaced: its modules have nothing to watch)."""
    if ns is not None:  # a plain module
        path = getattr(m, "__file__", None) if "__getattr__" in ns else None
        if path:
            todo[top] = path
            return
        if "__path__" not in ns and top not in _MAINS:
            # A builtin: ``_top_file`` of any module of it reads this one's file (none) and path (none),
            # and a package placed by no file is never the user's (``origins.kind_of``); not placed.
            return
    elif m is not None:
        found = _file(m)
        if found is not None:
            todo[top] = found[1]
            return
    mods, names, tops = walk  # (sys.modules' copy, its names, their top-level names)
    for name in _named(top, names, tops):  # (``google`` by ``google.protobuf``)
        if name != top and _file(mods[name]) is not None:
            todo[top] = _top_file(name, mods[name])[1]
            return


def _file(m: Any) -> tuple[dict[str, Any], str] | None:
    """(a module's namespace, its file), or None for what is no module with a file (a builtin)."""
    t = type(m)
    if t is types.ModuleType:
        ns = m.__dict__
        # (a plain module's ``__file__`` is its namespace's, or its PEP 562 ``__getattr__``'s: read from
        # the namespace, a module without one, a builtin, raises and formats no AttributeError)
        path = ns.get("__file__", _MISSING)
        if path is _MISSING:
            path = getattr(m, "__file__", None) if "__getattr__" in ns else None
    elif issubclass(t, types.ModuleType):
        ns = getattr(m, "__dict__", None)
        if type(ns) is not dict:
            return None
        path = getattr(m, "__file__", None)
    else:
        return None
    return (ns, path) if path else None


_kinds: dict[str, str] = {}


def _top_file(modname: str, m: Any) -> tuple[str, str | None]:
    """(a module's top-level package, the file that places it: its ``__file__``, or a namespace
    package's first folder); ``torch.ops`` has a ``__file__`` of ``_ops.py``, relative to nothing."""
    top = modname.partition(".")[0]
    root = sys.modules.get(top) if top in ("__main__", "__mp_main__") or top != modname else m
    root = root if root is not None else m
    return top, getattr(root, "__file__", None) or next(iter(getattr(root, "__path__", None) or ()), None)


def _resolve(chain: tuple[str, ...], ns: dict[str, Any]) -> Any:
    """The library module or class ``chain`` names in ``ns`` (through ``__dict__``s only), or None."""
    obj = ns.get(chain[0], _MISSING)
    for attr in chain[1:]:
        d = getattr(obj, "__dict__", None) if issubclass(type(obj), (types.ModuleType, type)) else None
        if d is None:
            return None
        obj = d.get(attr, _MISSING)
    if obj is _MISSING or not issubclass(type(obj), (types.ModuleType, type)):
        return None
    kind = origin_of(obj)[0]
    return obj if kind != USER and not getattr(obj, "__name__", "").startswith("memolab") else None


def _sites(path: str) -> list[Site]:
    """The patch sites in the source file ``path``: cached in this process by its stat, across
    processes by a digest of its bytes (``code_cache``: a hit compiles nothing, and allocates
    only the sites)."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _sites_cache.get(path)
    if hit is None or hit[0] != stamp:  # one entry a file: an edited file replaces its own
        hit = _sites_cache[path] = (stamp, _scan(path))
    return hit[1]


def _scan(path: str) -> list[Site]:
    try:
        source = read_bytes(path)
    except OSError:
        return []
    digest = code_cache.source_digest(source)
    found = code_cache.get_sites(path, digest)
    if found is not None:
        return found
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        code = None
    found = sorted(bytecode.patch_sites(code)) if code is not None else []
    # the sites of exactly the bytes digested: a file rewritten meanwhile keys its own
    code_cache.put_sites(path, digest, found)
    return found
