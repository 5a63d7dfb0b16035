"""Logs live as long as their evaluation.

``Store.collect_garbage`` (run by ``clear`` and ``gc``) calls ``purge_orphans``:
runs whose stored evaluation was deleted (or replaced by ``.fresh()``) lose
their logs. ``Store.clear(fn)`` calls ``purge``: every finished run of the
function goes, including failed and lost ones that never had an evaluation
(lost: stored as running, but its process is gone, judged as the dashboard does).
Running runs are never touched, since a live process is still writing them.

``memolab gc --older-than AGE`` also drops runs that never had a stored
evaluation (process runs, failed and lost runs) once they are older than AGE
(``stale_runs``). Every deletion is counted (``Purged``: runs and log points) so
the CLI can say exactly what it removed.
"""
from __future__ import annotations

import sqlite3
import time
from typing import Any, NamedTuple

from ..errors import swallowed

# moved to the store, which weighs logs when it plans a gc; still importable from here
from ..store.gcplan import log_bytes  # noqa: F401
from ..store.inlist import chunks
from ..store.schema import has_runs
from . import notes as _notes

_LOG_TABLES = ("scalars", "scalar_tags", "scalar_blocks", "log_events")


class Purged(NamedTuple):
    runs: int = 0
    #: scalar points + histogram/image/text events
    points: int = 0

    def __add__(self, other: Purged) -> Purged:  # type: ignore[override]
        return Purged(self.runs + other.runs, self.points + other.points)


def _delete(c: Any, ids: list[int]) -> Purged:
    points = 0
    for q, chunk in chunks(ids):
        for t in ("scalars", "log_events"):  # counted by primary-key range, not by scanning
            points += c.execute(f"SELECT COUNT(*) FROM {t} WHERE run IN ({q})", chunk).fetchone()[0]
        for t in _LOG_TABLES:
            c.execute(f"DELETE FROM {t} WHERE run IN ({q})", chunk)
        c.execute(f"DELETE FROM runs WHERE id IN ({q})", chunk)
    _notes.delete_runs(c, ids)  # a run's notes and tags go with it
    return Purged(len(ids), points)


_RUN_COLS = ("id", "fn", "code", "args", "schema", "pid", "host", "status", "eval_id", "started", "finished", "updated")


def _finished_runs(c: Any, fn: str | None) -> list[dict]:
    cols = _RUN_COLS
    sql = f"SELECT {','.join(cols)} FROM runs" + (" WHERE fn=?" if fn is not None else "")
    rows = [dict(zip(cols, r, strict=False)) for r in c.execute(sql, (fn,) if fn is not None else ())]
    # A killed process never marks its runs finished: they stay 'running' in the table. They
    # are judged as the dashboard judges them (lease gone or stale, pid dead): lost runs go,
    # a live process's runs stay.
    from .query import running_alive

    alive = running_alive(c)
    return [r for r in rows if r["status"] != "running" or not alive(r)]


def purge_counts(index: Any, fn: str | None = None) -> Purged:
    """Delete the finished runs (and logs) of ``fn``, or of every function."""
    with index.write() as c:
        if not has_runs(c):
            return Purged()
        return _delete(c, [r["id"] for r in _finished_runs(c, fn)])


def purge(index: Any, fn: str | None = None) -> int:
    """Delete the finished runs (and logs) of ``fn``, or of every function; returns how many."""
    return purge_counts(index, fn).runs


def purge_orphans_counts(index: Any) -> Purged:
    """Delete runs (and logs) whose evaluation no longer exists."""
    with index.write() as c:
        _notes.purge_evaluations(c)  # an evaluation's notes and tags live as long as it does
        if not has_runs(c) or not _may_have_orphans(c):
            return Purged()
        ids = [r[0] for r in c.execute(
            "SELECT id FROM runs WHERE eval_id IS NOT NULL AND eval_id NOT IN (SELECT id FROM evaluations)")]
        return _delete(c, ids)


def _may_have_orphans(c: Any) -> bool:
    """Whether a run may name an evaluation that is gone, told by the kept counts without a pass
    over every run: the runs less those naming a stored evaluation (``run_counts.stored``, kept as
    evaluations go) less those naming none (``eval_id IS NULL``: a range of ``runs_eval``) are
    the orphans. Where the counts are not kept (or not to be trusted: a negative difference),
    the sweep runs as before; counts that drifted are recounted by ``doctor``."""
    from . import counts

    if not counts.available(c):
        return True
    runs, stored = c.execute("SELECT COALESCE(SUM(runs), 0), COALESCE(SUM(stored), 0) FROM run_counts").fetchone()
    unnamed = c.execute("SELECT COUNT(*) FROM runs WHERE eval_id IS NULL").fetchone()[0]
    return int(runs) - int(stored) - int(unnamed) != 0


def purge_orphans(index: Any) -> int:
    """Delete runs (and logs) whose evaluation no longer exists; returns how many."""
    return purge_orphans_counts(index).runs


#: a run's last write (its finish, its last update, its start): the expression of the index
#: ``runs_last_written`` (tracking.schema), which SQLite uses only for this very expression
LAST_WRITTEN = "MAX(COALESCE(finished, 0), COALESCE(updated, 0), COALESCE(started, 0))"


def stale_runs(index: Any, older_than: float, keep_evals: bool = True) -> list[dict]:
    """Finished runs with no stored evaluation (process runs, failed and lost runs) last written
    more than ``older_than`` seconds ago: what ``gc --older-than`` drops besides evaluations.
    Read from the index of the runs' last writes up to the cutoff (``runs_last_written``), so
    what it costs is the runs older than AGE, not every run of the store."""
    c = index.conn()
    if not has_runs(c):
        return []
    cutoff = time.time() - older_than
    cols = _RUN_COLS
    # a stored evaluation's logs go with it, judged by the evaluation's age
    mine = " AND (eval_id IS NULL OR NOT EXISTS (SELECT 1 FROM evaluations e WHERE e.id = r.eval_id))" if keep_evals else ""
    rows = [dict(zip(cols, r, strict=False)) for r in c.execute(
        f"SELECT {','.join(cols)} FROM runs r WHERE {LAST_WRITTEN} < ?{mine}", (cutoff,))]
    if not any(r["status"] == "running" for r in rows):
        return rows
    from .query import running_alive  # a live process's runs stay; lost ones go (``_finished_runs``)

    alive = running_alive(c)
    return [r for r in rows if r["status"] != "running" or not alive(r)]


def delete_runs(index: Any, ids: list[int]) -> Purged:
    """Delete these runs and their logs (runs still running are spared)."""
    if not ids:
        return Purged()
    with index.write() as c:
        if not has_runs(c):
            return Purged()
        return _delete(c, [r["id"] for r in _finished_among(c, ids)])


def _finished_among(c: Any, ids: list[int]) -> list[dict]:
    """``_finished_runs`` of these runs only (read by id, not every run of the store)."""
    rows: list[dict] = []
    for q, chunk in chunks(ids):
        rows += [dict(zip(_RUN_COLS, r, strict=False)) for r in
                 c.execute(f"SELECT {','.join(_RUN_COLS)} FROM runs WHERE id IN ({q})", chunk)]
    if not any(r["status"] == "running" for r in rows):
        return rows
    from .query import running_alive

    alive = running_alive(c)
    return [r for r in rows if r["status"] != "running" or not alive(r)]


def log_points(index: Any, run_ids: list[int]) -> int:
    """How many log points these runs hold (for a dry run)."""
    c = index.conn()
    if not has_runs(c) or not run_ids:
        return 0
    n = 0
    for q, chunk in chunks(run_ids):
        for t in ("scalars", "log_events"):
            n += c.execute(f"SELECT COUNT(*) FROM {t} WHERE run IN ({q})", chunk).fetchone()[0]
    return n


def index_bytes_freed(index: Any, run_ids: list[int], eval_ids: list[int]) -> int | None:
    """About how many bytes of the index deleting these runs (with their logs) and evaluations
    would free (a dry run's estimate): for each table, the share of its rows that would go
    times the pages of the table and of its indexes (SQLite's ``dbstat``), less each b-tree's root
    page, which stays however many rows go (a small store has a score of indexes: counting their
    roots made the estimate twice what gc freed). None where ``dbstat`` is not compiled in."""
    if not run_ids and not eval_ids:
        return 0  # (nothing goes: the pages of the whole index need not be walked to say so)
    c = index.conn()
    try:
        pages = {name: (int(n or 0), int(k or 0))
                 for name, n, k in c.execute("SELECT name, SUM(pgsize), COUNT(*) FROM dbstat GROUP BY name")}
    except sqlite3.Error:  # no dbstat compiled in: no estimate
        swallowed("tracking.retention: index_bytes_freed")
        return None
    by_table: dict[str, int] = {}
    for tbl, name in c.execute("SELECT tbl_name, name FROM sqlite_master WHERE type IN ('table', 'index')"):
        size, count = pages.get(name, (0, 0))
        root = size // count if count else 0
        by_table[tbl] = by_table.get(tbl, 0) + max(0, size - root)
    plan = [("evaluations", "id", eval_ids)]
    if has_runs(c):
        plan += [("runs", "id", run_ids)] + [(t, "run", run_ids) for t in _LOG_TABLES]
    total = 0.0
    for table, col, ids in plan:
        size = by_table.get(table, 0)
        if not ids or not size:
            continue
        rows = c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        if not rows:
            continue
        going = 0
        for q, chunk in chunks(ids):
            going += c.execute(f"SELECT COUNT(*) FROM {table} WHERE {col} IN ({q})", chunk).fetchone()[0]
        total += size * going / rows
    return int(total)
