"""What a memoized call was made from: results of other evaluations among its arguments.

Every object a memoized call returns (computed, loaded from the store, or from this process's
memory) is marked with the evaluation it came from (``identity.mark_result``). When a call
misses, the objects its argument hash walked through (``hashing.hash_arguments(visit=...)``:
the same walk, so "at any depth the hasher goes": a loader's dataset, a dict of results, a
model's attribute) are looked up among the marks, and each one found becomes an input edge:
the argument path where it sits (``ds``, ``loader.dataset``, ``results['a']``) and the key of
its evaluation. A hit records nothing (its evaluation's edges were recorded when it was
computed) and pays nothing for this: the walk's objects are looked at only on a miss.

An object that reached the call as a copy (a Dask worker's transfer, a file written and read
again) carries no mark. An argument holding arrays or tensors whose digest equals that of a
stored result (``hashing.result_digests``: the result's digest as an argument) is then said to
come from that evaluation "by content" (the newest such evaluation).

Lineage is information, never part of a key: two equal objects from different evaluations
key alike (the key hashes content), and nothing here can change a key, a hit or a miss.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..errors import swallowed
from ..hashing import identity
from ..hashing.registry import leaves as large_leaves
from ..store import edges as store_edges

__all__ = ["input_edges", "mark", "MAX_EDGES"]

#: input edges recorded per evaluation at most (a dict of ten thousand results: the first, by path)
MAX_EDGES = 256
#: objects the path search visits at most, per argument holding results
_WALK_MAX = 20_000
_ATOMS = (int, float, complex, bool, str, bytes, type(None))
_OPAQUE = (type, type(len), type(lambda: 0), type(identity))  # classes, functions, modules: not entered


def mark(value: Any, store: Any, eval_id: int, key: Any, arguments: Any = ()) -> None:
    """``value`` (returned by the evaluation ``eval_id`` of ``key`` in ``store``) came from there;
    ``arguments``: the objects the call was given (``identity.mark_result``)."""
    if identity.lineage and type(value) not in _ATOMS:
        try:
            identity.mark_result(value, (store.root, eval_id, key), arguments)
        except Exception:  # a container whose items cannot be listed: lineage is information only
            swallowed("upstream: mark")


def input_edges(named: Sequence[tuple[str, Any]], visited: list[Any] | None, per_arg: dict[str, str],
                store: Any, key: Any) -> list[dict[str, str]]:
    """The input edges of a call (see the module's doc), as its snapshot records them:
    ``{"path", "fn", "code", "args", "schema", "by"}`` (plus ``"store"``: the root of another
    store the evaluation is recorded in), sorted by path, at most ``MAX_EDGES``."""
    found: dict[int, list[tuple[Any, Any, tuple[str, ...]]]] = {}  # argument -> [(object, origin, where)]
    with_leaves = set()  # arguments holding an array or tensor: only those can match a result by content
    if visited:
        keep, ends = visited[0]
        get = identity.origin_where if identity.marked() else None
        large = large_leaves
        arg = 0
        for i, obj in enumerate(keep):
            while arg < len(ends) - 1 and i >= ends[arg]:
                arg += 1
            if type(obj) in large:
                with_leaves.add(arg)
            o = get(obj) if get is not None else None
            if o is not None:
                found.setdefault(arg, []).append((obj, o[0], tuple(map(identity.path_segment, o[1]))))
    edges: list[dict[str, str]] = []
    root = getattr(store, "root", None)
    for arg, objs in found.items():
        if arg >= len(named):
            continue
        name, value = named[arg]
        edges.extend(_edges_of(name, value, objs, root))
    candidates = [named[a] for a in sorted(with_leaves - set(found)) if a < len(named)]
    edges.extend(_by_content(candidates, per_arg, store, key))
    edges.sort(key=lambda e: e["path"])
    return edges[:MAX_EDGES]


def _edges_of(name: str, value: Any, objs: list[tuple[Any, Any, tuple[str, ...]]],
              root: Any) -> list[dict[str, str]]:
    """One edge per evaluation found in argument ``name``: at the path of its object, or (several
    objects of one evaluation: a dict of its arrays) at the path they have in common. An object
    that sat inside its result (``{"w": array}``: the dict itself cannot be marked) at the end of
    the path it has here stands for its result: the edge is at the result's place (``model``,
    not ``model['w']``)."""
    paths = _paths(name, value, {id(o): o for o, _, _ in objs})
    per: dict[tuple[Any, Any], list[list[str]]] = {}
    for obj, origin, where in objs:
        p = paths.get(id(obj), [name])
        if p is None:
            continue  # inside another object that came from an evaluation: an input of that one
        if where and len(p) > len(where) and tuple(p[-len(where):]) == where:
            p = p[:-len(where)]
        per.setdefault((origin[0], tuple(origin[2])), []).append(p)
    out = []
    for (where, key), ps in per.items():
        common = ps[0]
        for p in ps[1:]:
            n = 0
            while n < len(common) and n < len(p) and common[n] == p[n]:
                n += 1
            common = common[:n]
        e = {"path": "".join(common) or name, "fn": key[0], "code": key[1], "args": key[2], "schema": key[3],
             "by": "object"}
        if root is not None and where != root:
            e["store"] = str(where)  # another store (@memo(store=...)): its ids mean nothing in this one
        out.append(e)
    return out


_segment_key = identity.path_segment


def _children(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [(_segment_key(k), v) for k, v in list(obj.items())]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, (set, frozenset, _OPAQUE)):
        return []
    out: list[tuple[str, Any]] = []
    d = getattr(obj, "__dict__", None)
    if type(d) is dict:
        out.extend((f".{k}" if isinstance(k, str) and k.isidentifier() else _segment_key(k), v)
                   for k, v in list(d.items()))
    for cls in type(obj).__mro__:
        for s in cls.__dict__.get("__slots__", ()) if isinstance(cls.__dict__.get("__slots__", ()), (tuple, list)) else ():
            if isinstance(s, str) and s not in ("__dict__", "__weakref__"):
                try:
                    out.append((f".{s}", getattr(obj, s)))
                except AttributeError:
                    pass
    return out


def _paths(name: str, value: Any, targets: dict[int, Any]) -> dict[int, list[str] | None]:
    """id -> the path (segments) of each target in ``value``: the first found, breadth first; None
    for a target found only inside another target. Targets not reached are absent."""
    out: dict[int, list[str] | None] = {}
    seen = set()
    frontier: list[tuple[Any, list[str], bool]] = [(value, [name], False)]
    visited = 0
    while frontier and visited < _WALK_MAX and len(out) < len(targets):
        nxt: list[tuple[Any, list[str], bool]] = []
        for obj, path, inside in frontier:
            if type(obj) in _ATOMS or id(obj) in seen:
                continue
            seen.add(id(obj))
            visited += 1
            hit = id(obj) in targets and targets[id(obj)] is obj
            if hit:
                out[id(obj)] = None if inside else path
            try:
                kids = _children(obj)
            except Exception:  # an object whose attributes cannot even be listed: not entered
                swallowed("upstream: _paths")
                kids = []
            nxt.extend((v, path + [seg], inside or hit) for seg, v in kids)
            if visited >= _WALK_MAX:
                break
        frontier = nxt
    return out


def _by_content(named: Sequence[tuple[str, Any]], per_arg: dict[str, str], store: Any,
                key: Any) -> list[dict[str, str]]:
    """Those of ``named`` (arguments holding arrays or tensors and no marked object) whose digest is
    that of a stored result (``by content``): a result gets a value digest only if it holds some."""
    want = {}
    for name, _value in named:
        if name.startswith("<") or name not in per_arg:
            continue
        want[per_arg[name]] = name
    if not want:
        return []
    try:
        found = store_edges.by_content(store.index, want)
    except (sqlite3.Error, OSError):  # an index without the table, a read-only one, a NoStore's: information only
        swallowed("upstream: _by_content")
        return []
    out = []
    for d, (_, up) in found.items():
        if tuple(up) == tuple(key):
            continue
        out.append({"path": want[d], "fn": up[0], "code": up[1], "args": up[2], "schema": up[3], "by": "content"})
    return out
