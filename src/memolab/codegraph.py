"""Code digests: what a memoized function's key knows about its code.

A function's digest covers its source normalised through the AST (comments,
docstrings and formatting dropped, so ``black`` never invalidates a cache).
The public surface below is what the rest of memolab relies on; the binding
graph behind it can grow without changing callers.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import sys
import textwrap
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Tuple

import xxhash

CODE_SCHEMA = "c1"


@dataclass(frozen=True)
class CodeVersion:
    """The code part of a key, with what ``explain`` needs to say what changed."""

    digest: str
    #: symbol -> digest of every piece of code the function depends on (itself included)
    deps: Dict[str, str] = field(default_factory=dict)
    #: symbol -> normalised source excerpt, for diffs in ``explain``
    sources: Dict[str, str] = field(default_factory=dict)


def symbol_of(obj: Any) -> str:
    """``module:qualname`` for a function or class."""
    mod = getattr(obj, "__module__", None) or "?"
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{mod}:{qual}"


class _Stripper(ast.NodeTransformer):
    """Drop docstrings; comments and formatting are already gone in the AST."""

    def _strip(self, node: Any) -> Any:
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Module = _strip


def normalized_source(src: str) -> str:
    """The AST dump of ``src`` without docstrings, positions or comments."""
    tree = ast.parse(textwrap.dedent(src))
    tree = _Stripper().visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _source_of(obj: Any) -> Optional[str]:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


_digests: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def _digest_text(parts: Iterable[str]) -> str:
    h = xxhash.xxh3_128()
    h.update(CODE_SCHEMA.encode())
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def object_digest(obj: Any) -> str:
    """Digest of a function's or class's code (not of its dependencies' values)."""
    try:
        return _digests[obj]
    except (KeyError, TypeError):
        pass
    src = _source_of(obj)
    if src is not None:
        try:
            d = _digest_text([normalized_source(src)])
        except SyntaxError:
            d = _digest_text([src])
    else:
        code = getattr(obj, "__code__", None)
        if code is not None:
            d = _digest_text([repr(code.co_code), repr(code.co_consts), repr(code.co_names)])
        else:
            d = _digest_text([symbol_of(obj), sys.version.split()[0]])
    try:
        _digests[obj] = d
    except TypeError:
        pass
    return d


_versions: "weakref.WeakKeyDictionary[Any, Tuple[tuple, CodeVersion]]" = weakref.WeakKeyDictionary()


def function_code(fn: Any, extra_deps: Iterable[Any] = ()) -> CodeVersion:
    """The code version of ``fn``: its own normalised source plus declared extras.

    Computed once per process per function (and per ``__code__`` object, so a
    redefinition is seen)."""
    extra = tuple(extra_deps)
    stamp = (getattr(fn, "__code__", None), extra)
    hit = _versions.get(fn)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    cv = _function_code(fn, extra)
    _versions[fn] = (stamp, cv)
    return cv


def _function_code(fn: Any, extra_deps: Iterable[Any]) -> CodeVersion:
    sym = symbol_of(fn)
    deps = {sym: object_digest(fn)}
    sources = {}
    src = _source_of(fn)
    if src is not None:
        sources[sym] = textwrap.dedent(src)
    for d in extra_deps:
        if isinstance(d, str):
            mod = sys.modules.get(d) or __import__(d, fromlist=["_"])
            deps[d] = object_digest(mod)
        else:
            deps[symbol_of(d)] = object_digest(d)
    digest = _digest_text(f"{k}={v}" for k, v in sorted(deps.items()))
    return CodeVersion(digest, deps, sources)
