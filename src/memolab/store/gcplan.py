"""What ``gc --max-size`` weighs and drops: one plan for every index (``sqlite.Index``,
``team.pg.PgIndex``), given their rows least recently used first, and the bytes each
evaluation's logs take in a local index (the logs go with their evaluation).

Below the index modules (it imports none of them), so an index plans without
importing the tracking layer that writes the logs.
"""
from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ..key import Key
from .schema import has_runs

__all__ = ["plan_by_size", "log_bytes", "local_plan", "LAST_USE"]

#: a row's last use: its finish or its last hit (SQLite). The expression of the index
#: ``evaluations_last_use`` (schema.ADDED_EVALUATION_INDEXES): SQLite uses an index on an
#: expression only for that very expression
LAST_USE = "COALESCE(MAX(finished, COALESCE(last_hit, 0)), 0)"

GC_COLS = ("id", "fn", "finished", "last_hit", "size", "status")


def local_plan(index: Any, cutoff: float | None, max_size: int | None,
               kept: Collection[Key] = ()) -> list[dict[str, Any]]:
    """``sqlite.Index.gc_plan``: the rows to drop, selected in SQL over plain tuples. A row
    whose key is kept (``marks``: ``@memo(keep=True)``, ``memolab keep``; or one of ``kept``,
    the marks of another store: team gc run on a machine) is never among them while it holds a
    result ('done'); its bytes still count toward ``max_size``."""
    from .marks import KEPT_SQL

    c = index.conn()
    kept_sql = KEPT_SQL
    if kept:  # a TEMP table: never written to the file (a dry run may read a read-only store)
        c.execute("CREATE TEMP TABLE IF NOT EXISTS memolab_gc_kept(fn, code, args, schema)")
        c.execute("DELETE FROM temp.memolab_gc_kept")
        c.executemany("INSERT INTO temp.memolab_gc_kept VALUES (?,?,?,?)", [tuple(k) for k in kept])
        kept_sql = (f"({KEPT_SQL} OR EXISTS (SELECT 1 FROM temp.memolab_gc_kept g WHERE g.fn = e.fn "
                    "AND g.code = e.code AND g.args = e.args AND g.schema = e.schema))")
    cols = ",".join(GC_COLS)
    if max_size is None:
        # two index ranges, not one pass over every row: the rows out of use (``evaluations_unused``)
        # and the results last used before the cutoff (``evaluations_last_use``, where the store
        # has it: an index on LAST_USE itself, read from its start up to the cutoff)
        rows = c.execute(f"SELECT {cols}, {LAST_USE} FROM evaluations e WHERE status != 'done'").fetchall()
        if cutoff is not None:
            rows += c.execute(f"SELECT {cols}, {LAST_USE} FROM evaluations e WHERE status = 'done' "
                              f"AND {LAST_USE} < ? AND NOT {kept_sql}", (cutoff,)).fetchall()
        rows.sort(key=lambda r: r[-1])  # least recently used first
        return [dict(zip(GC_COLS, r[:-1], strict=False)) for r in rows]
    sql = (f"SELECT {cols}, payload, payload_size, buffers, inline IS NOT NULL, {LAST_USE}, {kept_sql} "
           f"FROM evaluations e ORDER BY {LAST_USE} ASC")
    drop = plan_by_size(c.execute(sql), cutoff, max_size, log_bytes(index))
    return [dict(zip(GC_COLS, r[:6], strict=False)) for r in drop]


def plan_by_size(rows: Iterable[tuple[Any, ...]], cutoff: float | None, max_size: int,
                 logs: Mapping[int, int] = MappingProxyType({})) -> list[tuple[Any, ...]]:
    """The rows ``gc_plan`` drops, given every evaluation least recently used first as
    (id, fn, finished, last_hit, size, status, payload, payload_size, buffers, is_inline,
    last_use[, kept]): those out of use or last used before ``cutoff``, then the least recently
    used until what is left fits ``max_size`` bytes. A kept row (``kept`` true) holding a result
    is never dropped: its bytes count, and the others go until what is left fits (all of them,
    when the kept rows alone exceed ``max_size``). A blob shared by several rows counts
    once, and only stops counting when its last keeper goes; inline bytes and ``logs``
    (id -> bytes) belong to their row alone. The same plan for every index."""
    drop: list[tuple[Any, ...]] = []
    keep: list[tuple[Any, ...]] = []
    uses: dict[str, list[int]] = {}  # blob digest -> [rows of `keep` using it, size]
    total = 0
    for r in rows:
        kept = len(r) > 11 and bool(r[11])
        if r[5] != "done" or (not kept and cutoff is not None and r[10] < cutoff):
            drop.append(r)
            continue
        if not kept:
            keep.append(r)
        total += logs.get(r[0], 0)
        if r[9]:
            total += r[4] or 0
            continue
        for d, n in _blobs_of(r[6], r[7], r[8]):
            u = uses.get(d)
            if u is None:
                uses[d] = [1, n]
                total += n
            else:
                u[0] += 1
    for r in keep:  # least recently used first
        if total <= max_size:
            break
        drop.append(r)
        total -= logs.get(r[0], 0)
        if r[9]:
            total -= r[4] or 0
            continue
        for d, _ in _blobs_of(r[6], r[7], r[8]):
            u = uses[d]
            u[0] -= 1
            if u[0] == 0:
                total -= u[1]
    return drop


def _blobs_of(payload: str | None, payload_size: int | None, buffers: str | None) -> list[tuple[str, int]]:
    out = [(payload, payload_size or 0)] if payload else []
    if buffers and buffers != "[]":
        try:
            out.extend((d, n) for d, n in json.loads(buffers))
        except (ValueError, TypeError):
            pass  # a damaged row: counted by its payload only
    return out


def log_bytes(index: Any) -> dict[int, int]:
    """About how many bytes of the index each evaluation's logs take: {eval_id: bytes}.

    Counted from the rows (their values plus a fixed per-row overhead), so that
    ``gc --max-size`` weighs logs too; exact page usage is not needed for that."""
    c = index.conn()
    if not has_runs(c):
        return {}
    out: dict[int, int] = {}
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
