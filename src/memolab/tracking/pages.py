"""A window of a function's runs, sorted and filtered in SQLite: what the dashboard asks for.

A function evaluated a million times has a million runs; a page shows a few dozen. ``window``
returns one page of them (``limit`` rows from ``offset``) and how many there are in all, sorted
by when they started (the index ``runs_fn``), or by the final value of a scalar (``scalar_tags``),
filtered by status, tag or an argument's value: the sort and the filters run in SQLite, and only
the page's rows are read into Python and built (``query.runs`` by ids, labelled among the
function's newest runs: ``query.labelled``).

What each costs at N runs of the function: by ``started``, unfiltered, the page (an index range;
the total is one ``COUNT`` over the same index, O(N) in SQLite's C loop, a few ms per 100k rows);
sorted by a metric or filtered, one pass of SQLite over the function's runs (no Python object per
run), then the page. Evaluations stored without a run are listed in the unfiltered, time-sorted
window only (they have no metric, status of their own or tags of a run).
"""
from __future__ import annotations

from typing import Any

from ..store.inlist import placeholders
from . import argindex, argpages, query
from .argpages import ArgFilter

#: the most rows one page may ask for
MAX_LIMIT = 5000


def window(index: Any, fn: str, script: str | None = None, limit: int = 200, offset: int = 0,
           sort: str = "started", descending: bool = True, status: list[str] | None = None,
           tag: str | None = None, arg: tuple[str, str] | None = None, args: list[ArgFilter] | None = None,
           code: str | None = None) -> dict[str, Any]:
    """{"total", "offset", "limit", "rows"}: one page of ``fn``'s runs (``script``: as ``query.runs``).

    ``sort``: ``started``, ``m:TAG`` (the tag's final value; runs without it last) or ``a:NAME``
    (an argument's value: ``argpages``).
    ``status``: keep these (``lost`` is a ``running`` run whose process is gone: told apart on the
    page's rows, so a page filtered by it may come back shorter than ``limit``).
    ``tag``: runs carrying it (or whose evaluation does). ``args``: filters on arguments
    (``lr<=0.01``: ``argpages.ArgFilter``); ``arg``: (``cfg.optim.lr``, ``"0.1"``), one ``=`` filter.
    ``code``: runs whose code digest starts with these hex digits."""
    limit = max(0, min(int(limit), MAX_LIMIT))
    offset = max(0, int(offset))
    filters = [*(args or []), *([ArgFilter(arg[0], "=", arg[1])] if arg else [])]
    if sort == "started" and descending and not status and not tag and not filters and not code:
        rows = query.runs(index, fn, limit=offset + limit, script=script or None)[offset:]
        return {"total": query.count_rows(index, fn, script or None), "offset": offset, "limit": limit, "rows": rows}
    c = query.ready(index)
    where, params = ["r.fn=?"], [fn]
    if not argpages.vacuous_script(c, fn, script):  # (a script's function run by that script only: every run)
        where.append("r.script=?" if script else "r.script IS NULL")
        params += [script] if script else []
    if status:
        stored = sorted({"running" if s == "lost" else s for s in status})
        where.append(f"r.status IN ({placeholders(len(stored))})")
        params += stored
    if tag:
        where.append("(r.id IN (SELECT run FROM annotations WHERE kind='tag' AND text=? AND run IS NOT NULL) OR "
                     "r.eval_id IN (SELECT evaluation FROM annotations WHERE kind='tag' AND text=? "
                     "AND evaluation IS NOT NULL))")
        params += [tag, tag]
    if code:
        where.append("lower(r.code) LIKE ?")
        params.append("".join(ch for ch in code.lower() if ch in "0123456789abcdef") + "%")
    if tag and not _has_annotations(c):
        return {"total": 0, "offset": offset, "limit": limit, "rows": []}
    # sorted by an argument, or filtered to the runs with some value of one: a range of ``run_args``
    indexed = bool(filters or sort.startswith("a:")) and argindex.sync(index)
    got = argpages.window(c, fn, where, params, filters, sort, descending, limit, offset, len(where) == 1, indexed)
    if got is not None:
        total, ids = got
    else:
        for f in filters:
            sql, p = argpages.condition(c, fn, f, indexed)
            where.append(sql)
            params += p
        # (equal starts in the order of ``runs_fn``'s entries: pages never share or skip a run)
        join, order = "", "r.started DESC, r.id DESC" if descending else "r.started ASC, r.id ASC"
        if sort.startswith("m:"):
            join = " LEFT JOIN scalar_tags st ON st.run = r.id AND st.tag = ?"
            params = [sort[2:], *params]
            order = f"st.last_value IS NULL, st.last_value {'DESC' if descending else 'ASC'}, r.started DESC, r.id DESC"
        elif sort.startswith("a:"):
            order = argpages.json_order(sort[2:], descending)
        body = f"FROM runs r{join} WHERE {' AND '.join(where)}"
        total = int(c.execute(f"SELECT COUNT(*) {body}", params).fetchone()[0])
        ids = [i for (i,) in c.execute(f"SELECT r.id {body} ORDER BY {order} LIMIT ? OFFSET ?",
                                       [*params, limit, offset])]
    got_rows = {r["id"]: r for r in query.labelled(index, query.runs(index, ids=ids))} if ids else {}
    rows = [got_rows[i] for i in ids if i in got_rows]
    if status:
        rows = [r for r in rows if r["status"] in status]
    return {"total": total, "offset": offset, "limit": limit, "rows": rows}


def _has_annotations(c: Any) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE name='annotations'").fetchone() is not None \
        or c.execute("SELECT 1 FROM temp.sqlite_master WHERE name='annotations'").fetchone() is not None


def hparams_window(index: Any, fn: str, script: str | None = None, limit: int = 200) -> dict[str, Any]:
    """``query.hparams`` of ``fn``'s newest ``limit`` runs, with ``total``: the HParams tab's rows."""
    page = window(index, fn, script, limit)
    rs = [r for r in page["rows"] if isinstance(r["id"], int)]
    rows = [{"id": r["id"], "status": r["status"], "eval_id": r["eval_id"], "code": r["code"], "name": r.get("name"),
             "label": r.get("label"), "hparams": r["hparams"], "metrics": r.get("metrics") or {}} for r in rs]
    return {"hparams": sorted({k for r in rows for k in r["hparams"]}),
            "metrics": sorted({k for r in rows for k in r["metrics"]}), "rows": rows, "total": page["total"]}


def _scope(fn: str, script: str | None) -> tuple[str, list[Any]]:
    """The WHERE of ``fn``'s runs (of one script; ``""``: of none), as ``window`` filters them."""
    where, params = "r.fn=?", [fn]
    if script:
        where += " AND r.script=?"
        params.append(script)
    elif script == "":
        where += " AND r.script IS NULL"
    return where, params


def best(index: Any, fn: str, tag: str, lower: bool, script: str | None = None) -> dict[str, Any]:
    """``{"tag", "run", "value"}``: the run of ``fn`` with the best final value of ``tag`` (the lowest
    when ``lower``) among every run that logged it, not only a page's.

    Ties go to the newest run (the first of them in the page's newest-first order, as the page's
    own ``bestOf`` picks); a NaN is never best (SQLite keeps it as NULL). With the index
    ``scalar_tags_value`` (tracking/schema.py) the tag's final values are walked in order from the
    best and the walk stops at the first of ``fn``'s runs: O(1) for a store of one function's runs,
    O(runs of other functions that logged a better value) at worst. A store without it yet (read
    as it is, before its first write by this version): one pass over the function's runs."""
    c = query.ready(index)
    where, params = _scope(fn, script)
    indexed = c.execute("SELECT 1 FROM sqlite_master WHERE type='index' AND name='scalar_tags_value'").fetchone()
    # CROSS JOIN: SQLite keeps the left table the outer loop (the index's value order)
    body = ("FROM scalar_tags st CROSS JOIN runs r ON r.id = st.run" if indexed
            else "FROM runs r JOIN scalar_tags st ON st.run = r.id")
    row = c.execute(f"SELECT r.id, st.last_value {body} WHERE st.tag = ? AND {where} AND st.last_value IS NOT NULL "
                    f"ORDER BY st.last_value {'ASC' if lower else 'DESC'}, r.started DESC, r.id DESC LIMIT 1",
                    [tag, *params]).fetchone()
    return {"tag": tag, "run": row[0] if row else None, "value": row[1] if row else None}


#: the most groups one answer lists (an argument every run has its own value of, a seed, would
#: otherwise send one group per run): the first in value order, and how many there are
MAX_GROUPS = 200


def groups(index: Any, fn: str, by: str, tag: str, script: str | None = None,
           limit: int = MAX_GROUPS) -> dict[str, Any]:
    """``{"by", "tag", "total", "groups": [{"value", "runs", "n", "mean", "std", "min", "max"}]}``: ``fn``'s runs
    grouped by the value of the argument ``by`` (a flattened name: ``cfg.optim.lr``; runs without it:
    ``value`` null), with the count, mean, standard deviation (population), min and max of the final
    value of ``tag`` over the ``n`` runs of the group that logged it (``runs``: all of the group's);
    the first ``limit`` groups, of ``total``.

    Where the store keeps ``run_args`` (``argindex``): the first ``limit`` values by one index seek
    each and each group's runs by a range of it, so what is read is the groups shown (and, only
    where some runs lack the argument, one pass to find those); the total is a kept count. Elsewhere
    (an older store read as it is; a script's function run by several scripts): one pass of SQLite
    over the function's runs. Groups in order of their value (SQLite's order: numbers before text;
    ``true``/``false`` and lists as the texts the page shows)."""
    c = query.ready(index)
    kept = argpages.groups(c, fn, by, tag, max(1, limit), argindex.sync(index)) \
        if argpages.vacuous_script(c, fn, script) else None
    if kept is not None:
        total, rows = kept
        if rows and rows[0][0] is None and not rows[0][1]:  # (no run lacks it after all: a key with a dot)
            total, rows = total - 1, rows[1:]
    else:
        where, params = _scope(fn, script)
        value = argpages.json_value(by)
        got = c.execute(
            f"SELECT {value} AS g, COUNT(*), COUNT(st.last_value), "
            "AVG(st.last_value), AVG(st.last_value * st.last_value), MIN(st.last_value), MAX(st.last_value), "
            "COUNT(*) OVER () "
            f"FROM runs r LEFT JOIN scalar_tags st ON st.run = r.id AND st.tag = ? WHERE {where} "
            "GROUP BY g ORDER BY g LIMIT ?", [tag, *params, max(1, limit)]).fetchall()
        total, rows = (got[0][7] if got else 0), [g[:7] for g in got]
    out = []
    for g, runs, n, mean, sq, lo, hi in rows:
        std = max(0.0, sq - mean * mean) ** 0.5 if n else None
        out.append({"value": g, "runs": runs, "n": n, "mean": mean, "std": std, "min": lo, "max": hi})
    return {"by": by, "tag": tag, "total": total, "groups": out}
