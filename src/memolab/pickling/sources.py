"""The source file a by-value definition came from.

When the loading program lacks the definition (a notebook reading what
train.py stored), the stored code is used, but if train.py is still on disk
and its definition changed, the result is stale all the same. We fingerprint
the definition's normalised source, found by name in the file's AST, the same
way at store and load time, so the two are comparable by construction."""
from __future__ import annotations

import os
import textwrap
import types
from collections.abc import Sequence
from typing import Any

_file_defs: dict[tuple[str, int, int], dict[str, str]] = {}


def _definitions(path: str) -> dict[str, str] | None:
    """qualname -> fingerprint of every named definition (def, class, assignment) in ``path``."""
    import ast

    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    hit = _file_defs.get(key)
    if hit is not None:
        return hit
    try:
        with open(path, "rb") as f:
            src = f.read().decode("utf-8", "surrogateescape")
        tree = ast.parse(src)
    except (OSError, SyntaxError, ValueError):
        return None
    import xxhash

    try:
        from ..codegraph import normalized_source  # docstrings and comments do not count
    except ImportError:  # pragma: no cover - only if codegraph drops it
        def normalized_source(src: str) -> str:
            return ast.dump(ast.parse(textwrap.dedent(src)), include_attributes=False)

    def fingerprint(seg: str) -> str:
        try:
            text = normalized_source(seg)
        except SyntaxError:
            text = seg
        return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))

    out: dict[str, str] = {}

    def visit(body: list[Any], prefix: str) -> None:
        for node in body:
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(node, block, []) or [], prefix)
                for h in getattr(node, "handlers", []):
                    visit(h.body, prefix)
            for name in names:  # a later definition wins, as when the file runs
                out[prefix + name] = fingerprint(ast.get_source_segment(src, node) or "")
            if isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    if len(_file_defs) > 64:
        _file_defs.clear()
    _file_defs[key] = out
    return out


def source_fingerprint(obj: Any, anchor: str) -> tuple[str, str] | None:
    """(absolute file, fingerprint of ``anchor``'s definition in it), when both are known."""
    import inspect

    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    if not path and isinstance(obj, types.FunctionType):
        path = obj.__code__.co_filename
    if not path or path.startswith("<"):
        return None
    path = os.path.abspath(path)
    fp = (_definitions(path) or {}).get(anchor)
    return (path, fp) if fp else None


def source_changed(anchor: str, source: Sequence[str] | None) -> str | None:
    if not source:
        return None
    path, fp = source
    defs = _definitions(path)
    if defs is None:
        return None  # the file is not here (another machine, a deleted cell): nothing to compare
    now = defs.get(anchor)
    if now is None:
        return f"is no longer defined in {path}"
    if now != fp:
        return f"changed in {path} since the result was stored"
    return None
