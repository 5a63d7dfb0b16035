"""One id per thing, the same in the dashboard and on the command line.

An evaluation is ``#12`` (``12``, ``e12``); a run is its 52-bit id, or the start of it that tells
it apart from every other run of the store, shown with an ``r`` (``r147562``), as git shortens
commits. The dashboard shows exactly these (``short_length`` is served to it), and every command
that takes an id (``show``, ``tag``, ``note``) takes them back (``resolve``): bare digits are an
evaluation first, then the run of that id, then the one run whose id starts with them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..store.inlist import chunks
from ..store.schema import has_runs
from .common import PROBLEM, USAGE, CliError, expired_among, expired_of

#: the fewest digits of a run id shown (``memolab runs``, the dashboard)
SHORT_MIN = 6


def _conn(store: Any) -> Any:
    """The index's connection with the log tables in their current shape (an older store's runs
    table lacks columns: ``query.ready`` shims them on a read-only one)."""
    from ..tracking import query

    return query.ready(store.index)


def short_length(c: Any, among: Sequence[int] | None = None) -> int:
    """Digits of a run id that tell every run of the store apart (at least ``SHORT_MIN``).

    ``among``: the runs a table shows (``memolab runs --limit N``): the digits that tell each of
    them apart from every run of the store, found by range counts over the primary key (what is
    read grows with the rows shown, not with the store's runs)."""
    if not has_runs(c):
        return SHORT_MIN
    if among is not None:
        return _short_among(c, [int(i) for i in among])
    from ..tracking import counts

    kept = counts.digits(c)  # kept by a trigger as runs are written: one row, not every id sorted
    if kept is not None:
        return max(SHORT_MIN, kept)
    return max(SHORT_MIN, counts.shared_digits(c) + 1)  # a store read as it is: from every id


def _short_among(c: Any, ids: list[int]) -> int:
    n = SHORT_MIN
    for i in ids:
        digits = str(i)
        while n < len(digits):
            # the ids whose decimal text starts with these n digits: one range per length of id
            p = int(digits[:n])
            ranges = [(p * 10 ** (d - n), (p + 1) * 10 ** (d - n) - 1) for d in range(n, 20)]
            ranges = [(lo, min(hi, 2 ** 63 - 1)) for lo, hi in ranges if lo < 2 ** 63]
            sql = " OR ".join("id BETWEEN ? AND ?" for _ in ranges)
            if c.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE {sql} LIMIT 2)",
                         [x for r in ranges for x in r]).fetchone()[0] < 2:
                break
            n += 1
    return n


def _runs_starting(c: Any, digits: str) -> list[int]:
    if not has_runs(c):
        return []
    return [i for (i,) in c.execute("SELECT id FROM runs WHERE CAST(id AS TEXT) LIKE ? ORDER BY id LIMIT 6",
                                    (digits + "%",))]


def resolve(store: Any, text: str) -> tuple[str, int]:
    """``("evaluation", id)`` or ``("run", id)`` for an id as the dashboard and the CLI show it:
    ``12``, ``#12``, ``e12`` (an evaluation), ``r1475626`` or ``run …`` digits (a run, any unique
    start of its id), or bare digits (an evaluation, else that run, else the run starting so)."""
    t = text.strip()
    for prefix in ("run ", "run", "r"):
        if t.lower().startswith(prefix) and t[len(prefix):].strip().rstrip("…").isdigit():
            kind, digits = "run", t[len(prefix):].strip().rstrip("…")
            break
    else:
        kind, digits = "any", t.lstrip("#")
        if t[:1] in ("#", "e") and t.lstrip("#e").isdigit():
            kind, digits = "evaluation", t.lstrip("#e")
    if not digits.isdigit() or len(digits) > 19 or not 0 < int(digits) < 2 ** 63:
        raise CliError(PROBLEM, f"not an evaluation or run id: {text!r} (`memolab ls FUNC` and `memolab runs` list them)")
    n = int(digits)
    c = _conn(store)
    if kind in ("evaluation", "any"):
        if c.execute("SELECT 1 FROM evaluations WHERE id=?", (n,)).fetchone():
            return "evaluation", n
        if kind == "evaluation":
            raise CliError(PROBLEM, f"no evaluation #{n} in {store.root}")
    if has_runs(c) and c.execute("SELECT 1 FROM runs WHERE id=?", (n,)).fetchone():
        return "run", n
    found = _runs_starting(c, digits)
    if len(found) > 1:
        listed = ", ".join(str(i) for i in found[:5]) + (", …" if len(found) > 5 else "")
        raise CliError(USAGE, f"{digits} is the start of several run ids ({listed}): give more digits")
    if found:
        return "run", found[0]
    raise CliError(PROBLEM, f"no evaluation #{n} (nor run {digits}) in {store.root}")


# -- a script's functions: a.py:train -------------------------------------------------------------
def split_script(store: Any, name: str) -> tuple[str, Any]:
    """``a.py:train`` (as ``ls``, ``runs`` and the dashboard name a script's function) ->
    (``__main__:train``, the script's absolute path); any other name -> (its symbol, None).
    The resolver is ``tracking.resolve``, the one ``memolab.runs`` uses."""
    from .common import resolve_name

    r = resolve_name(store, name)
    return r.fn, r.script


def eval_ids_of_script(store: Any, fn: str, script: str) -> list[int]:
    """The stored evaluations of ``fn`` that a run of ``script`` produced."""
    c = _conn(store)
    return [i for (i,) in c.execute("SELECT DISTINCT e.id FROM runs r JOIN evaluations e ON e.id = r.eval_id "
                                    "WHERE r.fn=? AND r.script=?", (fn, script))]


def function_rows(store: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``Index.functions()`` rows with each script's ``__main__`` function apart (``label``
    ``a.py:train``, ``b.py:train``, and ``script``), as the dashboard lists them."""
    from ..tracking import counts, query

    c = _conn(store)
    if not has_runs(c) or not any(r["fn"].startswith("__main__:") for r in rows):
        return rows
    entries: dict[str, list[dict[str, Any]]] = {}
    for e in query.function_entries(store.index):
        if e["script"] is not None and e["evaluations"]:
            entries.setdefault(e["fn"], []).append(e)
    kept = counts.available(c)  # ``rows`` are then the function's kept totals (Index.functions)
    out = []
    for r in rows:
        parts = entries.get(r["fn"])
        if not parts:
            out.append(r)
            continue
        if kept:  # summed in SQL per script; the rest is the kept totals less the scripts' share
            sums = [_summed_sql(c, r["fn"], [e["script"]]) for e in parts]
            out.extend({**m, "label": e["label"], "script": e["script"]} for m, e in zip(sums, parts, strict=True))
            rest = _rest(c, r, [e["script"] for e in parts], sums[0] if len(sums) == 1 else None)
            if rest is not None:
                out.append({**rest, "label": r["fn"], "script": None})
            continue
        claimed: set[int] = set()
        for e in parts:
            ids_ = eval_ids_of_script(store, r["fn"], e["script"])
            claimed.update(ids_)
            out.append({**_summed(c, r["fn"], ids_), "label": e["label"], "script": e["script"]})
        left = [i for (i,) in c.execute("SELECT id FROM evaluations WHERE fn=?", (r["fn"],)) if i not in claimed]
        if left:
            out.append({**_summed(c, r["fn"], left), "label": r["fn"], "script": None})
    return out


def _summed(c: Any, fn: str, eval_ids: list[int]) -> dict[str, Any]:
    n, size, last, hits, compute = 0, 0, None, 0, 0.0
    for q, part in chunks(eval_ids):
        row = c.execute(f"SELECT COUNT(*), SUM(size), MAX(finished), SUM(hits), SUM(duration) FROM evaluations "
                        f"WHERE id IN ({q})", part).fetchone()
        n += row[0]
        size += row[1] or 0
        last = max(last or 0, row[2] or 0) or last
        hits += row[3] or 0
        compute += row[4] or 0.0
    out = {"fn": fn, "evaluations": n, "size": size, "last": last, "hits": hits, "compute": compute}
    gone = expired_among(c, eval_ids)  # this script's share, not the whole function's
    if gone is not None:
        out["expired"] = gone
    return out


def _claimed(n: int) -> str:
    """SQL: the evaluations a run of one of ``n`` scripts produced (parameters: fn, the scripts)."""
    return f"id IN (SELECT eval_id FROM runs WHERE fn=? AND script IN ({','.join('?' * n)}))"


def _summed_sql(c: Any, fn: str, scripts: list[str]) -> dict[str, Any]:
    """``_summed`` of the evaluations of ``fn`` that runs of ``scripts`` produced, summed by SQLite
    in one statement (each once, however many of its runs name it): one row into Python."""
    mine = _claimed(len(scripts))
    n, size, last, hits, compute = c.execute(
        # (+fn: found by id from the runs, not by a pass over every row of the function)
        f"SELECT COUNT(*), SUM(size), MAX(finished), SUM(hits), SUM(duration) FROM evaluations WHERE +fn=? AND {mine}",
        (fn, fn, *scripts)).fetchone()
    out = {"fn": fn, "evaluations": int(n), "size": size or 0, "last": last, "hits": hits or 0, "compute": compute or 0.0}
    gone = expired_of(c, fn, mine, (fn, *scripts))  # this script's share, not the whole function's
    if gone is not None:
        out["expired"] = gone
    return out


def _rest(c: Any, total: dict[str, Any], scripts: list[str], mine: dict[str, Any] | None) -> dict[str, Any] | None:
    """The summary of ``total["fn"]``'s evaluations no run of ``scripts`` produced: its kept totals
    less theirs (``mine``, if summed already), its newest the first one newest first that none
    claims (by the (fn, finished) index); None if every one is claimed."""
    fn = total["fn"]
    mine = mine or _summed_sql(c, fn, scripts)
    n = total["evaluations"] - mine["evaluations"]
    if n <= 0:
        return None
    row = c.execute(f"SELECT finished FROM evaluations WHERE fn=? AND NOT {_claimed(len(scripts))} "
                    "ORDER BY finished DESC LIMIT 1", (fn, fn, *scripts)).fetchone()
    out = {"fn": fn, "evaluations": n, "size": max(0, (total["size"] or 0) - mine["size"]),
           "last": row[0] if row else None, "hits": max(0, (total["hits"] or 0) - mine["hits"]),
           "compute": max(0.0, (total["compute"] or 0.0) - mine["compute"])}
    every = expired_of(c, fn)
    if every is not None and "expired" in mine:
        out["expired"] = max(0, every - mine["expired"])
    return out


def shown_function(store: Any, fn: str, script: Any = None, rows: Any = None) -> str:
    """The heading of a function's table: ``a.py:train`` for a script's function (the one script
    asked for, or the only one its ``rows`` came from), else its symbol."""
    if not fn.startswith("__main__:"):
        return fn
    from ..tracking.names import function_label, script_labels
    from ..tracking.query import scripts_of

    c = _conn(store)
    paths = scripts_of(c, fn) if has_runs(c) else []
    if script is None and rows is not None:
        mine = {r.get("script") for r in rows}
        script = next(iter(mine)) if len(mine) == 1 else None
    if script is None and len(paths) == 1:
        script = paths[0]
    return function_label(fn, script_labels(paths).get(script)) if script else fn
