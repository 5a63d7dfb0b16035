"""Logs live as long as their evaluation.

``Store.collect_garbage`` (run by ``clear`` and ``gc``) calls ``purge_orphans``:
runs whose stored evaluation was deleted (or replaced by ``.fresh()``) lose
their logs. ``Store.clear(fn)`` calls ``purge``: every finished run of the
function goes, including failed and lost ones that never had an evaluation.
Running runs are never touched, since a live process is still writing them.
"""
from __future__ import annotations

from typing import Any, List, Optional

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
        sql = "SELECT id FROM runs WHERE status != 'running'" + (" AND fn=?" if fn is not None else "")
        return _delete(c, [r[0] for r in c.execute(sql, (fn,) if fn is not None else ())])


def purge_orphans(index: Any) -> int:
    """Delete runs (and logs) whose evaluation no longer exists; returns how many."""
    with index.write() as c:
        if not _has_runs(c):
            return 0
        ids = [r[0] for r in c.execute(
            "SELECT id FROM runs WHERE eval_id IS NOT NULL AND eval_id NOT IN (SELECT id FROM evaluations)")]
        return _delete(c, ids)
