"""A function's runs filtered, sorted and grouped by an argument, in SQLite, over every run.

The dashboard's filter words on an argument (``lr<=0.01``, ``opt=adam``, ``seed!=3``) and its sort by
an argument column mean what they meant when the page applied them to the runs it held
(views.js ``compileFilter``, app.js ``argValue``):

* a number compares as a number with the word's value read as JavaScript's ``Number()`` reads it
  (``1e-3``, ``.5``, `` 7 ``; a value that is no number compares with no number); any other value (a
  text, ``true``/``false``, a list as its JSON) compares as text with the word's text;
* ``=`` is either; ``!=`` is neither, and a run without the argument passes it (and no other);
* sorted, numbers come first (by value), then texts (by their bytes), then the runs without the
  argument (newest first, in either direction); runs of one value are newest first, and the
  descending sort is the ascending one reversed (so one index serves both).

Where the store keeps ``run_args`` (``argindex``) a filter is an index range (the numbers' range and
the texts' range of that argument) and a sort a walk of the argument's values in order, so a page
reads its rows and what it skips, not the function's million runs; the totals are kept counts, or
a count over the matching range. Elsewhere (an older store read as it is) the same conditions are
written on ``json_extract`` of each run: one pass of SQLite.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from . import argindex, counts

#: a filter word on an argument, as the page's own (views.js ``compileFilter``)
_WORD = re.compile(r"^([\w./-]+)(<=|>=|!=|=|<|>)(.+)$", re.ASCII | re.DOTALL)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_BASED = {"0x": 16, "0o": 8, "0b": 2}


@dataclass(frozen=True)
class ArgFilter:
    """``name op value``: ``lr<=0.01`` is ``ArgFilter("lr", "<=", "0.01")``."""

    name: str
    op: str
    value: str


def parse(word: str) -> ArgFilter | None:
    """A filter word (``lr<=0.01``), or None where it is none."""
    m = _WORD.match(word)
    return ArgFilter(m.group(1), m.group(2), m.group(3)) if m else None


def js_number(text: str) -> float | None:
    """``Number(text)`` as JavaScript reads it (None: NaN)."""
    t = text.strip()
    if not t:
        return 0.0
    if _NUMBER.fullmatch(t):
        return float(t)
    if t in ("Infinity", "+Infinity", "-Infinity"):
        return -math.inf if t[0] == "-" else math.inf
    base = _BASED.get(t[:2].lower())
    if base:
        try:
            return float(int(t[2:], base))
        except ValueError:
            return None
    return None


def json_value(name: str, row: str = "r") -> str:
    """SQL: the value ``argindex`` keeps of the argument ``name`` of the runs row ``row``, read from
    its JSON (NULL where it has none)."""
    h = f"{row}.hparams"
    p = "'$." + ".".join('"' + x.replace('"', "").replace("'", "''") + '"' for x in name.split(".")) + "'"
    return (f"(CASE WHEN json_valid({h}) THEN CASE json_type({h}, {p}) WHEN 'true' THEN 'true' "
            f"WHEN 'false' THEN 'false' WHEN 'null' THEN NULL WHEN 'object' THEN "
            f"CASE WHEN json_extract({h}, {p}) = '{{}}' THEN '{{}}' END ELSE json_extract({h}, {p}) END END)")


def _parts(f: ArgFilter, v: str, numbers: bool = True, texts: bool = True) -> tuple[str, list[Any]]:
    """SQL true where the value ``v`` passes ``f`` (``=`` and the orders; ``!=`` is ``NOT`` of ``=``):
    each part an index range of ``v`` (numbers sort before every text, ``''`` the least text).
    ``numbers``/``texts``: whether values of that kind exist (a part that can match none is left
    out, so that the rest is one range)."""
    op = "=" if f.op == "!=" else f.op
    out: list[str] = []
    params: list[Any] = []
    num = js_number(f.value)
    # (each range bounded by the other kind only where values of that kind exist: one bound fewer
    # lets SQLite take the filter's two words on one argument as one range)
    if numbers and num is not None and not math.isnan(num):
        out.append(f"({v} {op} ?" + (f" AND {v} < ''" if texts and op in (">", ">=") else "") + ")")
        params.append(num)
    if texts:
        out.append("(" + (f"{v} >= '' AND " if numbers and op in ("<", "<=") else "") + f"{v} {op} ?)")
        params.append(f.value)
    return ("(" + " OR ".join(out) + ")" if out else "0"), params


def _kinds(c: Any, fn: str, name: str) -> tuple[bool, bool]:
    """Whether ``fn``'s runs hold numbers, texts as values of ``name`` (two seeks)."""
    base = "SELECT 1 FROM run_args WHERE fn=? AND name=? AND value {} '' LIMIT 1"
    return (c.execute(base.format("<"), (fn, name)).fetchone() is not None,
            c.execute(base.format(">="), (fn, name)).fetchone() is not None)


def condition(c: Any, fn: str, f: ArgFilter, indexed: bool) -> tuple[str, list[Any]]:
    """SQL on the runs row ``r``: true where it passes ``f``."""
    if indexed:
        sql, params = _parts(f, "a.value", *_kinds(c, fn, f.name))
        sub = f"r.id IN (SELECT a.run FROM run_args a WHERE a.fn = ? AND a.name = ? AND {sql})"
        return ("NOT " + sub if f.op == "!=" else sub), [fn, f.name, *params]
    sql, params = _parts(f, json_value(f.name))
    return (f"NOT COALESCE({sql}, 0)" if f.op == "!=" else sql), params


def vacuous_script(c: Any, fn: str, script: str | None) -> bool:
    """Whether keeping the runs of ``script`` keeps every run of ``fn`` (no script asked, or the
    function's only one)."""
    if script is None:
        return True
    per = counts.per_script(c, fn)
    return per is not None and set(per) == {script or None}


def window(c: Any, fn: str, where: list[str], params: list[Any], args: list[ArgFilter], sort: str,
           descending: bool, limit: int, offset: int, plain: bool, indexed: bool) -> tuple[int, list[int]] | None:
    """(total, the page's run ids) of ``fn``'s runs passing ``where`` (on ``r``; ``plain``: it says
    no more than ``r.fn = fn``) and ``args``, sorted by ``sort`` (``started``, ``m:TAG``, ``a:NAME``),
    driven by ``run_args`` (``indexed``: up to date, ``argindex.sync``): None where it cannot be (not
    kept, or neither a sort by an argument nor a filter that keeps runs with an argument's value)."""
    if not indexed:
        return None
    by = sort[2:] if sort.startswith("a:") else None
    positive = [f for f in args if f.op != "!="]
    name = by or (positive[0].name if positive else None)
    if name is None:
        return None
    own = [f for f in args if f.name == name]
    conds, cparams = ["ra.fn = ?", "ra.name = ?"], [fn, name]
    kinds = _kinds(c, fn, name)
    for f in own:
        sql, p = _parts(f, "ra.value", *kinds)
        conds.append(f"NOT COALESCE({sql}, 0)" if f.op == "!=" else sql)
        cparams += p
    rconds, rparams = list(where), list(params)
    for f in args:
        if f.name != name:
            sql, p = condition(c, fn, f, True)
            rconds.append(sql)
            rparams += p
    joined = not plain or len(rconds) > len(where)
    body = "FROM run_args ra" + (" CROSS JOIN runs r ON r.id = ra.run" if joined else "")
    allc, allp = conds + (rconds if joined else []), cparams + (rparams if joined else [])
    if sort.startswith("m:"):
        body += " LEFT JOIN scalar_tags st ON st.run = ra.run AND st.tag = ?"
        allp = [sort[2:], *allp]
        order = f"st.last_value IS NULL, st.last_value {'DESC' if descending else 'ASC'}, ra.started DESC, ra.run DESC"
    elif by:
        order = "ra.value DESC, ra.started ASC, ra.run ASC" if descending else "ra.value ASC, ra.started DESC, ra.run DESC"
    else:
        order = "ra.started DESC, ra.run DESC" if descending else "ra.started ASC, ra.run ASC"
    stmt = f"{body} WHERE {' AND '.join(allc)}"
    kept = argindex.counted(c, fn, name) if not joined and len(conds) == 2 else None
    with_arg = kept[0] if kept else int(c.execute(f"SELECT COUNT(*) {stmt}", allp).fetchone()[0])
    ids = [i for (i,) in c.execute(f"SELECT ra.run {stmt} ORDER BY {order} LIMIT ? OFFSET ?",
                                   [*allp, limit, offset])] if offset < with_arg else []
    if not by or any(f.name == by for f in positive):
        return with_arg, ids
    # sorted by an argument: the runs without it follow (newest first), as the page sorted them
    lacking = [*rconds, f"{json_value(by)} IS NULL"]
    tail_where = " AND ".join(lacking)
    all_runs = counts.runs(c, fn) if kept and plain else None
    tail = all_runs - with_arg if all_runs is not None else int(
        c.execute(f"SELECT COUNT(*) FROM runs r WHERE {tail_where}", rparams).fetchone()[0])
    if len(ids) < limit and tail:
        ids += [i for (i,) in c.execute(f"SELECT r.id FROM runs r WHERE {tail_where} ORDER BY r.started DESC, "
                                        "r.id DESC LIMIT ? OFFSET ?", [*rparams, limit - len(ids), max(0, offset - with_arg)])]
    return with_arg + tail, ids


def json_order(name: str, descending: bool) -> str:
    """ORDER BY of a sort by the argument ``name`` where ``run_args`` is not kept (as ``window``)."""
    v = json_value(name)
    if not descending:
        return f"{v} IS NULL, {v} ASC, r.started DESC, r.id DESC"
    # (the runs without it newest first in either direction)
    return (f"{v} IS NULL, {v} DESC, CASE WHEN {v} IS NULL THEN -r.started ELSE r.started END, "
            f"CASE WHEN {v} IS NULL THEN -r.id ELSE r.id END")


def groups(c: Any, fn: str, by: str, tag: str, limit: int, indexed: bool) -> tuple[int, list[tuple[Any, ...]]] | None:
    """(total, rows (value, runs, n, mean, mean of squares, min, max)) of ``fn``'s runs grouped by
    ``by``, from ``run_args``: the first ``limit`` values by a seek each, each group's runs by a
    range; None where not kept. The runs without the argument (the null group, first) are found
    by a pass over the function's runs, made only where the kept counts say there are some."""
    kept = argindex.counted(c, fn, by) if indexed else None
    if kept is None:
        return None
    with_arg, values = kept
    n_runs = counts.runs(c, fn)
    if n_runs is None:
        n_runs = int(c.execute("SELECT COUNT(*) FROM runs WHERE fn=?", (fn,)).fetchone()[0])
    stats = ("COUNT(*), COUNT(st.last_value), AVG(st.last_value), AVG(st.last_value * st.last_value), "
             "MIN(st.last_value), MAX(st.last_value)")
    out: list[tuple[Any, ...]] = []
    if n_runs > with_arg:
        out += c.execute(f"SELECT NULL, {stats} FROM runs r LEFT JOIN scalar_tags st ON st.run = r.id AND st.tag = ? "
                         f"WHERE r.fn = ? AND {json_value(by)} IS NULL", (tag, fn)).fetchall()
    want = max(0, limit - len(out))
    if want:
        out += c.execute(
            "WITH RECURSIVE v(x) AS (SELECT (SELECT value FROM run_args WHERE fn = ?1 AND name = ?2 ORDER BY value "
            "LIMIT 1) UNION ALL SELECT (SELECT value FROM run_args WHERE fn = ?1 AND name = ?2 AND value > v.x "
            "ORDER BY value LIMIT 1) FROM v WHERE v.x IS NOT NULL LIMIT ?3) "
            f"SELECT v.x, {stats} FROM v CROSS JOIN run_args ra ON ra.fn = ?1 AND ra.name = ?2 AND ra.value = v.x "
            "LEFT JOIN scalar_tags st ON st.run = ra.run AND st.tag = ?4 WHERE v.x IS NOT NULL GROUP BY v.x "
            "ORDER BY v.x", (fn, by, want, tag)).fetchall()
    return values + (1 if n_runs > with_arg else 0), out
