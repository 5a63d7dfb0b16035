"""A function's runs that have no stored evaluation and did not end done: still computing, failed,
interrupted (Ctrl-C, SIGTERM), lost (stored as computing, its process gone: killed). ``ls FUNC``
lists them among its evaluations, with what the store knows of each: when, how long so far, a
failure's first line, and its arguments in the form its evaluations show theirs (the run's
``argtext``: the texts of the call's argument snapshot).

Read newest first through the partial index ``runs_open`` (``fn, started`` of the runs not done):
``--limit N`` reads N entries of it, however many runs the function has.
"""
from __future__ import annotations

import json
import time
from typing import Any

from . import query

#: a run of ``fn`` that stored nothing (its ``eval_id`` names no stored evaluation) and is not done
UNSTORED = ("fn=? AND status != 'done' AND (eval_id IS NULL OR "
            "NOT EXISTS (SELECT 1 FROM evaluations e WHERE e.id = runs.eval_id))")

#: the stored status as ``ls`` says it (a run stored as running: computing, or lost when its process is gone)
SHOWN = {"running": "computing"}

_COLS = ("id", "fn", "code", "args", "schema", "pid", "host", "started", "updated", "finished", "status", "error",
         "argtext", "hparams")


#: the ended runs counted for ``ls FUNC``'s footer at most: a function that failed a million times
#: costs this many index entries, and the footer says "or more"
COUNT_CAP = 10_000


def counts(index: Any, fn: str, script: str | None = None) -> tuple[dict[str, int], bool]:
    """(status (as shown: computing, failed, interrupted, lost) -> how many of ``fn``'s runs stored
    nothing (of ``script``'s runs only, if given), whether the ended ones reached ``COUNT_CAP`` (then
    there may be more)): counted in SQL (a run stored as running is read to tell a lost one), never
    read one by one."""
    c = query.ready(index)
    where, params = (UNSTORED + " AND script=?", (fn, script)) if script else (UNSTORED, (fn,))
    out: dict[str, int] = {SHOWN.get(s, s): n for s, n in c.execute(
        f"SELECT status, COUNT(*) FROM (SELECT status FROM runs WHERE {where} AND status != 'running' LIMIT ?) "
        "GROUP BY status", (*params, COUNT_CAP))}
    capped = sum(out.values()) >= COUNT_CAP
    cols = ("id", "fn", "code", "args", "schema", "pid", "host")
    alive = query.running_alive(c)
    for row in c.execute(f"SELECT {','.join(cols)} FROM runs WHERE {where} AND status = 'running'", params).fetchall():
        s = "computing" if alive(dict(zip(cols, row, strict=False))) else "lost"
        out[s] = out.get(s, 0) + 1
    return out, capped


def _has_index(c: Any, name: str) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='index' AND name=? UNION ALL "
                     "SELECT 1 FROM sqlite_temp_master WHERE type='index' AND name=?", (name, name)).fetchone() is not None


def newest(index: Any, fn: str, limit: int, script: str | None = None) -> list[dict[str, Any]]:
    """``fn``'s newest ``limit`` runs that stored nothing (of ``script``'s runs only, if given), each
    {id, status (shown), started, when (its end, or now while computing), seconds (so far), error
    (its first line), code, texts ({name: text}, or None for a run written before runs kept them),
    hparams (the run's logged hyperparameters, JSON as stored)}; the computing ones first."""
    c = query.ready(index)
    where, params = UNSTORED, [fn]
    if script:
        where, params = where + " AND script=?", [fn, script]
    cols = ",".join(_COLS)
    # every one still computing (few: ``runs_running``), then the newest others by ``runs_open``
    # (named: the planner would take ``runs_open`` for its order, and walk every failed run past)
    by = " INDEXED BY runs_running" if _has_index(c, "runs_running") else ""
    rows = [dict(zip(_COLS, r, strict=False)) for r in c.execute(
        f"SELECT {cols} FROM runs{by} WHERE {where} AND status = 'running' ORDER BY started DESC LIMIT ?",
        (*params, int(limit)))]
    by = " INDEXED BY runs_open" if _has_index(c, "runs_open") else ""
    rows += [dict(zip(_COLS, r, strict=False)) for r in c.execute(
        f"SELECT {cols} FROM runs{by} WHERE {where} AND status != 'running' ORDER BY started DESC LIMIT ?",
        (*params, int(limit)))]
    alive = query.running_alive(c)
    now = time.time()
    out = []
    for r in rows:
        status = r["status"]
        if status == "running":
            status = "computing" if alive(r) else "lost"
        end = now if status == "computing" else (r["finished"] or r["updated"] or r["started"])
        out.append({"id": r["id"], "fn": r["fn"], "status": status, "code": r["code"], "started": r["started"],
                    "when": end, "seconds": max(0.0, end - r["started"]), "error": first_line(r["error"]),
                    "texts": _texts(r["argtext"]), "hparams": _json(r["hparams"])})
    out.sort(key=lambda d: (d["status"] != "computing", -d["when"]))
    return out[:int(limit)]


def first_line(error: str | None) -> str | None:
    if not error:
        return None
    return error.strip().splitlines()[0] if error.strip() else None


def _texts(raw: str | None) -> dict[str, str] | None:
    d = _json(raw)
    return {str(k): str(v) for k, v in d.items()} if d else None


def _json(raw: str | None) -> dict[str, Any]:
    try:
        d = json.loads(raw or "{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
