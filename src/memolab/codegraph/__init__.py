"""Code digests: what a memoized function's key knows about its code.

The digest of a function is the digest of its *binding graph*: every piece of
user code it can reach by name, statically and transitively, each node hashed
as its normalised code (compiled from the AST: comments, docstrings, layout
and positions dropped) plus what each of its names resolves to; third-party
code as distribution name + version; the standard library as the Python
version; module globals and closure cells by value, re-read on every call. The
full rules are in docs/code-dependencies.md.

Cost model: the graph of a function is built once per process (each code object
analysed once, no source parsed); a repeat call gathers the version tags of all
namespaces and class dicts the graph went through in one C-level pass and
compares them to the stamp of its last full check (``_Root.views``); only when
that moved, or some value read is mutable, does it check the namespaces (else
one C-level compare of all their slots) and classes one by one and re-hash
the mutable values among them. A slot that now holds a different function, class or module means the
graph itself changed (a notebook cell redefined a helper, ``importlib.reload``),
so it is rebuilt, reusing every analysis that still applies.
"""
from __future__ import annotations

import builtins
import gc
import functools
import inspect
import linecache
import operator
import os
import reprlib
import sys
import textwrap
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

import xxhash

from . import bytecode, dictversion, origins
from .origins import SKIP, STDLIB, USER
from .bytecode import digest_text

CODE_SCHEMA = "c2"

key_module = origins.key_module

__all__ = ["CodeVersion", "function_code", "object_digest", "symbol_of", "key_module", "normalized_source", "CODE_SCHEMA"]


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
    mod = origins.key_module(getattr(obj, "__module__", None) or "?")
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{mod}:{qual}"


def normalized_source(src: str) -> str:
    """The AST dump of ``src`` without docstrings, positions or comments (what a digest ignores)."""
    import ast

    tree = ast.parse(textwrap.dedent(src))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


# -- where code lives ----------------------------------------------------------------

_MISSING = object()
_warned: set = set()


def _mod(ns: Dict[str, Any]) -> str:
    """The module part of a symbol: the same ``module:qualname`` form as ``symbol_of``."""
    return origins.key_module(ns.get("__name__") or "?")


def _module_ns(name: Optional[str]) -> Dict[str, Any]:
    m = sys.modules.get(name or "")
    return getattr(m, "__dict__", None) or {}


def _origin(obj: Any) -> Tuple[str, str, str]:
    if isinstance(obj, types.FunctionType):
        name = obj.__globals__.get("__name__") or obj.__module__
        filename = obj.__code__.co_filename
        if filename.startswith("<"):
            # made by exec (dataclass and namedtuple methods): it belongs where its module does
            filename = obj.__globals__.get("__file__") or _module_ns(name).get("__file__") or filename
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
    ns = _module_ns(mod)
    if not ns and isinstance(obj, type):
        # ``__module__`` names no loaded module: place the class by its methods' file
        for v in obj.__dict__.values():
            if isinstance(v, types.FunctionType):
                return origins.module_origin(v.__globals__.get("__name__") or mod, v.__code__.co_filename)
    return origins.module_origin(mod, ns.get("__file__"))


def is_user_code(obj: Any) -> bool:
    """Is ``obj`` (a function, class or module) the user's code, hashed by its source?"""
    return _origin(obj)[0] == USER


def _warn_once(where: Tuple[Any, ...], message: str) -> None:
    if where in _warned:
        return
    _warned.add(where)
    from ..errors import MemolabWarning

    warnings.warn(message, MemolabWarning, stacklevel=5)


# -- classes ---------------------------------------------------------------------------------

#: class attributes that are derived from the rest, or say nothing about behaviour
_CLASS_SKIP = frozenset(("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                         "__firstlineno__", "__static_attributes__", "__orig_bases__", "__parameters__",
                         "__abstractmethods__", "_abc_impl", "__dataclass_fields__", "__match_args__",
                         "__annotate__", "__annotate_func__", "__annotations_cache__",
                         # caches that pickling (copyreg) and typing add to a class later
                         "__slotnames__", "_is_protocol", "__protocol_attrs__", "__callable_proto_members_only__"))


class _ClassInfo:
    """What a class's own code says: digest, references of its methods, other code it holds, excerpt."""

    __slots__ = ("digest", "refs", "other_refs", "edges", "values", "source", "dynamic", "ns", "stamp",
                 "__weakref__")

    def __init__(self, cls: type) -> None:
        self.stamp = _class_stamp(cls)
        parts: List[str] = [cls.__qualname__]
        #: id(globals) -> (globals, names read): methods made by exec (attrs) run with
        #: globals of their own, and a name must be resolved where its code looks it up
        by_ns: Dict[int, Tuple[Dict[str, Any], set]] = {}
        dynamic: list = []
        #: (label, code object held by the class that is not its own method)
        self.edges: List[Tuple[str, Any]] = []
        #: (label, plain attribute value): hashed when the graph is built
        self.values: List[Tuple[str, Any]] = []
        own: List[types.FunctionType] = []
        prefix = cls.__qualname__ + "."

        def function(label: str, f: Any) -> None:
            if hasattr(f, "__wrapped__") and not isinstance(f, type):
                if isinstance(f, types.FunctionType) and not f.__qualname__.startswith(prefix):
                    self.edges.append((label + ".<wrapper>", f))  # the decorator's own code
                f = _unwrap(f)
            if isinstance(f, types.FunctionType) and f.__qualname__.startswith(prefix) \
                    and f.__module__ == cls.__module__:
                a = bytecode.analyse_code(f.__code__)
                parts.append(f"{label}={a.digest}")
                by_ns.setdefault(id(f.__globals__), (f.__globals__, set()))[1].update(a.refs)
                dynamic.extend(a.dynamic)
                own.append(f)
                for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
                    if name != "__class__":  # the cell ``super()`` uses holds the class itself
                        self.values.append((f"{label}.<closure {name}>", _cell(cell)))
                # ``def __init__(self, hidden=HIDDEN)``: the default was computed when the
                # class statement ran and lives on the function, not in its code, so an
                # edit of HIDDEN leaves the bytecode digest as it was
                for name, v in _defaults(f, named=True):
                    if _is_code(_unwrap(v)):
                        self.edges.append((f"{label}.<default {name}>", v))
                    else:
                        self.values.append((f"{label}.<default {name}>", v))
            elif _is_code(f):
                self.edges.append((label, f))
            else:
                self.values.append((label, f))

        for name in sorted(cls.__dict__):
            if name in _CLASS_SKIP or (name[:1] == "_" and name[-1:] == "_" and name[1:2] != "_" and len(name) > 2):
                continue  # _sunder_ names are enum's bookkeeping, derived from the members
            v = cls.__dict__[name]
            if isinstance(v, (staticmethod, classmethod)):
                function(f"{name}<{type(v).__name__}>", v.__func__)
            elif isinstance(v, property):
                for part in ("fget", "fset", "fdel"):
                    if getattr(v, part) is not None:
                        function(f"{name}<property.{part}>", getattr(v, part))
            elif type(v).__name__ == "cached_property" and hasattr(v, "func"):
                function(f"{name}<cached_property>", v.func)
            elif isinstance(v, functools.singledispatchmethod):
                # its own body, and the dispatcher holding every registered implementation
                function(f"{name}<singledispatchmethod>", v.func)
                self.edges.append((f"{name}<dispatcher>", v.dispatcher))
            elif isinstance(v, types.FunctionType) or (hasattr(v, "__wrapped__") and callable(v)):
                function(name, v)
            elif cls in type(v).__mro__:  # not isinstance(): TypedDict and others raise from __instancecheck__
                # an Enum member: what it stands for, not the member (whose hash needs this class's digest)
                self.values.append((f"{name}<member>", getattr(v, "_value_", None)))
            elif isinstance(v, type) or isinstance(v, types.ModuleType) or isinstance(v, types.BuiltinFunctionType):
                self.edges.append((name, v))
            else:
                self.values.append((name, v))
        if type(cls) is not type:
            self.edges.append(("<metaclass>", type(cls)))
        module_ns = _module_ns(cls.__module__)
        groups = sorted(by_ns.values(), key=lambda g: g[0] is not module_ns)  # the module's own first
        self.ns = groups[0][0] if groups else None
        self.digest = digest_text("class", *parts)
        self.refs = frozenset(groups[0][1]) if groups else frozenset()
        #: names read by methods that run with other globals, each with those globals
        self.other_refs = tuple((g, frozenset(r)) for g, r in groups[1:])
        self.dynamic = tuple(dynamic)
        # methods made by exec (dataclass, attrs) have no lines of the user's own file
        mod_file = module_ns.get("__file__")
        self.source = _class_excerpt(cls, [f for f in own if f.__code__.co_filename == mod_file] or own)
        # what no line of the class statement shows (``hidden=HIDDEN`` reads the same
        # after HIDDEN is edited): the values it was defined with, for explain's diff
        shown = [f"#   {label} = {r}" for label, r in ((label, _short(v)) for label, v in self.values)
                 if " at 0x" not in r]
        if self.source and shown:
            self.source += "# values held since the class was defined:\n" + "\n".join(shown) + "\n"


def _defaults(f: types.FunctionType, named: bool = False) -> List[Tuple[Any, Any]]:
    """(position, or the parameter's name if ``named``, and value) of every default ``f``
    was defined with; keyword-only ones by name. Plain functions keep positions, as
    their labels have always been (a new label would recompute every stored result)."""
    pos = f.__defaults__ or ()
    if named and pos:
        code = f.__code__
        params = code.co_varnames[:code.co_argcount][-len(pos):]
        first: List[Tuple[Any, Any]] = list(zip(params, pos))
    else:
        first = list(enumerate(pos))
    return first + sorted((f.__kwdefaults__ or {}).items())


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


def _class_excerpt(cls: type, own: List[types.FunctionType]) -> str:
    """The ``class`` statement's source, found from its methods' lines (classes carry no line number)."""
    if not own:
        return ""
    filename = own[0].__code__.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename)
    if not lines:
        return ""
    first = min(f.__code__.co_firstlineno for f in own if f.__code__.co_filename == filename)
    last = max(bytecode.last_line(f.__code__) for f in own if f.__code__.co_filename == filename)
    head = f"class {cls.__name__}"
    start = first
    for i in range(first - 1, max(0, first - 400), -1):
        if lines[i - 1].lstrip().startswith(head):
            start = i
            break
    while start > 1 and lines[start - 2].lstrip().startswith("@"):
        start -= 1
    return textwrap.dedent("".join(lines[start - 1:last]))


_class_infos: "weakref.WeakKeyDictionary[type, _ClassInfo]" = weakref.WeakKeyDictionary()


def _class_stamp(cls: type) -> Tuple[Tuple[str, ...], Tuple[Any, ...]]:
    """What a class's analysis was made from: its attributes and the code objects of its functions.

    IPython's ``%autoreload`` patches an old class in place (``setattr`` on the
    class, ``__code__`` on its functions) while notebooks keep using it.
    """
    names = tuple(cls.__dict__)
    objs: List[Any] = []
    for v in cls.__dict__.values():
        objs.append(v)
        f = getattr(v, "__func__", None) if isinstance(v, (staticmethod, classmethod)) else v
        if isinstance(v, property):
            objs.extend(getattr(p, "__code__", p) for p in (v.fget, v.fset, v.fdel))
        elif isinstance(f, types.FunctionType):
            objs.append(f.__code__)
    return names, tuple(objs)


def _class_info(cls: type) -> _ClassInfo:
    """The cached analysis of ``cls``, redone when the class was changed since (checked per graph build)."""
    info = _class_infos.get(cls)
    if info is not None:
        names, objs = _class_stamp(cls)
        if names != info.stamp[0] or len(objs) != len(info.stamp[1]) \
                or not all(map(operator.is_, objs, info.stamp[1])):
            info = None
    if info is None:
        info = _class_infos[cls] = _ClassInfo(cls)
    return info


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


class _ClassCheck:
    """Has a class been patched since the graph was built (``Config.lr = 0.2``,
    ``Model.forward = other``)? A class's attributes are part of its digest, and
    unlike module globals they are not value slots: a change means a rebuild.

    One read of the class dict's version tag where CPython allows (the dict
    behind ``cls.__dict__``'s proxy), else a comparison of its attributes by
    identity. In-place mutation of a mutable class attribute is not seen.
    """

    __slots__ = ("cls", "stamp", "dict", "tag", "view", "last")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.stamp = _class_stamp(cls)
        refs = gc.get_referents(cls.__dict__)  # a mappingproxy refers to exactly the real dict
        self.dict = refs[0] if len(refs) == 1 and type(refs[0]) is dict else None
        # no tag until ``arm`` (a graph's second check): every check compares the attributes
        self.tag: Any = None
        #: the same tag as raw bytes, gathered with every other tag of the graph (``_Root.views``)
        self.view: Optional[memoryview] = None
        self.last = None

    def arm(self) -> None:
        """Read the class dict's version tag from now on (``_Root._arm``). ``last`` stays
        unset: the next ``unchanged`` compares the attributes once more, then records it."""
        self.tag = dictversion.tag_reader(self.dict) if self.dict is not None else None
        self.view = dictversion.tag_view(self.dict) if self.tag is not None else None
        self.last = None

    def unchanged(self) -> bool:
        if self.tag is not None and self.tag.value == self.last:
            return True
        names, objs = _class_stamp(self.cls)
        if names != self.stamp[0] or len(objs) != len(self.stamp[1]) or not all(map(operator.is_, objs, self.stamp[1])):
            return False
        if self.tag is not None:
            self.last = self.tag.value  # written, but with the same objects: nothing to rebuild
        return True


class _Graph:
    """One build of the binding graph from a set of roots."""

    def __init__(self, sensitivity: str) -> None:
        self.sensitivity = sensitivity
        self.deps: Dict[str, str] = {}
        self.sources: Dict[str, str] = {}
        self.code_slots: List[Tuple[Dict[str, Any], str, Any]] = []
        self.code_checks: List[Tuple[types.FunctionType, types.CodeType]] = []
        #: user classes the graph went through, each checked on every call (``_ClassCheck``)
        self.class_checks: List["_ClassCheck"] = []
        #: (namespace, name) of names that resolved to a builtin because the namespace lacks them
        self.absent: List[Tuple[Dict[str, Any], str]] = []
        #: (symbol, namespace dict or cell, name or None for a cell)
        self.value_slots: List[Tuple[str, Any, Optional[str]]] = []
        self._keys: Dict[int, str] = {}
        self._used: set = set()
        self._value_seen: set = set()
        self._root_fn: Any = None
        self._allow_callable = True  # only the first root, the memoized callable itself
        self._queue: List[Any] = []
        self._unwrapping: set = set()
        self._keep: List[Any] = []

    # keys of user code nodes
    def key_of(self, obj: Any) -> str:
        k = self._keys.get(id(obj))
        if k is not None:
            return k
        if isinstance(obj, types.ModuleType):
            k = f"{origins.key_module(obj.__name__)}:<module>"
        elif isinstance(obj, types.FunctionType):
            # the code's own name: ``functools.wraps`` copies the wrapped function's onto a wrapper
            k = f"{_mod(obj.__globals__)}:{getattr(obj.__code__, 'co_qualname', obj.__qualname__)}"
        else:
            k = symbol_of(obj)
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
        if not isinstance(obj, types.FunctionType):
            # lru_cache, @memo and other wrapper objects count as what they wrap; a
            # wrapper *function* is code of its own, and ``visit`` follows ``__wrapped__``
            obj = _unwrap(obj)
        kind, sym, version = _origin(obj)
        if kind == USER:
            if isinstance(obj, types.BuiltinFunctionType):
                return f"builtin:{symbol_of(obj)}"
            return self.key_of(obj)
        if kind == SKIP:
            return "memolab"
        self.deps[sym] = version
        if isinstance(obj, types.FunctionType) and _unwrap(obj) is not obj and id(obj) not in self._unwrapping:
            # A library decorator that returns a *function* (contextlib.contextmanager,
            # functools.singledispatch, torch.no_grad()) holds the user's code only in
            # ``__wrapped__``: the library counts by version, the code it wraps by its own.
            self._unwrapping.add(id(obj))  # a wrapper reachable from its own attributes ends here
            try:
                return "+".join([sym, self.target(obj.__wrapped__), *self.held_code(obj)])
            finally:
                self._unwrapping.discard(id(obj))
        return sym

    def held_code(self, wrapper: types.FunctionType) -> List[str]:
        """Labels of code a library wrapper keeps in its attributes (singledispatch's ``registry``)."""
        out = []
        for name in sorted(vars(wrapper)):
            if name.startswith("__"):
                continue
            v = vars(wrapper)[name]
            held = v.values() if isinstance(v, (dict, types.MappingProxyType)) else (v,)
            for h in held:  # a registry keeps registration order, which the source fixes
                if _is_code(_unwrap(h)):
                    out.append(f"{name}={self.target(h)}")
        return out

    def value(self, sym: str, where: Any, name: Optional[str]) -> str:
        k = (id(where), name)
        if k not in self._value_seen:
            self._value_seen.add(k)
            self.value_slots.append((sym, where, name))
        return sym

    def resolve(self, ref: Tuple[Any, ...], ns: Dict[str, Any]) -> str:
        if ref[0] == "@import":
            return self.resolve_import(ref, ns)
        name = ref[0]
        obj = ns.get(name, _MISSING)
        if obj is _MISSING:
            if name in builtins.__dict__:
                # a later ``def round`` or ``from numpy import *`` shadows it: watch the name
                self.absent.append((ns, name))
                return "builtins"
            # not bound yet (defined later, or by exec): read it at call time anyway
            return self.value(f"{_mod(ns)}:{name}", ns, name)
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
                return self.value(f"{_mod(d)}:{attr}", d, attr)
            slots.append((d, attr, nxt))
            cur_ns, cur_name, obj = d, attr, nxt
        if _is_code(_unwrap(obj)):
            self.code_slots.extend(slots)
            return self.target(obj)
        self.code_slots.extend(slots[:-1])
        return self.value(f"{_mod(cur_ns)}:{cur_name}", cur_ns, cur_name)

    def resolve_import(self, ref: Tuple[Any, ...], ns: Dict[str, Any]) -> str:
        import importlib.util

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
            # ``from pkg import sub`` imports the submodule when the function runs,
            # which is after the key is computed: import it now, as that statement will
            try:
                obj = sys.modules.get(f"{base}.{name}") or importlib.import_module(f"{base}.{name}")
            except Exception:
                return f"unresolved-import:{base}.{name}"
        if _is_code(_unwrap(obj)):
            return self.target(obj)
        return self.value(f"{_mod(mod.__dict__)}:{name}", mod.__dict__, name)

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
        if not _is_code(_unwrap(r)) and self._allow_callable and callable(r):
            # a callable object memoized directly (a partial, an instance with __call__):
            # its class's code and its state
            self._allow_callable = False
            self.deps[f"<callable {symbol_of(type(r))}>"] = _value_digest(r, symbol_of(type(r)))
            r = type(r)
        self._allow_callable = False
        if _is_code(_unwrap(r)):
            self.target(r)
            f = _unwrap(r)
            if isinstance(f, types.FunctionType):
                self._root_fn = self._root_fn or f
                # the root may be a notebook function whose ``__code__`` an autoreloader swaps
                self.code_checks.append((f, f.__code__))
        else:
            raise TypeError(f"memolab deps: cannot depend on {type(r).__qualname__} object {_short(r)}; "
                            "name a function, class or module (or a module name as a string)")

    def visit(self, obj: Any) -> None:
        key = self._keys[id(obj)]
        bindings: List[str] = []
        other_refs: Tuple[Tuple[Dict[str, Any], frozenset], ...] = ()
        if isinstance(obj, types.FunctionType):
            a = bytecode.analyse_code(obj.__code__)
            digest, refs, dynamic, source, ns = a.digest, a.refs, a.dynamic, a.source, obj.__globals__
            where = obj.__code__.co_filename
            # a reload or a notebook cell rebinds the name to a new function: watch it
            self.watch(ns, obj.__name__)
            if hasattr(obj, "__wrapped__"):
                bindings.append(f"<wrapped>={self.target(obj.__wrapped__)}")
            # default values were computed where the function was defined, not in its code
            for name, v in _defaults(obj):
                if _is_code(_unwrap(v)):
                    bindings.append(f"<default {name}>={self.target(v)}")
                elif obj is not self._root_fn:  # the root's defaults are bound into its arguments
                    bindings.append(f"<default {name}>={_value_digest(v, f'{key}.<default {name}>')}")
            for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
                content = _cell(cell)
                if content is not obj and _is_code(_unwrap(content)):
                    bindings.append(f"<closure {name} code>={self.target(content)}")
                bindings.append(f"<closure {name}>={self.value(f'{key}.<closure {name}>', cell, None)}")
        elif isinstance(obj, type):
            info = _class_info(obj)
            self.class_checks.append(_ClassCheck(obj))
            digest, refs, dynamic, source = info.digest, info.refs, info.dynamic, info.source
            other_refs = info.other_refs
            # the globals its methods actually run with (a class made by exec may have its own)
            ns = info.ns if info.ns is not None else _module_ns(obj.__module__)
            where = ns.get("__file__") or key
            self.watch(ns, obj.__name__)
            # bases count even when the class statement computes them
            for base in obj.__mro__[1:]:
                if base is not object:
                    bindings.append(f"<base>={self.target(base)}")
            for label, target in info.edges:
                bindings.append(f"{label}={self.target(target)}")
            for label, v in info.values:
                bindings.append(f"{label}={_value_digest(v, f'{key}.{label}')}")
        else:
            ns = obj.__dict__
            digest, dynamic, source = digest_text("module", obj.__name__), (), ""
            where = getattr(obj, "__file__", None) or key
            # the whole module: every name it binds
            refs = frozenset((n,) for n in ns if not (n.startswith("__") and n.endswith("__")))
        for ref in sorted(refs, key=repr):
            bindings.append(f"{'.'.join(map(str, ref))}={self.resolve(ref, ns)}")
        for other_ns, names in other_refs:
            for ref in sorted(names, key=repr):
                bindings.append(f"{'.'.join(map(str, ref))}={self.resolve(ref, other_ns)}")
        for line, what, obj_ref in dynamic:
            if obj_ref is not None and self.reads_module(obj_ref, ns):
                continue  # getattr on a module: the whole module is a dependency already
            _warn_once((where, line, what),
                       f"memolab: {what} in `{key}` (line {line} of {os.path.basename(str(where))}): the code it "
                       "reaches cannot be tracked; declare it with @memo(deps=[...]) so that editing it invalidates "
                       "results")
        self.deps[key] = digest_text(digest, *bindings)
        if source:
            self.sources[key] = source

    def reads_module(self, ref: Tuple[Any, ...], ns: Dict[str, Any]) -> bool:
        """Does ``ref`` name a module? If so, depend on all of it."""
        if ref[0] == "@import":
            label = self.resolve_import(ref, ns)
            return not label.startswith("unresolved-import:")
        obj = ns.get(ref[0], _MISSING)
        for attr in ref[1:]:
            obj = getattr(obj, attr, _MISSING)
        if isinstance(obj, types.ModuleType):
            self.resolve(ref, ns)
            return True
        return False

    def watch(self, ns: Dict[str, Any], name: str) -> None:
        v = ns.get(name, _MISSING)
        if v is not _MISSING:
            self.code_slots.append((ns, name, v))


class _ActiveGuard(threading.local):
    def __init__(self) -> None:
        self.ids: set = set()


_active = _ActiveGuard()


class _NsCheck:
    """What one namespace must still hold: the code objects the graph went through, the values it read."""

    __slots__ = ("ns", "tag", "last_tag", "cget", "cexpected", "cmulti", "absent", "vget", "vidx", "vmulti",
                 "vlast", "vimmutable")

    def __init__(self, ns: Dict[str, Any]) -> None:
        self.ns = ns
        self.tag: Any = None  # set by ``_Root._arm``
        self.last_tag: Any = None
        self.cget: Any = None
        self.cexpected: Any = None
        self.cmulti = False
        self.absent: Tuple[str, ...] = ()
        self.vget: Any = None
        self.vidx: Tuple[int, ...] = ()
        self.vmulti = False
        self.vlast: tuple = ()
        self.vimmutable = False


class _Root:
    """The cached graph of one memoized function (or of one class or function hashed as a value)."""

    __slots__ = ("extra", "sensitivity", "graph", "static", "checks", "same", "values", "vslow", "cv", "lock",
                 "views", "stamp", "armed", "__weakref__")

    def __init__(self, objs: List[Any], extra: tuple, sensitivity: str) -> None:
        # ``current`` reads namespaces, then records what it saw (tags, value
        # slots): two threads interleaving there could record an old value
        # under a new tag and serve a stale digest from then on.
        self.lock = threading.Lock()
        self.extra = extra
        self.sensitivity = sensitivity
        g = self.graph = _Graph(sensitivity)
        g.build(objs)
        self.static = dict(g.deps)
        #: per value slot: (last object seen, its digest)
        self.values: List[Tuple[Any, str]] = [(_MISSING, "") for _ in g.value_slots]
        per_ns: Dict[int, Tuple[_NsCheck, Dict[str, Any], List[str], List[int]]] = {}

        def entry(ns: Dict[str, Any]) -> Tuple[_NsCheck, Dict[str, Any], List[str], List[int]]:
            e = per_ns.get(id(ns))
            if e is None:
                e = per_ns[id(ns)] = (_NsCheck(ns), {}, [], [])
            return e

        #: (namespace, name, object) whose type overrides ``==``: checked by identity one by one
        self.same: List[Tuple[Any, str, Any]] = []
        for ns, name in g.absent:
            c = entry(ns)[0]
            if name not in c.absent:
                c.absent += (name,)
        for ns, name, obj in g.code_slots:
            if type(obj).__eq__ is not object.__eq__:
                self.same.append((ns, name, obj))
                entry(ns)
            else:
                entry(ns)[1][name] = obj
        # value slots of one namespace are read with one itemgetter; cells and
        # names not bound yet are read one by one, on every call
        self.vslow: List[int] = []
        for i, (sym, where, name) in enumerate(g.value_slots):
            if name is not None and type(where) is dict and name in where:
                e = entry(where)
                e[2].append(name)
                e[3].append(i)
            else:
                self.vslow.append(i)
        self.checks: List[_NsCheck] = []
        for c, code, vnames, vidx in per_ns.values():
            if code:
                keys = sorted(code)
                c.cget = operator.itemgetter(*keys)
                c.cexpected = tuple(code[k] for k in keys) if len(keys) > 1 else code[keys[0]]
                c.cmulti = len(keys) > 1
            if vnames:
                c.vget = operator.itemgetter(*vnames)
                c.vidx = tuple(vidx)
                c.vmulti = len(vnames) > 1
            self.checks.append(c)
        self.views: Optional[Tuple[memoryview, ...]] = None
        #: the stamp taken *before* the last full check that found everything unchanged
        #: and immutable; None while some value must be re-read on every call
        self.stamp: Optional[bytes] = None
        self.cv: Optional[CodeVersion] = None
        #: version tags are read from the graph's second check on (``_arm``)
        self.armed = False

    def _arm(self) -> None:
        """Start reading dict version tags: at the graph's second check, not its first.

        One stamp for the whole graph: the version tags of every namespace and
        class dict it went through, read in one C-level pass (``b"".join``) and
        compared in one ``memcmp``. While it equals the stamp of the last full
        check and every value read there was immutable, nothing the digest was
        made from can have changed, and no per-namespace or per-class check
        runs (issue 14: per-class checks made a repeat call grow with the
        number of classes, 75 ns each). Where a tag cannot be read
        (``dictversion``), there is no stamp and every check runs each call.

        Not on the first check: a first check compares every name anyway (no tag
        was recorded before it), and reading tags costs loading ``_ctypes``
        (about 0.6 ms), which a script whose only call is a hit never needs.
        Tags taken from the second check on are recorded by a full check first."""
        self.armed = True
        for c in self.checks:
            c.tag = dictversion.tag_reader(c.ns)
            c.last_tag = None
        for cc in self.graph.class_checks:
            cc.arm()
        views = [dictversion.tag_view(c.ns) if c.tag is not None else None for c in self.checks]
        views += [cc.view for cc in self.graph.class_checks]
        self.views = None if None in views else tuple(views)
        self.stamp = None

    def current(self) -> Optional[CodeVersion]:
        """This graph's code version now, or None when the graph must be rebuilt."""
        with self.lock:
            return self._current()

    def _current(self) -> Optional[CodeVersion]:
        g = self.graph
        if not self.armed and self.cv is not None:
            self._arm()
        # taken first: a write that lands while the checks below run makes the next stamp differ
        stamp = b"".join(self.views) if self.views is not None else None
        if stamp is not None and stamp == self.stamp:
            return self._current_quiet()
        values = self.values
        dirty: List[int] = []
        seen_tags = []
        for c in self.checks:
            tag = c.tag.value if c.tag is not None else None
            if tag is not None and tag == c.last_tag and c.vimmutable:
                continue  # nothing written to this namespace since it was last checked
            ns = c.ns
            try:
                if tag is None or tag != c.last_tag:  # names can only be rebound by a write
                    # one C-level read per namespace, compared by identity: ``!=`` would
                    # ask the *new* object, which may claim equality (or return an array)
                    if c.cget is not None:
                        now = c.cget(ns)
                        if not (all(map(operator.is_, now, c.cexpected)) if c.cmulti else now is c.cexpected):
                            return None
                    if c.absent and any(map(ns.__contains__, c.absent)):
                        return None  # a name now shadows the builtin the graph resolved it to
                cur = c.vget(ns) if c.vget is not None else ()
            except KeyError:  # a name the graph went through was deleted
                return None
            if c.vget is not None:
                if not c.vmulti:
                    cur = (cur,)
                if not (c.vimmutable and all(map(operator.is_, cur, c.vlast))):
                    dirty.extend(c.vidx)
            seen_tags.append((c, tag))
        for ns, name, obj in self.same:
            if ns.get(name, _MISSING) is not obj:
                return None
        for fn, code in g.code_checks:
            if fn.__code__ is not code:
                return None
        for cc in g.class_checks:
            if not cc.unchanged():
                return None
        dirty.extend(self.vslow)
        changed = self.cv is None
        slots = g.value_slots
        for i in dirty:
            sym, where, name = slots[i]
            v = _cell(where) if name is None else where.get(name, _MISSING)
            last_v, d = values[i]
            if v is last_v and _is_immutable(v):
                continue
            nd = _value_digest(v, sym)
            values[i] = (v, nd)
            changed = changed or nd != d
        for c, tag in seen_tags:
            c.last_tag = tag
            if c.vget is not None:
                c.vlast = tuple(values[i][0] for i in c.vidx)
                c.vimmutable = all(_is_immutable(o) for o in c.vlast)
            else:
                c.vimmutable = True
        if changed:
            self.cv = self._code_version()
        quiet = not self.vslow and all(c.vimmutable for c in self.checks)
        self.stamp = stamp if quiet else None
        return self.cv

    def _current_quiet(self) -> Optional[CodeVersion]:
        """``_current`` when no dict the graph went through was written since a full check.

        What no dict tag covers is still checked: names resolved through an
        object whose ``==`` is overridden (``same``) and the root function's
        ``__code__``. Cells and names not bound yet (``vslow``) keep the stamp
        unset, so they never reach this path.
        """
        for ns, name, obj in self.same:
            if ns.get(name, _MISSING) is not obj:
                return None
        for fn, code in self.graph.code_checks:
            if fn.__code__ is not code:
                return None
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


#: the value hasher (``memolab.hashing.hash_value``), handed over by ``memolab.hashing``
#: when it is imported (``import memolab`` does): codegraph never imports hashing, so
#: the two do not form a cycle
_hash_value: Any = None


def set_value_hasher(fn: Any) -> None:
    global _hash_value
    _hash_value = fn


def _value_digest(v: Any, sym: str) -> str:
    if v is _MISSING:
        return "unbound"
    from ..errors import HashError

    try:
        return _hash_value(v)
    except HashError as e:
        _warn_once(("unhashable", sym), f"memolab: the value of `{sym}` cannot be hashed ({e}); it is left out "
                                        "of the code digest, so changing it will not invalidate results. Pass it "
                                        "as an argument, or register a hasher for its type.")
        return f"unhashable:{type(v).__module__}.{type(v).__qualname__}"


_function_roots: "weakref.WeakKeyDictionary[Any, _Root]" = weakref.WeakKeyDictionary()
_object_roots: "weakref.WeakKeyDictionary[Any, _Root]" = weakref.WeakKeyDictionary()


from .. import config as _config  # noqa: E402  (config imports nothing of ours)


def _sensitivity(override: Optional[str]) -> str:
    return override if override is not None else _config.settings().version_sensitivity


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
    bytecode.clear()
    _class_infos.clear()
    _function_roots.clear()
    _object_roots.clear()
    _warned.clear()
    origins.clear()
