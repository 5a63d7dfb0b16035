"""Reading logs back: what the dashboard and ``export-tb`` need.

Every function takes an ``Index`` (``store.index``) and returns plain JSON-able
data. Long scalar series are downsampled *in SQLite* (bucketed by step, mean
plus min/max per bucket, first and last point kept exact) so a tag with a
million points costs one indexed range scan, not a million Python objects.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..settings.text import mask_args, mask_secrets
from ..store.inlist import chunks, placeholders
from . import counts, names, notes, schema

_ensured: set = set()


def ready(index: Any) -> Any:
    """``index``'s connection, its log tables there (made in ``temp`` for an index that must not
    be written: ``schema.ensure``)."""
    c = index.conn()
    key = (str(index.path), id(c))
    if key not in _ensured:
        schema.ensure(c, read_only=bool(getattr(index, "read_only", False)))
        _ensured.add(key)
    return c


_conn = ready


def scripts_of(c: Any, fn: str) -> list[str]:
    """The scripts whose runs ran ``fn``, sorted. With the ``runs_fn_script`` index each is one
    index seek past the last (a skip-scan: a million runs of one script cost a handful of seeks,
    where ``SELECT DISTINCT`` walks all of them); a store read as it is, made before that index,
    is walked once (``DISTINCT``)."""
    if c.execute("SELECT 1 FROM sqlite_master WHERE type='index' AND name='runs_fn_script' "
                 "UNION ALL SELECT 1 FROM sqlite_temp_master WHERE type='index' AND name='runs_fn_script'"
                 ).fetchone() is None:
        return [p for (p,) in c.execute(
            "SELECT DISTINCT script FROM runs WHERE fn=? AND script IS NOT NULL ORDER BY script", (fn,))]
    return [p for (p,) in c.execute(
        "WITH RECURSIVE s(x) AS (SELECT MIN(script) FROM runs WHERE fn=?1 AND script IS NOT NULL "
        "UNION ALL SELECT (SELECT MIN(script) FROM runs WHERE fn=?1 AND script > s.x) FROM s WHERE s.x IS NOT NULL) "
        "SELECT x FROM s WHERE x IS NOT NULL", (fn,))]


def _f(x: float | None) -> float | None:
    # JSON has no NaN/inf; the dashboard draws gaps for null
    return None if x is None or not math.isfinite(x) else x


def running_alive(c: Any) -> Any:
    """A predicate telling whether a run stored as ``running`` is really still running.

    A killed process cannot mark its runs finished. A memoized computation holds
    its key's lease, heart-beaten by the store, so a run whose lease is stale is
    lost. The process run has no key, and a quick function's computation takes no
    lease: they are alive while their pid is (checked only on this host; a keyed
    run elsewhere without a lease is lost).
    """
    import os
    import socket

    from ..settings import config

    ttl = max(30.0, 3 * config.settings().lease_ttl)
    now = time.time()
    from ..store.leasing import owner_alive_here

    leases = {tuple(r[:4]): (r[4], r[5]) for r in c.execute("SELECT fn, code, args, schema, heartbeat, owner FROM leases")}
    here = socket.gethostname()

    def alive(r: dict[str, Any]) -> bool:
        if r.get("code") is not None:
            lease = leases.get((r["fn"], r["code"], r["args"], r["schema"]))
            if lease is not None:
                # the process table outranks the heartbeat: an owner inside a long C
                # call that holds the GIL cannot beat, yet it is still computing
                here_alive = owner_alive_here(lease[1])
                return here_alive if here_alive is not None else now - lease[0] < ttl
            if r.get("host") != here or not r.get("pid"):
                return False
            # no lease: gone, or never taken (a quick function's miss computes
            # without one): alive while its process is, as the process run
        if r.get("host") == here and r.get("pid"):
            try:
                os.kill(int(r["pid"]), 0)
            except ProcessLookupError:
                return False
            except OSError:
                return True
        return True

    return alive


def _running(c: Any, fn: str | None = None) -> list[dict[str, Any]]:
    cols = ("id", "fn", "code", "args", "schema", "pid", "host")
    sql = f"SELECT {','.join(cols)} FROM runs WHERE status='running'" + (" AND fn=?" if fn else "")
    rows = [dict(zip(cols, r, strict=False)) for r in c.execute(sql, (fn,) if fn else ())]
    alive = running_alive(c)
    return [r for r in rows if alive(r)]


def functions(index: Any) -> list[dict[str, Any]]:
    """Every function with stored evaluations or logged runs."""
    c = _conn(index)
    kept = counts.functions(c)
    if kept is not None:
        return _functions_kept(c, kept)
    out: dict[str, dict[str, Any]] = {}
    for fn, n, hits, last in c.execute("SELECT fn, COUNT(*), SUM(hits), MAX(finished) FROM evaluations GROUP BY fn"):
        out[fn] = {"fn": fn, "evaluations": n, "hits": hits or 0, "runs": 0, "running": 0, "last": last}
    running: dict[str, int] = {}
    for r in _running(c):
        running[r["fn"]] = running.get(r["fn"], 0) + 1
    for fn, n, last in c.execute("SELECT fn, COUNT(*), MAX(started) FROM runs GROUP BY fn"):
        d = out.setdefault(fn, {"fn": fn, "evaluations": 0, "hits": 0, "runs": 0, "running": 0, "last": last})
        d["runs"], d["running"] = n, running.get(fn, 0)
        d["last"] = max(d["last"] or 0, last or 0)
    for d in out.values():
        d["scalars_last"] = _scalars_last(c, d["fn"])
    # the files a script's functions came from: two scripts that each define `train` share __main__:train
    for fn, script in c.execute("SELECT DISTINCT fn, script FROM runs WHERE substr(fn, 1, 9)='__main__:' "
                                "AND script IS NOT NULL ORDER BY fn, script"):
        if fn in out:
            out[fn].setdefault("scripts", []).append(script)
    return sorted(out.values(), key=lambda d: d["fn"])


def _functions_kept(c: Any, kept: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """``functions`` from the kept counts (``counts``): per function a few index seeks (its newest
    evaluation and run), however many rows it has."""
    running: dict[str, int] = {}
    for r in _running(c):
        running[r["fn"]] = running.get(r["fn"], 0) + 1
    out = []
    for fn, k in sorted(kept.items()):
        last_ev = c.execute("SELECT MAX(finished) FROM evaluations WHERE fn=?", (fn,)).fetchone()[0]
        last_run = c.execute("SELECT MAX(started) FROM runs WHERE fn=?", (fn,)).fetchone()[0]
        d = {"fn": fn, "evaluations": k["evaluations"], "hits": k["hits"] or 0, "runs": k["runs"],
             "running": running.get(fn, 0) if k["runs"] else 0,
             "last": max(last_ev or 0, last_run or 0) if k["runs"] else last_ev,
             "scalars_last": _scalars_last(c, fn)}
        if fn.startswith("__main__:"):
            scripts = sorted(s for (s,) in c.execute(
                "SELECT script FROM run_counts WHERE fn=? AND script != '' AND runs > 0", (fn,)))
            if scripts:
                d["scripts"] = scripts
        out.append(d)
    return out


#: the newest runs of a function looked at for its newest scalar: one short index range however many
#: runs it has (function_entries also serves the CLI's name resolution: a few lookups per function)
SCALARS_LAST_RUNS = 50


def _scalars_last(c: Any, fn: str) -> float | None:
    """When ``fn``'s runs last logged a scalar (the wall time of its newest point, among its newest
    runs), None when they logged none: the dashboard opens on the function with the newest curves,
    not on a pipeline's last step (``evaluate``) that logged none."""
    row = c.execute("SELECT MAX(t.last_wall) FROM (SELECT id FROM runs WHERE fn=? ORDER BY started DESC LIMIT ?) r "
                    "JOIN scalar_tags t ON t.run = r.id", (fn, SCALARS_LAST_RUNS)).fetchone()
    return row[0] if row else None


def function_entries(index: Any) -> list[dict[str, Any]]:
    """``functions`` as people tell them apart: a script's ``__main__:train`` once per script that
    ran it (``a.py:train``, ``b.py:train``: ``names.function_label``), with that script's runs and
    evaluations; its evaluations no run of a known script produced (an older store) under the bare
    symbol. Each entry: fn, script (absolute path or None), label, and the counts of ``functions``."""
    c = _conn(index)
    out: list[dict[str, Any]] = []
    mains = []
    for f in functions(index):
        if not f["fn"].startswith("__main__:") or not f.get("scripts"):
            out.append({**f, "script": None, "label": f["fn"]})
        else:
            mains.append(f)
    if not mains:
        return out
    labels = names.script_labels(sorted({p for f in mains for p in f["scripts"]}))
    running = {r["id"] for r in _running(c)}
    for f in mains:
        # counted per script in SQLite (a function's million runs are never read into Python)
        per: dict[str | None, dict[str, Any]] = {}
        kept_scripts = counts.per_script(c, f["fn"])
        for script, n, last, evs in [] if kept_scripts is not None else c.execute(
                "SELECT r.script, COUNT(*), MAX(r.started), COUNT(DISTINCT e.id) FROM runs r "
                "LEFT JOIN evaluations e ON e.id = r.eval_id WHERE r.fn=? GROUP BY r.script", (f["fn"],)):
            per[script] = {"runs": n, "evaluations": evs, "running": 0, "last": last or 0}
        for script, d in (kept_scripts or {}).items():
            per[script] = {"runs": d["runs"], "evaluations": d["stored"], "running": 0, "last": d["last"] or 0}
        for rid, script in c.execute("SELECT id, script FROM runs WHERE fn=? AND status='running'", (f["fn"],)):
            if rid in running and script in per:
                per[script]["running"] += 1
        unknown = counts.unrun(c, f["fn"])
        if unknown is None:
            seen = c.execute("SELECT COUNT(DISTINCT r.eval_id) FROM runs r JOIN evaluations e ON e.id = r.eval_id "
                             "WHERE r.fn=?", (f["fn"],)).fetchone()[0]
            unknown = f["evaluations"] - seen
        if unknown > 0 or None in per:
            d = per.setdefault(None, {"runs": 0, "evaluations": 0, "running": 0, "last": 0})
            d["unknown"] = max(0, unknown)
        for script, d in sorted(per.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
            label = names.function_label(f["fn"], labels.get(script)) if script else f["fn"]
            out.append({"fn": f["fn"], "script": script, "label": label, "runs": d["runs"],
                        "evaluations": d["evaluations"] + d.get("unknown", 0), "running": d["running"],
                        "hits": f["hits"], "last": d["last"] or f["last"], "scalars_last": f["scalars_last"]})
    return sorted(out, key=lambda d: d["label"])


_RUN_COLS = ("id", "fn", "code", "args", "schema", "parent", "name", "started", "finished", "updated", "status",
             "hparams", "eval_id", "pid", "host", "error", "script")


#: ``query.runs``' labels say how a run differs from the other runs of its function: with a limit
#: (``runs --limit N``, the dashboard's window, ``show``), from its function's newest this many
#: runs and evaluations, never from all of them (a million runs would be read to label ten).
LABEL_WINDOW = 200

_EV_COLS = ("id", "fn", "code", "args", "status", "started", "finished", "duration", "hits", "last_hit", "size",
            "snapshot")
_EV_SQL = f"SELECT {','.join(_EV_COLS)} FROM evaluations e"
#: a stored evaluation no run names (an older store's, a team row pulled, a run collected)
_NO_RUN = "NOT EXISTS (SELECT 1 FROM runs r WHERE r.eval_id = e.id)"


def runs(index: Any, fn: str | None = None, ids: Sequence[int] | None = None,
         limit: int | None = None, script: str | None = None) -> list[dict[str, Any]]:
    """Runs (newest first) joined with their evaluation; stored evaluations that have no run are listed too.

    ``status`` is running, done, failed, interrupted, or lost (stored as running, but its process
    is gone). ``hparams`` are flattened (``cfg.optim.lr``); ``label`` is the run's name, else the
    arguments that differ between the rows returned (``names.labels``; with ``limit``, between the
    newest ``LABEL_WINDOW`` rows of the function).

    A row's ``id`` is the run id, or ``"e<eval id>"`` for an evaluation stored without a run.
    ``script``: only the runs of that script (a script's ``__main__`` function, ``a.py:train``);
    ``""``: those of no known script, and the evaluations stored without a run.

    ``limit``: the newest ``limit`` rows (runs and evaluations without one, by ``started``), read
    through the indexes ``runs_fn`` and ``evaluations_summary``: what is read grows with ``limit``,
    not with the function's runs.
    """
    if limit is None:
        return _runs(index, fn, ids, None, script)
    out = _runs(index, fn, ids, max(int(limit), LABEL_WINDOW), script)
    return out[:max(0, int(limit))]


def count_rows(index: Any, fn: str | None = None, script: str | None = None) -> int:
    """How many rows ``runs(index, fn, script=script)`` lists, counted in SQL (over the indexes
    ``runs_fn`` and ``runs_eval``: no row is read into Python)."""
    c = _conn(index)
    if fn is not None:
        kept = counts.runs(c, fn, script or None)
        if kept is not None:
            return kept + (0 if script else counts.unrun(c, fn) or 0)
    where = " WHERE " + " AND ".join(w for w, on in (("fn=?", fn is not None), ("script=?", bool(script))) if on) \
        if fn is not None or script else ""
    params = [p for p in (fn, script or None) if p is not None]
    n = int(c.execute(f"SELECT COUNT(*) FROM runs{where}", params).fetchone()[0])
    if not script:
        ev_where = "e.fn=? AND " if fn is not None else ""
        n += int(c.execute(f"SELECT COUNT(*) FROM evaluations e WHERE {ev_where}{_NO_RUN}",
                           (fn,) if fn is not None else ()).fetchone()[0])
    return n


def labelled(index: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of ``runs`` (by ``ids``) labelled as among their function's newest ``LABEL_WINDOW``
    rows (``memolab show``, the run page): what is read does not grow with the function's runs."""
    for f in {r["fn"] for r in rows}:
        mine = [r for r in rows if r["fn"] == f]
        have = {r["id"] for r in mine}
        context = [r for r in runs(index, f, limit=LABEL_WINDOW) if r["id"] not in have]
        for r, label in zip(mine, names.labels([*mine, *context]), strict=False):
            r["label"] = label
    return rows


def _unrun(c: Any, fn: str | None, limit: int | None, floor: list[float]) -> list[dict[str, Any]]:
    """The stored evaluations no run names: every one, or (``limit``) those that may be among the
    newest ``limit`` rows by ``started``. ``floor``: the ``started`` of the runs already chosen.
    Read by ``finished`` (``evaluations_summary``: an evaluation started before it finished), so
    the scan stops at the first one that finished before the ``limit``-th newest start seen."""
    import heapq

    where, params = ("e.fn=? AND " if fn is not None else ""), ((fn,) if fn is not None else ())
    if not limit:
        return [dict(zip(_EV_COLS, r, strict=False)) for r in c.execute(f"{_EV_SQL} WHERE {where}{_NO_RUN}", params)]
    # ``limit`` runs chosen already: an evaluation that finished before the oldest of them started
    # cannot be among the newest (it started before it finished). Said to SQLite, so that a
    # function whose every evaluation has a run is not scanned to the end to find none.
    floor_sql = ""
    floor_params: tuple[float, ...] = ()
    if len(floor) >= limit:
        floor_sql, floor_params = "e.finished >= ? AND ", (min(x or 0.0 for x in floor),)
    cur = c.execute(f"{_EV_SQL} WHERE {where}{floor_sql}{_NO_RUN} ORDER BY e.finished DESC", (*params, *floor_params))
    heap = heapq.nlargest(limit, [x or 0.0 for x in floor])
    heapq.heapify(heap)
    out = []
    for r in cur:
        d = dict(zip(_EV_COLS, r, strict=False))
        if d["finished"] is None:
            break  # (NULLs sort last: read below)
        if len(heap) >= limit and d["finished"] < heap[0]:
            break
        out.append(d)
        heapq.heappush(heap, d["started"] or 0.0)
        if len(heap) > limit:
            heapq.heappop(heap)
    cur.close()
    # unfinished rows (no ``finished``) are few: a range of the same index
    out += [dict(zip(_EV_COLS, r, strict=False)) for r in
            c.execute(f"{_EV_SQL} WHERE {where}e.finished IS NULL AND {_NO_RUN}", params)]
    return out


def _evaluations_of(c: Any, eval_ids: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for q, chunk in chunks(eval_ids):
        for r in c.execute(f"{_EV_SQL} WHERE e.id IN ({q})", chunk):
            out[r[0]] = dict(zip(_EV_COLS, r, strict=False))
    return out


def _runs(index: Any, fn: str | None, ids: Sequence[int] | None, limit: int | None,
          script: str | None) -> list[dict[str, Any]]:
    c = _conn(index)
    where: list[str] = []
    params: list[Any] = []
    if fn is not None:
        where.append("fn=?")
        params.append(fn)
    if script:
        where.append("script=?")
        params.append(script)
    elif script == "":
        where.append("script IS NULL")
    if ids is not None:
        where.append(f"id IN ({placeholders(len(ids))})")
        params.extend(ids)
    sql = f"SELECT {','.join(_RUN_COLS)} FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY started DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    rows = [dict(zip(_RUN_COLS, r, strict=False)) for r in c.execute(sql, params)]
    evs = _evaluations_of(c, sorted({r["eval_id"] for r in rows if r["eval_id"] is not None}))
    out = []
    now = time.time()
    alive = running_alive(c)
    metrics = _final_metrics(c, [r["id"] for r in rows])
    for r in rows:
        if r["status"] == "running" and not alive(r):
            r["status"] = "lost"  # its process died without finishing it
            r["finished"] = r["updated"]
        r["hparams"] = names.flatten(mask_secrets(json.loads(r["hparams"] or "{}")))  # (older stores: unmasked)
        ev = evs.get(r["eval_id"])
        r["duration"] = (r["finished"] or now) - r["started"]
        r["hits"] = 0
        r["result"] = None
        r["stored"] = ev is not None
        r["metrics"] = metrics.get(r["id"], {})
        if ev is not None:
            r["hits"] = ev["hits"]
            r["result"] = _result(_snapshot(ev))
            r["size"] = ev["size"]
        out.append(r)
    if ids is None and not script:
        # (``script == ""``: an evaluation a run of a known script produced is that script's; one no
        # run names is of none)
        for ev in _unrun(c, fn, limit, [r["started"] for r in rows]):
            snap = _snapshot(ev)
            out.append({"id": f"e{ev['id']}", "fn": ev["fn"], "code": ev["code"], "args": ev["args"], "parent": None,
                        "name": None, "started": ev["started"], "finished": ev["finished"], "updated": ev["finished"],
                        "status": ev["status"], "eval_id": ev["id"], "pid": None, "host": None, "stored": True,
                        "script": None,
                        "hparams": {k: v[1] for k, v in mask_args(snap.get("args") or {}).items()},
                        "duration": ev["duration"], "hits": ev["hits"], "result": _result(snap), "size": ev["size"],
                        "metrics": {}, "error": None})
        if limit is not None:
            out.sort(key=lambda r: r["started"] or 0.0, reverse=True)
            del out[limit:]
    marks = notes.for_runs(c, out)
    for r in out:  # its own notes and tags, and its stored evaluation's
        m = notes.as_json(marks.get(r["id"]))
        r["run_tags"], r["notes"] = m["tags"], m["notes"]
    by_fn: dict[str, list[dict[str, Any]]] = {}
    for r in out:
        by_fn.setdefault(r["fn"], []).append(r)
    from ..store.accepts import covering

    for f, group in by_fn.items():  # a label says how a run differs from the other runs of its function
        for r, label in zip(group, names.labels(group), strict=False):
            r["label"] = label
        # the accepted code changes naming a run's code (`memolab accept`): the dashboard marks them
        acc = covering(index, f, [r["code"] for r in group if r.get("code")])
        for r in group:
            r["accepted"] = [{"id": a["id"], "new_code": a["new_code"], "old_code": a["old_code"],
                              "by": f"{a.get('user_name') or '?'}@{a.get('host') or '?'}", "time": a["time"]}
                             for a in acc.get(r.get("code") or "", [])]
    return out


def failure(index: Any, run: int) -> dict[str, str | None]:
    """A failed or interrupted run's ``error``, ``traceback`` and the tail of its ``output`` (None when absent)."""
    row = _conn(index).execute("SELECT error, traceback, output FROM runs WHERE id=?", (run,)).fetchone()
    return dict(zip(("error", "traceback", "output"), row or (None, None, None), strict=False))


def points(index: Any, run: int, tag: str) -> dict[str, list[Any]]:
    """Every point of one series, in step order: {"step", "wall", "value"} (NaN/inf kept as floats)."""
    rows = _conn(index).execute("SELECT step, wall, value FROM scalars WHERE run=? AND tag=? ORDER BY step, seq",
                                (run, tag)).fetchall()
    return {"step": [r[0] for r in rows], "wall": [r[1] for r in rows],
            "value": [float("nan") if r[2] is None else r[2] for r in rows]}


def _result(snap: dict[str, Any]) -> str | None:
    # the typed summary ("state_dict: 6 tensors, 1.2 MB"); older rows have only the repr
    return snap.get("result_summary") or snap.get("result")


def _final_metrics(c: Any, ids: list[int]) -> dict[int, dict[str, float | None]]:
    """run -> {tag: last value}: read from ``scalar_tags``, never from the points."""
    out: dict[int, dict[str, float | None]] = {}
    for q, chunk in chunks(ids):
        for run, tag, v in c.execute(f"SELECT run, tag, last_value FROM scalar_tags WHERE run IN ({q})", chunk):
            out.setdefault(run, {})[tag] = _f(v)
    return out


def _snapshot(ev: dict[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(ev.get("snapshot") or "{}")
    except ValueError:
        return {}


def tags(index: Any, run_ids: Iterable[int]) -> dict[str, list[str]]:
    """Tags by kind ("scalar", "histogram", "image", "text") over the given runs."""
    ids = [int(i) for i in run_ids]
    out: dict[str, list[str]] = {"scalar": [], "histogram": [], "image": [], "text": []}
    if not ids:
        return out
    c = _conn(index)
    q = placeholders(len(ids))
    out["scalar"] = [t for (t,) in c.execute(f"SELECT DISTINCT tag FROM scalar_tags WHERE run IN ({q}) ORDER BY tag", ids)]
    for kind, tag in c.execute(f"SELECT DISTINCT kind, tag FROM log_events WHERE run IN ({q}) ORDER BY tag", ids):
        out.setdefault(kind, []).append(tag)
    return out


def scalars(index: Any, run: int, tag: str, max_points: int = 1000) -> dict[str, Any]:
    """One series: {"n", "step", "wall", "value", "min", "max"}; at most ~``max_points`` points.

    Downsampled series carry per-bucket min/max so a spike never disappears.
    """
    c = _conn(index)
    meta = c.execute("SELECT n, ordered FROM scalar_tags WHERE run=? AND tag=?", (run, tag)).fetchone()
    if not meta or not meta[0]:
        return {"n": 0, "step": [], "wall": [], "value": [], "min": None, "max": None}
    n, ordered = meta
    if n <= max_points:
        rows = c.execute("SELECT step, wall, value FROM scalars WHERE run=? AND tag=? ORDER BY step, seq", (run, tag)).fetchall()
        return {"n": n, "step": [r[0] for r in rows], "wall": [r[1] for r in rows], "value": [_f(r[2]) for r in rows],
                "min": None, "max": None}
    nblocks = -(-n // schema.BLOCK)
    if ordered and nblocks >= max_points // 2:
        # Long series whose steps only grew: merge the per-block summaries (n / BLOCK rows), not the points.
        k = max(1, -(-nblocks // max_points))
        rows = c.execute(
            "SELECT block / ?, MIN(step_min), SUM(wall_sum) / SUM(n), SUM(value_sum) / NULLIF(SUM(value_n), 0),"
            " MIN(vmin), MAX(vmax) FROM scalar_blocks WHERE run=? AND tag=? GROUP BY 1 ORDER BY 1",
            (k, run, tag)).fetchall()
        return _with_last(c, run, tag, n, rows)
    # shorter (or out-of-order) series: bucket the points themselves by step
    s0, s1 = (c.execute(f"SELECT step FROM scalars WHERE run=? AND tag=? ORDER BY step {d} LIMIT 1", (run, tag)).fetchone()[0]
              for d in ("ASC", "DESC"))
    width = max(1, (s1 - s0 + max_points) // max_points)
    rows = c.execute(
        "SELECT (step - ?) / ?, MIN(step), AVG(wall), AVG(value), MIN(value), MAX(value) FROM scalars"
        " WHERE run=? AND tag=? GROUP BY 1 ORDER BY 1", (s0, width, run, tag)).fetchall()
    return _with_last(c, run, tag, n, rows)


def _with_last(c: Any, run: int, tag: str, n: int, rows: list[tuple]) -> dict[str, Any]:
    last = c.execute("SELECT step, wall, value FROM scalars WHERE run=? AND tag=? ORDER BY step DESC, seq DESC LIMIT 1",
                     (run, tag)).fetchone()
    out: dict[str, Any] = {"n": n, "step": [r[1] for r in rows], "wall": [r[2] for r in rows], "value": [_f(r[3]) for r in rows],
           "min": [_f(r[4]) for r in rows], "max": [_f(r[5]) for r in rows], "downsampled": True}
    if out["step"][-1] != last[0]:  # the final value is what people read off a curve: keep it exact
        for k, v in (("step", last[0]), ("wall", last[1]), ("value", _f(last[2])), ("min", _f(last[2])), ("max", _f(last[2]))):
            out[k].append(v)
    return out


def all_scalars(index: Any, run: int) -> dict[str, list[tuple]]:
    """Every point of every tag of a run: {tag: [(step, wall, value), ...]} (for export, not for the UI)."""
    out: dict[str, list[tuple]] = {}
    for tag, step, wall, value in _conn(index).execute(
            "SELECT tag, step, wall, value FROM scalars WHERE run=? ORDER BY tag, step, seq", (run,)):
        out.setdefault(tag, []).append((step, wall, float("nan") if value is None else value))
    return out


def _finite_meta(m: Any) -> Any:
    # JSON for the browser has no inf/NaN (an overflowed histogram sum): null, as for scalars
    if isinstance(m, float):
        return _f(m)
    if isinstance(m, dict):
        return {k: _finite_meta(v) for k, v in m.items()}
    if isinstance(m, list):
        return [_finite_meta(v) for v in m]
    return m


def events(index: Any, run: int, kind: str, tag: str | None = None, with_data: bool = False,
           exact: bool = False) -> list[dict[str, Any]]:
    """Events of a run; ``exact`` keeps non-finite numbers in ``meta`` (export), else they are None (JSON API)."""
    cols = "id, tag, step, wall, meta" + (", data" if with_data else "")
    sql = f"SELECT {cols} FROM log_events WHERE run=? AND kind=?"
    params: list[Any] = [run, kind]
    if tag is not None:
        sql += " AND tag=?"
        params.append(tag)
    out = []
    for r in _conn(index).execute(sql + " ORDER BY tag, step, id", params):
        meta = json.loads(r[4]) if r[4] else None
        d = {"id": r[0], "tag": r[1], "step": r[2], "wall": r[3], "meta": meta if exact else _finite_meta(meta)}
        if with_data:
            d["data"] = r[5]
        out.append(d)
    return out


def event_data(index: Any, event_id: int, kind: str | None = None) -> bytes | None:
    """The payload of one event; with ``kind``, only an event of that kind (the image route serves PNGs only)."""
    sql = "SELECT data FROM log_events WHERE id=?" + (" AND kind=?" if kind is not None else "")
    row = _conn(index).execute(sql, (event_id, kind) if kind is not None else (event_id,)).fetchone()
    return bytes(row[0]) if row and row[0] is not None else None


def texts(index: Any, run: int, tag: str) -> list[dict[str, Any]]:
    return [{"step": e["step"], "wall": e["wall"], "text": (e["data"] or b"").decode("utf-8", "replace")}
            for e in events(index, run, "text", tag, with_data=True)]


def hparams(index: Any, fn: str, script: str | None = None) -> dict[str, Any]:
    """Runs of ``fn`` (of ``script``: ``runs``) with their hyperparameters and final (last-step)
    value of every scalar, and their name (a ``SummaryWriter``'s log_dir, ``memolab.log.name``) or label."""
    rs = [r for r in runs(index, fn, script=script) if isinstance(r["id"], int)]
    metrics: dict[int, dict[str, Any]] = {}
    if rs:
        for q, ids in chunks([r["id"] for r in rs]):
            for run, tag, v in _conn(index).execute(f"SELECT run, tag, last_value FROM scalar_tags WHERE run IN ({q})", ids):
                metrics.setdefault(run, {})[tag] = _f(v)
    hp_keys = sorted({k for r in rs for k in r["hparams"]})
    m_keys = sorted({k for m in metrics.values() for k in m})
    rows = [{"id": r["id"], "status": r["status"], "eval_id": r["eval_id"], "code": r["code"], "name": r.get("name"),
             "label": r.get("label"), "hparams": r["hparams"], "metrics": metrics.get(r["id"], {})} for r in rs]
    return {"hparams": hp_keys, "metrics": m_keys, "rows": rows}
