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

The package: ``where`` (what code is and where it lives, shared helpers),
``classes`` (the analysis of a class and its per-call check), ``graph`` (the
graph and its cached checks) and, here, the entry points ``function_code`` and
``object_digest`` with the caches they keep.
"""
from __future__ import annotations

import textwrap
import threading
import weakref
from collections.abc import Iterable
from typing import Any

from ..errors import HashError, forget_warned
from . import bytecode, origins
from .bytecode import digest_text
from .classes import ClassCheck, class_info, class_infos
from .dictversion import func_slots, func_view
from .root import Root
from .where import CODE_SCHEMA, MISSING, CodeVersion, is_code, is_user_code, runs, symbol_of, unwrap, warn_once

key_module = origins.key_module

__all__ = ["CodeVersion", "function_code", "object_digest", "symbol_of", "runs", "is_user_code", "is_code", "key_module",
           "normalized_source", "CODE_SCHEMA", "function_root", "sensitivity",
           "ACTIVE_GUARD", "func_view", "func_slots"]


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


# The names these had when the package was one module, for code and tests that
# reach into it: the same objects, so patching one (a test counting
# ``_ClassCheck.unchanged`` calls) patches what the graph runs.
_Root, _ClassCheck, _class_info, _unwrap, _is_code = Root, ClassCheck, class_info, unwrap, is_code
_MISSING, _warn_once = MISSING, warn_once


class _ActiveGuard(threading.local):
    def __init__(self) -> None:
        self.ids: set = set()


_active = _ActiveGuard()
#: the same object, by a public name: ``calls/fasthits`` reads its ``ids`` (a digest under way in
#: this thread, whose cycle guard could answer otherwise) without a call
ACTIVE_GUARD = _active


#: the value hasher (``memolab.hashing.hash_value``), handed over by ``memolab.hashing``
#: when it is imported (``import memolab`` does): codegraph never imports hashing, so
#: the two do not form a cycle
#: here, in the package itself: each graph build gets ``_value_digest`` handed down
_hash_value: Any = None


def set_value_hasher(fn: Any) -> None:
    global _hash_value
    _hash_value = fn


def _value_digest(v: Any, sym: str) -> str:
    if v is _MISSING:
        return "unbound"

    try:
        return _hash_value(v)
    except HashError as e:
        _warn_once(("unhashable", sym), f"memolab: the value of `{sym}` cannot be hashed ({e}); it is left out "
                                        "of the code digest, so changing it will not invalidate results. Pass it "
                                        "as an argument, or register a hasher for its type.")
        return f"unhashable:{type(v).__module__}.{type(v).__qualname__}"


_function_roots: weakref.WeakKeyDictionary[Any, Root] = weakref.WeakKeyDictionary()
_object_roots: weakref.WeakKeyDictionary[Any, Root] = weakref.WeakKeyDictionary()
#: the dict under ``_function_roots`` (weak reference -> root): what its ``get`` reads, read in
#: ``function_code`` itself (a Python call less on every hit)
_function_roots_data: dict[Any, Root] = _function_roots.data  # type: ignore[attr-defined]


from ..settings import config as _config  # noqa: E402  (config imports nothing of ours)


def sensitivity(override: str | None) -> str:
    """The version sensitivity a code version is taken in: ``override`` (a memo's own), else the
    settings'."""
    return override if override is not None else _config.settings().version_sensitivity


def function_code(fn: Any, extra_deps: Iterable[Any] = (), version_sensitivity: str | None = None) -> CodeVersion:
    """The code version of ``fn``: the digest of its binding graph (plus ``extra_deps``).

    Cheap on repeat: the graph is cached per function; only the globals and
    closure cells it reads are re-checked (see the module docstring).
    """
    ids = _active.ids
    if ids and id(fn) in ids:  # (``id()`` raises an audit event: asked only while some digest is under way)
        # its digest is being computed: a value it reads holds it (a memoized function in a dict
        # of steps); the outer digest covers its code, as ``object_digest`` says of a cycle
        return CodeVersion(digest_text("cycle", symbol_of(fn)))
    sens = sensitivity(version_sensitivity)
    extra = extra_deps if type(extra_deps) is tuple else tuple(extra_deps)
    try:
        root = _function_roots_data.get(weakref.ref(fn))
    except TypeError:  # not weak-referenceable (``_rebuild``: built on every call), as ``get`` says
        root = None
    if root is not None and root.sensitivity == sens and (root.extra is extra or root.extra == extra):
        cv = root.quiet()  # (hashes nothing: no cycle guard needed; checked above that none is under way)
        if cv is None:
            cv = _current(fn, root)
        if cv is not None:
            return cv
    return _rebuild(_function_roots, fn, [fn, *extra], extra, sens)


def function_root(fn: Any) -> Root | None:
    """The cached graph ``function_code`` checks ``fn`` against, if it has built one."""
    try:
        return _function_roots_data.get(weakref.ref(fn))
    except TypeError:  # not weak-referenceable
        return None


def _current(obj: Any, root: Root) -> CodeVersion | None:
    ids = _active.ids
    i = id(obj)
    ids.add(i)
    try:
        return root.current()
    finally:
        ids.discard(i)


def _rebuild(table: Any, obj: Any, objs: list[Any], extra: tuple, sens: str) -> CodeVersion:
    ids = _active.ids
    i = id(obj)
    ids.add(i)
    try:
        for _ in range(_BUILDS):
            root = _Root(objs, extra, sens, _value_digest)
            try:
                table[obj] = root
            except TypeError:  # not weak-referenceable: rebuilt on every call, still correct
                pass
            cv = root.current()
            if cv is not None:
                return cv
            # Out of date the moment it was built: another thread rebound a name the graph went
            # through while it was built. Build again (the writes settle); never fail the call.
        try:
            table.pop(obj, None)  # the next call builds afresh
        except TypeError:
            pass
        _warn_once(("unstable", symbol_of(obj)),
                   f"memolab: the code {symbol_of(obj)} depends on kept changing while its digest was computed "
                   f"({_BUILDS} tries); this call gets a key of its own (a miss, never a stale hit)")
        import uuid

        return CodeVersion(f"unstable-{uuid.uuid4().hex}", sensitivity=sens)
    finally:
        ids.discard(i)


#: graph builds before a call whose code keeps changing under it gets a key of its own
_BUILDS = 5


def object_digest(obj: Any) -> str:
    """Transitive digest of a function's or class's code (what hashing uses for code values).

    A user class's digest covers its methods, its bases and everything they
    reach; a third-party class's, its distribution's version. Re-entrant calls
    for an object whose digest is being computed (a global holding an instance
    of the very class being hashed) get a digest of its name: the outer digest
    already covers its code.
    """
    ids = _active.ids
    if ids and id(obj) in ids:  # (see ``function_code``)
        return digest_text("cycle", symbol_of(obj))
    sens = sensitivity(None)
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
    class_infos.clear()
    _function_roots.clear()
    _object_roots.clear()
    forget_warned("codegraph")
    origins.clear()
