"""Lineage in the index: what each evaluation was made from, and what used it.

An evaluation's snapshot records its inputs (``"inputs"``: argument path -> the *key* of the
evaluation an object there came from, ``memolab.inputs.upstream``) and, for a result holding arrays or
tensors, its digest as an argument (``"value_digest"``). The ``inputs`` and ``outputs`` tables
index them (kept by triggers: ``schema.LINEAGE_TRIGGERS``), so "what used #3" and "what
follows from clearing `prepare`" are indexed reads.

An edge names its upstream evaluation by key, not by id: ids are one store's (a row adopted
from the team store, or pulled, has another id on every machine), a key is the same
everywhere. Reading an edge resolves the key in this index: the evaluation stored under it
now, or none ("not stored any more": cleared, collected by ``gc``, or never pulled here).
Nothing here raises for an edge that does not resolve or a snapshot that does not parse:
lineage is information, and a damaged row is judged where it is loaded.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ..key import Key, key_of
from .inlist import chunks, placeholders
from .schema import has_table

__all__ = ["recorded_snapshot", "recorded_inputs", "inputs_of", "used_by", "downstream", "by_content", "graph", "resolve"]


#: the most evaluations the lineage graph of the dashboard collects (it walks both ways)
GRAPH_MAX = 400


def recorded_snapshot(row: dict[str, Any]) -> dict[str, Any]:
    """``row``'s snapshot as a dict ({} when it does not parse)."""
    try:
        snap = json.loads(row.get("snapshot") or "{}")
    except (ValueError, TypeError):
        return {}
    return snap if isinstance(snap, dict) else {}


#: input edges read from one snapshot at most (memolab records at most 256: more is not its row)
_READ_MAX = 1024


def shown(text: str, limit: int = 300) -> str:
    """``text`` as it may be printed: a path or name from a row another machine wrote could hold
    terminal control sequences; those are escaped, and a very long one is cut."""
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def recorded_inputs(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The input edges ``row``'s snapshot records, each ``{"path", "key", "by", "store"?}``;
    entries that are not well formed are left out."""
    got = recorded_snapshot(row).get("inputs")
    out: list[dict[str, Any]] = []
    if not isinstance(got, list):
        return out
    for e in got[:_READ_MAX]:
        if not isinstance(e, dict):
            continue
        key = tuple(e.get(k) for k in ("fn", "code", "args", "schema"))
        if not isinstance(e.get("path"), str) or not all(isinstance(k, str) for k in key):
            continue
        edge = {"path": e["path"], "key": key, "by": e.get("by") if isinstance(e.get("by"), str) else "object"}
        if isinstance(e.get("store"), str):
            edge["store"] = e["store"]
        out.append(edge)
    return out


def _conn(index: Any) -> sqlite3.Connection | None:
    conn = getattr(index, "conn", None)
    return conn() if conn is not None else None


def resolve(index: Any, keys: Iterable[Key]) -> dict[Key, tuple[int, str]]:
    """key -> (id, status) of the evaluation stored under each key in this index (those there are)."""
    c = _conn(index)
    out: dict[Key, tuple[int, str]] = {}
    if c is None:
        return out
    for key in dict.fromkeys(tuple(k) for k in keys):
        r = c.execute("SELECT id, status FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=?",
                      key).fetchone()
        if r is not None:
            out[key] = (int(r[0]), r[1])  # type: ignore[index]
    return out


def _edge(key: Key, found: tuple[int, str] | None, **more: Any) -> dict[str, Any]:
    e: dict[str, Any] = {**more, "function": key[0], "evaluation": found[0] if found else None}
    if found is None:
        e["missing"] = True  # cleared, collected, or never here
    elif found[1] != "done":
        e["status"] = found[1]
    e["code"] = key[1]
    return e


def inputs_of(index: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
    """``row``'s inputs as shown: ``{"path", "function", "evaluation" (id here, or None), "code",
    "by", "missing"?, "status"?, "store"?}``, by path."""
    edges = recorded_inputs(row)
    found = resolve(index, [e["key"] for e in edges if "store" not in e])
    out = []
    for e in sorted(edges, key=lambda e: e["path"]):
        more = {"path": shown(e["path"]), "by": shown(e["by"], 20)}
        if "store" in e:
            more["store"] = shown(e["store"])
        edge = _edge(e["key"], found.get(e["key"]) if "store" not in e else None, **more)
        edge["function"] = shown(edge["function"])
        out.append(edge)
    return out


def used_by(index: Any, key: Key) -> list[dict[str, Any]]:
    """The evaluations whose inputs name ``key``: ``{"function", "evaluation", "path", "by", "status"?}``, oldest first."""
    c = _conn(index)
    if c is None or not has_table(c, "inputs"):
        return []
    rows = c.execute("SELECT e.id, e.fn, i.path, e.status, i.how FROM inputs i JOIN evaluations e "
                     "ON e.id = i.evaluation WHERE i.fn=? AND i.code=? AND i.args=? AND i.schema=? ORDER BY e.id, i.path",
                     tuple(key))
    out = []
    for i, fn, path, status, how in rows:
        e = {"function": shown(fn), "evaluation": int(i), "path": shown(path), "by": shown(how or "object", 20)}
        if status != "done":
            e["status"] = status
        out.append(e)
    return out


def _keys_of(c: sqlite3.Connection, ids: Sequence[int]) -> dict[int, Key]:
    out: dict[int, Key] = {}
    for q, part in chunks(ids):
        for r in c.execute(f"SELECT id, fn, code, args, schema FROM evaluations WHERE id IN ({q})", part):
            out[int(r[0])] = Key._make(r[1:])
    return out


def _users(c: sqlite3.Connection, keys: Iterable[Key]) -> set[int]:
    found: set[int] = set()
    for key in keys:
        found.update(int(r[0]) for r in c.execute(
            "SELECT evaluation FROM inputs WHERE fn=? AND code=? AND args=? AND schema=?", key))
    return found


def downstream(index: Any, ids: Iterable[int]) -> list[int]:
    """Every evaluation built on ``ids``, transitively (those of ``ids`` themselves left out), in the
    order they were found (nearest first)."""
    c = _conn(index)
    start = set(int(i) for i in ids)
    if c is None or not start or not has_table(c, "inputs"):
        return []
    seen = set(start)
    order: list[int] = []
    frontier = sorted(start)
    while frontier:
        users = _users(c, _keys_of(c, frontier).values()) - seen
        frontier = sorted(users)
        seen.update(users)
        order.extend(frontier)
    return order


def by_content(index: Any, digests: Iterable[str]) -> dict[str, tuple[int, Key]]:
    """digest -> (id, key) of the newest stored evaluation whose result, as an argument, has that digest."""
    c = _conn(index)
    want = list(dict.fromkeys(digests))
    out: dict[str, tuple[int, Key]] = {}
    if c is None or not want or not has_table(c, "outputs"):
        return out
    for q, part in chunks(want):  # (a digest is in one chunk: its newest row still comes last)
        for d, i, *key in c.execute(
                f"SELECT o.digest, e.id, e.fn, e.code, e.args, e.schema FROM outputs o JOIN evaluations e "
                f"ON e.id = o.evaluation WHERE o.digest IN ({q}) AND e.status='done' ORDER BY e.id", part):
            out[d] = (int(i), Key._make(key))  # 4 columns; the newest last: it stays
    return out


def _code_changed(c: sqlite3.Connection, rows: dict[int, dict[str, Any]]) -> set[int]:
    """Those of ``rows`` whose code differs from the function's evaluation stored just before them."""
    out: set[int] = set()
    for i, r in rows.items():
        prev = c.execute("SELECT code FROM evaluations WHERE fn=? AND schema=? AND (finished < ? OR "
                         "(finished = ? AND id < ?)) ORDER BY finished DESC, id DESC LIMIT 1",
                         (r["fn"], r["schema"], r["finished"] or 0, r["finished"] or 0, i)).fetchone()
        if prev is not None and prev[0] != r["code"]:
            out.add(i)
    return out


_GRAPH_COLS = ("id", "fn", "code", "args", "schema", "status", "finished", "duration", "snapshot")


def graph(index: Any, ids: Iterable[int], limit: int = GRAPH_MAX) -> dict[str, Any]:
    """The lineage around evaluations ``ids`` (their inputs and users, transitively, at most
    ``limit`` evaluations): ``{"nodes": [{"id", "fn", "code", "status", "finished", "duration",
    "result", "code_changed", "selected"}], "edges": [{"from", "to", "path", "by"}], "missing":
    [{"to", "path", "function"}], "truncated"}``; nodes newest first."""
    c = _conn(index)
    chosen = [int(i) for i in ids]
    nodes: dict[int, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    if c is None:
        return {"nodes": [], "edges": [], "missing": [], "truncated": False}
    inputs_table = has_table(c, "inputs")
    todo = list(dict.fromkeys(chosen))
    truncated = False
    expanded: set[int] = set()
    while todo:
        batch, todo = todo[:200], todo[200:]
        fresh = [i for i in batch if i not in nodes]
        if fresh:
            for r in c.execute(f"SELECT {','.join(_GRAPH_COLS)} FROM evaluations WHERE id IN ({placeholders(len(fresh))})",
                               fresh):
                nodes[int(r[0])] = dict(zip(_GRAPH_COLS, r, strict=False))
        for i in batch:
            row = nodes.get(i)
            if row is None or i in expanded:
                continue
            expanded.add(i)
            if len(nodes) >= limit:
                truncated = True
                continue
            ins = recorded_inputs(row)
            found = resolve(index, [e["key"] for e in ins])
            for e in ins:
                up = found.get(e["key"])
                if up is None or "store" in e:
                    missing.append({"to": i, "path": e["path"], "function": e["key"][0]})
                    continue
                edges.append({"from": up[0], "to": i, "path": e["path"], "by": e["by"]})
                todo.append(up[0])
            if inputs_table:
                key = key_of(row)
                for u in used_by(index, key):
                    edges.append({"from": i, "to": u["evaluation"], "path": u["path"], "by": u["by"]})
                    todo.append(u["evaluation"])
    known = set(nodes)
    edges = [dict(t) for t in {tuple(sorted(e.items())) for e in edges if e["from"] in known and e["to"] in known}]
    edges.sort(key=lambda e: (e["to"], e["path"], e["from"]))
    changed = _code_changed(c, nodes)
    out_nodes = []
    for i, r in sorted(nodes.items(), key=lambda kv: (-(kv[1]["finished"] or 0), -kv[0])):
        snap = recorded_snapshot(r)
        out_nodes.append({"id": i, "fn": r["fn"], "code": r["code"], "status": r["status"], "finished": r["finished"],
                          "duration": r["duration"], "result": snap.get("result_summary") or snap.get("result"),
                          "code_changed": i in changed, "selected": i in chosen})
    return {"nodes": out_nodes, "edges": edges, "missing": missing, "truncated": truncated}
