"""Code digests: what a memoized function's key knows about its code.

The digest of a function is the digest of its *binding graph*: every piece of
user code it can reach by name, statically and transitively, each node hashed
as its normalised AST (comments, docstrings, formatting dropped) plus what each
of its names resolves to; third-party code as distribution name + version; the
standard library as the Python version; module globals and closure cells by
value, re-read on every call. The full rules are in docs/code-dependencies.md.

Cost model: the graph of a function is built once per process (sources parsed
once per file); a repeat call only re-reads the namespace slots the graph went
through and re-hashes the mutable values among them. A slot that now holds a
different function, class or module means the graph itself changed (a notebook
cell redefined a helper, ``importlib.reload``), so it is rebuilt.
"""
from __future__ import annotations

import builtins
import inspect
import linecache
import os
import reprlib
import sys
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

import xxhash

from . import origins
from .origins import PACKAGE, SKIP, STDLIB, USER
from .scopes import Analysis, FileIndex, digest_text, normalized_dump

CODE_SCHEMA = "c2"

__all__ = ["CodeVersion", "function_code", "object_digest", "symbol_of", "normalized_source", "CODE_SCHEMA"]


@dataclass(frozen=True)
class CodeVersion:
    """The code part of a key, with what ``explain`` needs to say what changed."""

    digest: str
    #: symbol -> digest of every piece of code the function depends on (itself
    #: included); ``pkg:<dist>`` / ``python:stdlib`` map to their full version
    deps: Dict[str, str] = field(default_factory=dict)
    #: symbol -> source excerpt, for diffs in ``explain``
    sources: Dict[str, str] = field(default_factory=dict)
    #: how much of a package version joined ``digest`` (exact|minor|major|ignore)
    sensitivity: str = "minor"


def symbol_of(obj: Any) -> str:
    """``module:qualname`` for a function or class."""
    mod = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{mod}:{qual}"


def normalized_source(src: str) -> str:
    """The AST dump of ``src`` without docstrings, positions or comments."""
    import ast
    import textwrap

    return normalized_dump(ast.parse(textwrap.dedent(src)))


# -- where code lives ----------------------------------------------------------------

_MISSING = object()
_files: Dict[str, Tuple[Any, Optional[FileIndex]]] = {}
_warned: set = set()


def _file_index(filename: str, spec: Any) -> Optional[FileIndex]:
    """The parsed file, re-read only when its module was reloaded (its ``__spec__`` changed).

    Reading the file again on every analysis would be wrong as well as slow: a
    file edited on disk while the old module is still loaded must keep the
    digest of the code that actually runs.
    """
    hit = _files.get(filename)
    if hit is not None and hit[0] is spec:
        return hit[1]
    linecache.checkcache(filename)
    lines = linecache.getlines(filename)
    idx: Optional[FileIndex] = None
    if lines:
        try:
            idx = FileIndex("".join(lines))
        except (SyntaxError, ValueError):
            idx = None
    _files[filename] = (spec, idx)
    return idx


def _form(ns: Dict[str, Any]) -> str:
    """A readable, machine-independent file name for a namespace: ``pkg/mod.py``."""
    name = ns.get("__name__") or "?"
    if name in ("__main__", "__mp_main__"):
        spec = ns.get("__spec__")
        if spec is not None and getattr(spec, "name", None):
            name = spec.name
        else:
            f = ns.get("__file__")
            return os.path.basename(f) if f else "__main__"
    f = ns.get("__file__") or ""
    return name.replace(".", "/") + ("/__init__.py" if f.endswith("__init__.py") else ".py")


def _module_ns(name: Optional[str]) -> Dict[str, Any]:
    m = sys.modules.get(name or "")
    return getattr(m, "__dict__", None) or {}


def _origin(obj: Any) -> Tuple[str, str, str]:
    if isinstance(obj, types.FunctionType):
        return origins.module_origin(obj.__globals__.get("__name__") or obj.__module__, obj.__code__.co_filename)
    if isinstance(obj, types.ModuleType):
        return origins.module_origin(obj.__name__, getattr(obj, "__file__", None))
    mod = getattr(obj, "__module__", None)
    if not isinstance(mod, str):
        return (STDLIB, "python:stdlib", origins.PYTHON_VERSION)
    return origins.module_origin(mod, _module_ns(mod).get("__file__"))


def _warn_once(where: Tuple[Any, ...], message: str) -> None:
    if where in _warned:
        return
    _warned.add(where)
    from ..errors import MemolabWarning

    warnings.warn(message, MemolabWarning, stacklevel=5)


# -- analysis of one node ----------------------------------------------------------------

def _code_fallback(code: types.CodeType) -> Analysis:
    """No source (``python -c``, ``exec``): hash the bytecode and treat every name as a reference."""
    parts: List[str] = []
    names: set = set()

    def walk(c: types.CodeType) -> None:
        parts.append(c.co_code.hex())
        parts.append(repr(c.co_names))
        names.update(c.co_names)
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                walk(k)
            else:
                parts.append(repr(k))

    walk(code)
    refs = frozenset((n,) for n in names)
    return Analysis(digest_text("bytecode", origins.PYTHON_VERSION, *parts), "", refs, ())


_fn_analyses: "weakref.WeakKeyDictionary[types.CodeType, Tuple[Analysis, bool]]" = weakref.WeakKeyDictionary()


def _function_analysis(fn: types.FunctionType) -> Tuple[Analysis, bool]:
    """(analysis, from source?) of a function, cached per code object."""
    code = fn.__code__
    hit = _fn_analyses.get(code)
    if hit is not None:
        return hit
    idx = _file_index(code.co_filename, fn.__globals__.get("__spec__"))
    nodes = idx.by_line.get((code.co_name, code.co_firstlineno)) if idx is not None else None
    if nodes:
        res = (idx.analysis(nodes), True)  # type: ignore[union-attr]
    else:
        res = (_code_fallback(code), False)
    _fn_analyses[code] = res
    return res


def _class_functions(cls: type) -> Iterable[types.FunctionType]:
    for v in cls.__dict__.values():
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        elif isinstance(v, property):
            v = v.fget
        v = inspect.unwrap(v) if callable(v) and hasattr(v, "__wrapped__") else v
        if isinstance(v, types.FunctionType):
            yield v


_cls_analyses: "weakref.WeakKeyDictionary[type, Analysis]" = weakref.WeakKeyDictionary()


def _class_analysis(cls: type) -> Analysis:
    hit = _cls_analyses.get(cls)
    if hit is not None:
        return hit
    ns = _module_ns(cls.__module__)
    fns = list(_class_functions(cls))
    files = [f.__code__.co_filename for f in fns if not f.__code__.co_filename.startswith("<string")]
    if ns.get("__file__"):
        files.append(ns["__file__"])
    res: Optional[Analysis] = None
    for filename in dict.fromkeys(files):
        idx = _file_index(filename, ns.get("__spec__"))
        if idx is None:
            continue
        nodes = idx.by_qualname.get(cls.__qualname__)
        if nodes:
            # a name defined twice (a notebook cell run again): the one holding our methods' lines
            lines = {f.__code__.co_firstlineno for f in fns if f.__code__.co_filename == filename}
            best = [n for n in nodes if any(n.lineno <= ln <= (n.end_lineno or n.lineno) for ln in lines)]
            res = idx.analysis([(best or nodes)[-1]])
            break
        if "." not in cls.__qualname__ and cls.__name__ in idx.assigns:
            # namedtuple(...), type(...), make_dataclass(...): the statements that built it
            res = idx.analysis(idx.assigns[cls.__name__])
            break
    if res is None:
        # no source at all: its functions' bytecode and the names they use
        parts = [cls.__qualname__] + [_code_fallback(f.__code__).digest for f in fns]
        parts += sorted(k for k in cls.__dict__ if not k.startswith("__"))
        refs = frozenset().union(*(_code_fallback(f.__code__).refs for f in fns)) if fns else frozenset()
        res = Analysis(digest_text("class-fallback", *parts), "", refs, ())
    _cls_analyses[cls] = res
    return res


def _module_analysis(mod: types.ModuleType) -> Analysis:
    filename = getattr(mod, "__file__", None)
    idx = _file_index(filename, getattr(mod, "__spec__", None)) if filename else None
    if idx is None:
        return Analysis(digest_text("module", mod.__name__), "", frozenset(), ())
    return idx.analysis([idx.tree])


# -- the graph ---------------------------------------------------------------------------

_IMMUTABLE = frozenset((int, float, complex, str, bytes, bool, type(None), range))

_repr = reprlib.Repr()
_repr.maxstring = 120
_repr.maxother = 120


def _short(v: Any) -> str:
    try:
        return _repr.repr(v)
    except Exception:
        return f"<{type(v).__qualname__}>"


def _is_immutable(v: Any) -> bool:
    t = type(v)
    if t in _IMMUTABLE:
        return True
    if t is tuple or t is frozenset:
        return all(type(x) in _IMMUTABLE for x in v)
    return False


def _unwrap(obj: Any) -> Any:
    """A decorated function (``functools.wraps``, ``@memo``, ``lru_cache``) counts as what it wraps."""
    if isinstance(obj, type) or isinstance(obj, types.ModuleType):
        return obj
    if hasattr(obj, "__wrapped__"):
        try:
            return inspect.unwrap(obj)
        except Exception:
            return obj
    return obj


def _is_code(obj: Any) -> bool:
    return isinstance(obj, (types.FunctionType, type, types.ModuleType, types.BuiltinFunctionType))


class _Graph:
    """One build of the binding graph from a set of roots."""

    def __init__(self, sensitivity: str) -> None:
        self.sensitivity = sensitivity
        self.deps: Dict[str, str] = {}
        self.sources: Dict[str, str] = {}
        self.code_slots: List[Tuple[Dict[str, Any], str, Any]] = []
        self.code_checks: List[Tuple[types.FunctionType, types.CodeType]] = []
        #: (symbol, namespace dict or cell, name or None for a cell)
        self.value_slots: List[Tuple[str, Any, Optional[str]]] = []
        self._keys: Dict[int, str] = {}
        self._used: set = set()
        self._queue: List[Any] = []
        self._keep: List[Any] = []

    # keys of user code nodes
    def key_of(self, obj: Any) -> str:
        k = self._keys.get(id(obj))
        if k is not None:
            return k
        if isinstance(obj, types.ModuleType):
            k = f"{_form(obj.__dict__)}:<module>"
        elif isinstance(obj, types.FunctionType):
            k = f"{_form(obj.__globals__)}:{obj.__qualname__}"
        else:
            k = f"{_form(_module_ns(obj.__module__))}:{obj.__qualname__}"
        base, n = k, 2
        while k in self._used:
            # two live objects with one name (functions made in a loop): number them
            k, n = f"{base}#{n}", n + 1
        self._keys[id(obj)] = k
        self._used.add(k)
        self._keep.append(obj)
        self._queue.append(obj)
        return k

    def target(self, obj: Any) -> str:
        """Add code object ``obj`` to the graph; returns the label its referrers bind to."""
        obj = _unwrap(obj)
        kind, sym, version = _origin(obj)
        if kind == USER:
            if isinstance(obj, types.BuiltinFunctionType):
                return f"builtin:{symbol_of(obj)}"
            return self.key_of(obj)
        if kind == SKIP:
            return "memolab"
        self.deps[sym] = version
        return sym

    def value(self, sym: str, where: Any, name: Optional[str]) -> str:
        self.value_slots.append((sym, where, name))
        return sym

    def resolve(self, ref: Tuple[Any, ...], ns: Dict[str, Any]) -> str:
        if ref[0] == "@import":
            return self.resolve_import(ref, ns)
        name = ref[0]
        obj = ns.get(name, _MISSING)
        if obj is _MISSING:
            if name in builtins.__dict__:
                return "builtins"
            # not bound yet (defined later, or by exec): read it at call time anyway
            return self.value(f"{_form(ns)}:{name}", ns, name)
        slots = [(ns, name, obj)]
        cur_ns, cur_name = ns, name
        for attr in ref[1:]:
            if not isinstance(obj, types.ModuleType) or _origin(obj)[0] != USER:
                break
            d = obj.__dict__
            nxt = d.get(attr, _MISSING)
            if nxt is _MISSING:
                # a submodule not imported yet or an attribute set later: watch that slot
                self.code_slots.extend(slots)
                return self.value(f"{_form(d)}:{attr}", d, attr)
            slots.append((d, attr, nxt))
            cur_ns, cur_name, obj = d, attr, nxt
        if _is_code(_unwrap(obj)):
            self.code_slots.extend(slots)
            return self.target(obj)
        self.code_slots.extend(slots[:-1])
        return self.value(f"{_form(cur_ns)}:{cur_name}", cur_ns, cur_name)

    def resolve_import(self, ref: Tuple[Any, ...], ns: Dict[str, Any]) -> str:
        import importlib

        _, level, module, name = ref
        try:
            if level:
                base = importlib.util.resolve_name("." * level + module, ns.get("__package__") or "")
            else:
                base = module
            mod = sys.modules.get(base) or importlib.import_module(base)
        except Exception:
            return f"unresolved-import:{'.' * level}{module}"
        if name is None:
            return self.target(mod)
        obj = getattr(mod, name, _MISSING)
        if obj is _MISSING:
            obj = sys.modules.get(f"{base}.{name}", _MISSING)
        if obj is _MISSING:
            return f"unresolved-import:{base}.{name}"
        if _is_code(_unwrap(obj)):
            return self.target(obj)
        return self.value(f"{_form(mod.__dict__)}:{name}", mod.__dict__, name)

    def build(self, roots: Iterable[Any]) -> None:
        for r in roots:
            self.root(r)
        i = 0
        while i < len(self._queue):
            self.visit(self._queue[i])
            i += 1

    def root(self, r: Any) -> None:
        if isinstance(r, str):
            import importlib

            try:
                obj: Any = sys.modules.get(r) or importlib.import_module(r)
            except ImportError:
                mod, _, attr = r.rpartition(".")
                obj = getattr(importlib.import_module(mod), attr)
            r = obj
        if _is_code(_unwrap(r)):
            self.target(r)
        else:
            raise TypeError(f"memolab deps: cannot depend on {type(r).__qualname__} object {_short(r)}; "
                            "name a function, class or module (or a module name as a string)")

    def visit(self, obj: Any) -> None:
        key = self._keys[id(obj)]
        if isinstance(obj, types.FunctionType):
            a, from_source = _function_analysis(obj)
            ns = obj.__globals__
            self.code_checks.append((obj, obj.__code__))
            where = (obj.__code__.co_filename, obj.__code__.co_firstlineno)
        elif isinstance(obj, type):
            a = _class_analysis(obj)
            ns = _module_ns(obj.__module__)
            where = (obj.__module__, obj.__qualname__)
        else:
            a = _module_analysis(obj)
            ns = obj.__dict__
            where = (getattr(obj, "__file__", None), 0)
        bindings = []
        for ref in sorted(a.refs, key=repr):
            bindings.append(f"{'.'.join(map(str, ref))}={self.resolve(ref, ns)}")
        if isinstance(obj, type):
            # bases count even when the class statement computes them
            for base in obj.__mro__[1:]:
                if base is not object:
                    bindings.append(f"<base>={self.target(base)}")
        if isinstance(obj, types.FunctionType) and obj.__closure__:
            for name, cell in zip(obj.__code__.co_freevars, obj.__closure__):
                bindings.append(f"<closure {name}>={self.value(f'{key}.<closure {name}>', cell, None)}")
        for line, what in a.dynamic:
            file = where[0] if isinstance(where[0], str) else key
            _warn_once((file, where[1], line, what),
                       f"memolab: {what} in `{key}` (line {line} of {os.path.basename(file)}): the code it reaches "
                       "cannot be tracked; declare it with @memo(deps=[...]) so that editing it invalidates results")
        self.deps[key] = digest_text(a.digest, *bindings)
        if a.source:
            self.sources[key] = a.source


class _ActiveGuard(threading.local):
    def __init__(self) -> None:
        self.ids: set = set()


_active = _ActiveGuard()


class _Root:
    """The cached graph of one memoized function (or of one class or function hashed as a value)."""

    __slots__ = ("extra", "sensitivity", "graph", "static", "values", "cv", "__weakref__")

    def __init__(self, objs: List[Any], extra: tuple, sensitivity: str) -> None:
        self.extra = extra
        self.sensitivity = sensitivity
        g = self.graph = _Graph(sensitivity)
        g.build(objs)
        self.static = dict(g.deps)
        #: per value slot: (last object seen, its digest)
        self.values: List[Tuple[Any, str]] = [(_MISSING, "") for _ in g.value_slots]
        self.cv: Optional[CodeVersion] = None

    def current(self) -> Optional[CodeVersion]:
        """This graph's code version now, or None when the graph must be rebuilt."""
        g = self.graph
        for ns, name, obj in g.code_slots:
            if ns.get(name, _MISSING) is not obj:
                return None
        for fn, code in g.code_checks:
            if fn.__code__ is not code:
                return None
        changed = self.cv is None
        values = self.values
        for i, (sym, where, name) in enumerate(g.value_slots):
            if name is None:
                try:
                    v = where.cell_contents
                except ValueError:
                    v = _MISSING
            else:
                v = where.get(name, _MISSING)
            last, d = values[i]
            if v is last and _is_immutable(v):
                continue
            nd = _value_digest(v, sym)
            if nd != d or v is not last:
                values[i] = (v, nd)
                changed = changed or nd != d
        if changed:
            self.cv = self._code_version()
        return self.cv

    def _code_version(self) -> CodeVersion:
        g = self.graph
        deps = dict(self.static)
        sources = dict(g.sources)
        for (sym, where, name), (v, d) in zip(g.value_slots, self.values):
            deps[sym] = d
            if v is not _MISSING and not _is_code(v):
                sources[sym] = f"{sym.rpartition(':')[2]} = {_short(v)}\n"
        h = xxhash.xxh3_128()
        h.update(CODE_SCHEMA.encode())
        for k in sorted(deps):
            v = deps[k]
            if k.startswith("pkg:") or k.startswith("python:"):
                v = origins.truncate(v, self.sensitivity)
            b = f"{k}={v}".encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
        return CodeVersion(h.hexdigest(), deps, sources, self.sensitivity)


def _value_digest(v: Any, sym: str) -> str:
    if v is _MISSING:
        return "unbound"
    from ..errors import HashError
    from ..hashing import hash_value

    try:
        return hash_value(v)
    except HashError as e:
        _warn_once(("unhashable", sym), f"memolab: global `{sym}` cannot be hashed ({e}); it is left out of the "
                                        "code digest, so changing it will not invalidate results. Pass it as an "
                                        "argument, or register a hasher for its type.")
        return f"unhashable:{type(v).__module__}.{type(v).__qualname__}"


_function_roots: "weakref.WeakKeyDictionary[Any, _Root]" = weakref.WeakKeyDictionary()
_object_roots: "weakref.WeakKeyDictionary[Any, _Root]" = weakref.WeakKeyDictionary()


def _sensitivity(override: Optional[str]) -> str:
    if override is not None:
        return override
    from .. import config

    return config.settings().version_sensitivity


def function_code(fn: Any, extra_deps: Iterable[Any] = (), version_sensitivity: Optional[str] = None) -> CodeVersion:
    """The code version of ``fn``: the digest of its binding graph (plus ``extra_deps``).

    Cheap on repeat: the graph is cached per function; only the globals and
    closure cells it reads are re-checked (see the module docstring).
    """
    sens = _sensitivity(version_sensitivity)
    extra = extra_deps if type(extra_deps) is tuple else tuple(extra_deps)
    root = _function_roots.get(fn)
    if root is not None and root.sensitivity == sens and (root.extra is extra or root.extra == extra):
        cv = _current(fn, root)
        if cv is not None:
            return cv
    return _rebuild(_function_roots, fn, [fn, *extra], extra, sens)


def _current(obj: Any, root: _Root) -> Optional[CodeVersion]:
    ids = _active.ids
    i = id(obj)
    ids.add(i)
    try:
        return root.current()
    finally:
        ids.discard(i)


def _rebuild(table: Any, obj: Any, objs: List[Any], extra: tuple, sens: str) -> CodeVersion:
    ids = _active.ids
    i = id(obj)
    ids.add(i)
    try:
        root = _Root(objs, extra, sens)
        try:
            table[obj] = root
        except TypeError:  # not weak-referenceable: rebuilt on every call, still correct
            pass
        cv = root.current()
        assert cv is not None, "a graph cannot be stale right after it was built"
        return cv
    finally:
        ids.discard(i)


def object_digest(obj: Any) -> str:
    """Transitive digest of a function's or class's code (what hashing uses for code values).

    A user class's digest covers its methods, its bases and everything they
    reach; a third-party class's, its distribution's version. Re-entrant calls
    for an object whose digest is being computed (a global holding an instance
    of the very class being hashed) get a digest of its name: the outer digest
    already covers its code.
    """
    if id(obj) in _active.ids:
        return digest_text("cycle", symbol_of(obj))
    sens = _sensitivity(None)
    try:
        root = _object_roots.get(obj)
    except TypeError:
        root = None
    if root is not None and root.sensitivity == sens:
        cv = _current(obj, root)
        if cv is not None:
            return cv.digest
    if not _is_code(_unwrap(obj)):
        return digest_text("object", symbol_of(obj))
    return _rebuild(_object_roots, obj, [obj], (), sens).digest


def clear_caches() -> None:
    """Forget every cached analysis and graph (tests; never needed for correctness)."""
    _files.clear()
    _fn_analyses.clear()
    _cls_analyses.clear()
    _function_roots.clear()
    _object_roots.clear()
    _warned.clear()
    origins.clear()
