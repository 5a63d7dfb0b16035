"""The binding graph: one build from a set of roots (``Graph``): what a function's code
reaches (functions, classes, modules, the values it reads), resolved through namespaces and
imports. The cached graph of one function with its per-call checks is ``Root``
(``codegraph/root.py``); see the package docstring for the cost model."""
from __future__ import annotations

import builtins
import os
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import swallowed
from . import bytecode, decorators as _decorators, origins
from .bytecode import digest_text
from .classes import ClassCheck as _ClassCheck, class_info as _class_info
from .origins import SKIP, STDLIB, USER
from .patches import MISSING as _PATCH_MISSING, planted, user_code as _user_function
from .where import (
    MISSING as _MISSING,
    cell_value as _cell,
    defaults_of as _defaults,
    held_functions as _held_functions,
    is_code as _is_code,
    module_ns as _module_ns,
    origin_of as _origin,
    runs as _runs,
    short as _short,
    symbol_module as _mod,
    symbol_of,
    unwrap as _unwrap,
    warn_once as _warn_once,
)


class Graph:
    """One build of the binding graph from a set of roots."""

    def __init__(self, sensitivity: str, value_digest: Callable[[Any, str], str]) -> None:
        self.sensitivity = sensitivity
        #: the package's value hasher (``codegraph.set_value_hasher``), handed down with each build
        self.value_digest = value_digest
        self.deps: dict[str, str] = {}
        self.sources: dict[str, str] = {}
        self.code_slots: list[tuple[dict[str, Any], str, Any]] = []
        #: (function, its ``__code__``, ``__defaults__``, ``__kwdefaults__``) of every function the graph
        #: went through, methods included: slots no dict tag covers, which a hot reloader (jurigged), a
        #: test's patch or a hand-made one writes in place; compared by identity on every call
        self.func_checks: list[tuple[types.FunctionType, Any, Any, Any]] = []
        self._func_seen: set[int] = set()
        #: user classes the graph went through, each checked on every call (``_ClassCheck``)
        self.class_checks: list[_ClassCheck] = []
        #: (namespace, name) of names that resolved to a builtin because the namespace lacks them
        self.absent: list[tuple[dict[str, Any], str]] = []
        #: (symbol, namespace dict or cell, name or None for a cell)
        self.value_slots: list[tuple[str, Any, str | None]] = []
        self._keys: dict[int, str] = {}
        self._used: set = set()
        self._value_seen: set = set()
        self._root_fn: Any = None
        self._allow_callable = True  # only the first root, the memoized callable itself
        self._queue: list[Any] = []
        self._unwrapping: set = set()
        self._keep: list[Any] = []
        #: third-party packages user code imports inside a function (``import x`` in a body): not in
        #: the digest; a computation that imported one records its version (``implicit``)
        self.lazy: set = set()
        #: (class ``__dict__`` mappingproxy, name, object) a chain went through in a library class:
        #: compared by identity on every call (no version tag to read there)
        self.identity_slots: list[tuple[Any, str, Any]] = []
        self._watched_classes: set = set()

    def check_function(self, f: types.FunctionType, slots: list[Any] | None = None) -> None:
        """Watch the slots of ``f`` that no namespace holds (``func_checks``): as they are now, or
        ``slots`` (its code, defaults and keyword defaults as they were when a class's analysis read them)."""
        if id(f) not in self._func_seen:
            self._func_seen.add(id(f))
            c, d, k = slots if slots is not None else (f.__code__, f.__defaults__, f.__kwdefaults__)
            self.func_checks.append((f, c, d, k))

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
            obj = _decorators.unwrap_objects(obj)
        kind, sym, version = _origin(obj)
        if kind == USER:
            if isinstance(obj, types.BuiltinFunctionType):
                return f"builtin:{symbol_of(obj)}"
            return self.key_of(obj)
        if kind == SKIP:
            wrapped = getattr(obj, "__memolab_wraps__", None)
            # memolab's own wrappers of library functions (the seed functions it watches:
            # ``globalrng``) count as the function they wrap, whenever the name was bound
            return "memolab" if wrapped is None else self.target(wrapped)
        self.deps[sym] = version
        if isinstance(obj, types.FunctionType) and id(obj) not in self._unwrapping:
            if _unwrap(obj) is not obj:
                # A library decorator that returns a *function* (contextlib.contextmanager,
                # functools.singledispatch, torch.no_grad()) holds the user's code only in
                # ``__wrapped__``: the library counts by version, the code it wraps by its own.
                self._unwrapping.add(id(obj))  # a wrapper reachable from its own attributes ends here
                try:
                    return "+".join([sym, self.target(obj.__wrapped__), *self.held_code(obj),  # type: ignore[attr-defined]
                                     *self.decorator_args(obj)])
                finally:
                    self._unwrapping.discard(id(obj))
            held = [h for h in _held_functions(obj) if _origin(_runs(h))[0] == USER]
            if held:
                # A library decorator without ``functools.wraps``: its wrapper holds the user's
                # function in a closure cell (or a default). That code is what runs: it counts by
                # its own, and the wrapper by the library's version and its own name.
                self._unwrapping.add(id(obj))
                try:
                    return "+".join([f"{sym}({obj.__qualname__})", *(self.target(h) for h in held),
                                     *self.decorator_args(obj)])
                finally:
                    self._unwrapping.discard(id(obj))
        return sym

    def held_code(self, wrapper: types.FunctionType) -> list[str]:
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

    def decorator_args(self, wrapper: types.FunctionType) -> list[str]:
        """A library wrapper's decorator arguments, kept in its closure (``@torch.autocast("cpu",
        dtype=...)``), by value (``decorators.closure_state``)."""
        sym = f"{symbol_of(wrapper)}.<decorator>"
        return [f"<closure {name}>={self.value_digest(v, f'{sym}.{name}')}"
                for name, v in _decorators.closure_state(wrapper)]

    def value(self, sym: str, where: Any, name: str | None) -> str:
        k = (id(where), name)
        if k not in self._value_seen:
            self._value_seen.add(k)
            self.value_slots.append((sym, where, name))
        return sym

    def resolve(self, ref: tuple[Any, ...], ns: dict[str, Any]) -> str:
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
        for i, attr in enumerate(ref[1:]):
            if isinstance(obj, types.ModuleType) and _origin(obj)[0] == USER:
                d = obj.__dict__
                nxt = d.get(attr, _MISSING)
                if nxt is _MISSING and "__getattr__" in d:
                    # a helper served by the package's own ``__getattr__`` (PEP 562): user code,
                    # run as the function's own access would run it; no slot holds it to watch
                    served = getattr(obj, attr, _MISSING)
                    if _is_code(_unwrap(served)):
                        self.code_slots.extend(slots)
                        return self.target(served)
                if nxt is _MISSING:
                    # a submodule not imported yet or an attribute set later: watch that slot
                    self.code_slots.extend(slots)
                    return self.value(f"{_mod(d)}:{attr}", d, attr)
                slots.append((d, attr, nxt))
                cur_ns, cur_name, obj = d, attr, nxt
                continue
            if _is_library_namespace(obj):
                return self.library_chain(obj, ref[i + 1:], slots)
            break
        if _is_library_namespace(obj):
            self.code_slots.extend(slots)
            return self.library_chain(obj, (), [])
        if _is_code(_unwrap(obj)):
            self.code_slots.extend(slots)
            return self.target(obj)
        self.code_slots.extend(slots[:-1])
        return self.value(f"{_mod(cur_ns)}:{cur_name}", cur_ns, cur_name)

    def library_chain(self, lib: Any, attrs: tuple[Any, ...], slots: list[tuple[Any, str, Any]]) -> str:
        """``lib.a.b...`` where ``lib`` is a library module or class: it counts as the library
        (by version), plus any user code found planted at the end of the chain. The names are
        read from ``__dict__``s, never with ``getattr`` (a lazy module would import), and every
        slot passed is watched: user code assigned there later is seen on the next call."""
        self.code_slots.extend(slots)
        obj = lib
        self.watch_library_class(obj)
        for attr in attrs:
            found = _library_attr(obj, attr)
            if found is None:
                break
            owner, nxt = found
            if type(owner) is dict:
                self.code_slots.append((owner, attr, nxt))
            else:
                self.identity_slots.append((owner, attr, nxt))
            obj = nxt
            if not _is_library_namespace(obj):
                break
            self.watch_library_class(obj)
        label = self.target(lib)
        planted = _user_function(obj)
        return label if planted is None else f"{label}+{self.target(planted)}"

    def watch_library_class(self, obj: Any) -> None:
        """A library class a chain of user code reaches (``fancylib.Layer()``) and its bases: a
        method assigned to one later (``Layer.forward = f``) is seen on the next call, as a
        user class's is (``ClassCheck``: one version tag per class in the graph's stamp)."""
        if not issubclass(type(obj), type):
            return
        for klass in obj.__mro__:
            if klass is object or id(klass) in self._watched_classes or klass.__module__ == "builtins":
                continue
            self._watched_classes.add(id(klass))
            self.class_checks.append(_ClassCheck(klass))

    def resolve_import(self, ref: tuple[Any, ...], ns: dict[str, Any]) -> str:
        """An import statement inside a function. User code is imported and followed (it is what
        the key hashes). A library is never imported, nor read through ``getattr``, to classify
        a name: importing it can cost seconds (``transformers``) and run anything; it counts as
        ``lazy:<package>`` whether or not it is installed, and a computation that imported it
        records its version with the result (``implicit``), so a function whose body never
        reaches the import (``GPT.from_pretrained`` in a training) never depends on it."""
        import importlib.util

        _, level, module, name = ref
        try:
            if level:
                base = importlib.util.resolve_name("." * level + module, ns.get("__package__") or "")
            else:
                base = module
        except (ImportError, ValueError):  # a relative import beyond the top-level package
            swallowed("codegraph.graph: Graph.resolve_import")
            return f"unresolved-import:{'.' * level}{module}"
        mod = sys.modules.get(base)
        top = base.split(".")[0]
        kind = USER if level else (_origin(mod)[0] if mod is not None else origins.origin_of_name(top))
        if kind == STDLIB:
            self.deps["python:stdlib"] = origins.PYTHON_VERSION
            return "python:stdlib"
        if kind != USER:
            self.lazy.add(top)
            planted = _user_function(mod.__dict__.get(name, None)) if mod is not None and name else None
            return f"lazy:{top}" if planted is None else f"lazy:{top}+{self.target(planted)}"
        try:
            mod = mod or importlib.import_module(base)
        except Exception:  # importing runs the module's own code
            swallowed("codegraph.graph: Graph.resolve_import")
            return f"unresolved-import:{'.' * level}{module}"
        if name is None:
            return self.target(mod)
        obj = getattr(mod, name, _MISSING)
        if obj is _MISSING:
            # ``from pkg import sub`` imports the submodule when the function runs,
            # which is after the key is computed: import it now, as that statement will
            try:
                obj = sys.modules.get(f"{base}.{name}") or importlib.import_module(f"{base}.{name}")
            except Exception:  # importing runs the module's own code
                swallowed("codegraph.graph: Graph.resolve_import")
                return f"unresolved-import:{base}.{name}"
        if _is_code(_unwrap(obj)):
            return self.target(obj)
        return self.value(f"{_mod(mod.__dict__)}:{name}", mod.__dict__, name)

    def build(self, roots: Iterable[Any]) -> None:
        for r in roots:
            self.root(r)
        plants, wholes = planted()
        for where, owner, name, raw, fn in plants:
            # the slots of libraries user code patches: user code there runs wherever the library
            # is used, and whatever is assigned there later is seen on the next call (``patches``)
            if fn is not None:
                self.deps[f"<patch {where}>"] = digest_text(self.target(fn))
            if raw is _PATCH_MISSING:
                continue  # not assigned yet (the patch runs later): watched through its namespace below
            if type(owner) is dict:
                self.code_slots.append((owner, name, raw))
            else:
                self.identity_slots.append((owner, name, raw))
        for target in wholes:
            self.watch_library_class(target)
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
            self.deps[f"<callable {symbol_of(type(r))}>"] = self.value_digest(r, symbol_of(type(r)))
            r = type(r)
        self._allow_callable = False
        if _is_code(_unwrap(r)):
            label = self.target(r)
            f = _unwrap(r)
            key = self._keys.get(id(f))
            if key is not None and label != key:
                # a library decorator between ``@memo`` and the code (``@torch.autocast(...)``): its
                # version and arguments are in the label, which no binding of a referrer holds
                self.deps[f"{key}.<decorators>"] = digest_text(label)
            if isinstance(f, types.FunctionType):
                self._root_fn = self._root_fn or f
                # the root may be a notebook function whose ``__code__`` an autoreloader swaps
                self.check_function(f)
        else:
            raise TypeError(f"memolab deps: cannot depend on {type(r).__qualname__} object {_short(r)}; "
                            "name a function, class or module (or a module name as a string)")

    def visit(self, obj: Any) -> None:
        key = self._keys[id(obj)]
        bindings: list[str] = []
        other_refs: tuple[tuple[dict[str, Any], frozenset], ...] = ()
        if isinstance(obj, types.FunctionType):
            self.check_function(obj)  # (first: a write from here on is seen by the next call)
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
                    bindings.append(f"<default {name}>={self.value_digest(v, f'{key}.<default {name}>')}")
            for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=False):
                content = _cell(cell)
                if content is not obj and _is_code(_unwrap(content)):
                    bindings.append(f"<closure {name} code>={self.target(content)}")
                bindings.append(f"<closure {name}>={self.value(f'{key}.<closure {name}>', cell, None)}")
            # attributes set on the function (``helper.scale = 3`` at module level), read by value
            for name in sorted(n for n in vars(obj) if not (n.startswith("__") and n.endswith("__"))):
                v = vars(obj)[name]
                if _is_code(_unwrap(v)):
                    bindings.append(f"<attr {name} code>={self.target(v)}")
                bindings.append(f"<attr {name}>={self.value(f'{key}.<attr {name}>', vars(obj), name)}")
        elif isinstance(obj, type):
            info = _class_info(obj)
            for f, *slots in info.slots:  # (as the analysis found them, before it read them)
                self.check_function(f, slots)
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
                bindings.append(f"{label}={self.value_digest(v, f'{key}.{label}')}")
        else:
            ns = obj.__dict__
            digest, dynamic, source = digest_text("module", obj.__name__), (), ""
            where = getattr(obj, "__file__", None) or key
            # the whole module: every name it binds
            refs = frozenset((n,) for n in ns if not (n.startswith("__") and n.endswith("__")))
        for ref in sorted(refs, key=repr):
            bindings.append(f"{'.'.join(map(str, ref))}={self.resolve(ref, ns)}")
            resolver = _string_resolver(ref, ns)
            if resolver is not None:
                line = getattr(getattr(obj, "__code__", None), "co_firstlineno", 0)
                _warn_once((where, key, resolver),
                           f"memolab: `{key}` (line {line} of {os.path.basename(str(where))}) calls {resolver}, "
                           "which finds code by a name in a string or a config: the code it reaches cannot be "
                           "tracked; declare it with @memo(deps=[...]) so that editing it invalidates results")
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

    def reads_module(self, ref: tuple[Any, ...], ns: dict[str, Any]) -> bool:
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

    def watch(self, ns: dict[str, Any], name: str) -> None:
        v = ns.get(name, _MISSING)
        if v is not _MISSING:
            self.code_slots.append((ns, name, v))


#: library functions that find code by a name given as a string (a config's ``_target_``)
_RESOLVERS = {"pydoc": ("locate",), "hydra": ("instantiate", "call", "get_class", "get_method", "get_object",
                                               "get_static_method")}


def _string_resolver(ref: tuple[Any, ...], ns: dict[str, Any]) -> str | None:
    """``pydoc.locate``, ``hydra.utils.instantiate`` and their kin when ``ref`` names one: the
    function's result is code the graph cannot see."""
    if ref[0] == "@import":
        return None
    obj = ns.get(ref[0], _MISSING)
    for attr in ref[1:]:
        found = _library_attr(obj, attr) if _is_library_namespace(obj) else None
        if found is None:
            return None
        obj = found[1]
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__name__", None)
    if isinstance(module, str) and name in _RESOLVERS.get(module.split(".")[0], ()) and callable(obj):
        return f"{module.split('.')[0]}'s {name}()"
    return None


def _is_library_namespace(obj: Any) -> bool:
    """A module or class that is not the user's (nor memolab's): read by version, not by code."""
    # by the object's real type: ``isinstance`` would ask a proxy's ``__class__`` (a deprecation warning)
    return issubclass(type(obj), (types.ModuleType, type)) and _origin(obj)[0] not in (USER, SKIP)


def _library_attr(obj: Any, attr: str) -> tuple[Any, Any] | None:
    """(the namespace holding it, the value) of ``obj.attr`` for a library module or class, read from
    ``__dict__``s only; None where only ``getattr`` would find it (a lazy attribute, an instance's)."""
    if issubclass(type(obj), types.ModuleType):
        d = obj.__dict__
        v = d.get(attr, _MISSING)
        return None if v is _MISSING else (d, v)
    for klass in getattr(obj, "__mro__", ()):
        own = klass.__dict__
        if attr in own:
            return own, own[attr]
    return None
