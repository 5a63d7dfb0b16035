"""Logs live as long as their evaluation.

``Store.collect_garbage`` (run by ``clear`` and ``gc``) calls ``purge_orphans``:
runs whose stored evaluation was deleted (or replaced by ``.fresh()``) lose
their logs. ``Store.clear(fn)`` calls ``purge``: every finished run of the
function goes, including failed and lost ones that never had an evaluation
(lost: stored as running, but its process is gone, judged as the dashboard does).
Running runs are never touched, since a live process is still writing them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

_LOG_TABLES = ("scalars", "scalar_tags", "scalar_blocks", "log_events")


def _has_runs(c: Any) -> bool:
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone() is not None


def _delete(c: Any, ids: List[int]) -> int:
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        q = ",".join("?" * len(chunk))
        for t in _LOG_TABLES:
            c.execute(f"DELETE FROM {t} WHERE run IN ({q})", chunk)
        c.execute(f"DELETE FROM runs WHERE id IN ({q})", chunk)
    return len(ids)


def purge(index: Any, fn: Optional[str] = None) -> int:
    """Delete the finished runs (and logs) of ``fn``, or of every function; returns how many."""
    with index.write() as c:
        if not _has_runs(c):
            return 0
        cols = ("id", "fn", "code", "args", "schema", "pid", "host", "status")
        sql = f"SELECT {','.join(cols)} FROM runs" + (" WHERE fn=?" if fn is not None else "")
        rows = [dict(zip(cols, r)) for r in c.execute(sql, (fn,) if fn is not None else ())]
        # A killed process never marks its runs finished: they stay 'running' in the table. They
        # are judged as the dashboard judges them (lease gone or stale, pid dead): lost runs go,
        # a live process's runs stay.
        from .query import _alive

        alive = _alive(c)
        return _delete(c, [r["id"] for r in rows if r["status"] != "running" or not alive(r)])


def log_bytes(index: Any) -> Dict[int, int]:
    """About how many bytes of the index each evaluation's logs take: {eval_id: bytes}.

    Counted from the rows (their values plus a fixed per-row overhead), so that
    ``gc --max-size`` weighs logs too; exact page usage is not needed for that."""
    c = index.conn()
    if not _has_runs(c):
        return {}
    out: Dict[int, int] = {}
    queries = (
        "SELECT r.eval_id, SUM(48 + length(s.tag)) FROM scalars s JOIN runs r ON r.id = s.run "
        "WHERE r.eval_id IS NOT NULL GROUP BY r.eval_id",
        "SELECT r.eval_id, SUM(64 + length(e.tag) + COALESCE(length(e.meta), 0) + COALESCE(length(e.data), 0)) "
        "FROM log_events e JOIN runs r ON r.id = e.run WHERE r.eval_id IS NOT NULL GROUP BY r.eval_id",
    )
    for q in queries:
        for eid, n in c.execute(q):
            out[eid] = out.get(eid, 0) + int(n or 0)
    return out


def purge_orphans(index: Any) -> int:
    """Delete runs (and logs) whose evaluation no longer exists; returns how many."""
    with index.write() as c:
        if not _has_runs(c):
            return 0
        ids = [r[0] for r in c.execute(
            "SELECT id FROM runs WHERE eval_id IS NOT NULL AND eval_id NOT IN (SELECT id FROM evaluations)")]
        return _delete(c, ids)
