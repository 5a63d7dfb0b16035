"""What ``gc --max-size`` weighs and drops: one plan for every index (``sqlite.Index``,
``team.pg.PgIndex``), given their rows least recently used first, and the bytes each
evaluation's logs take in a local index (the logs go with their evaluation).

Below the index modules (it imports none of them), so an index plans without
importing the tracking layer that writes the logs.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["plan_by_size", "log_bytes"]


def plan_by_size(rows: Iterable[tuple[Any, ...]], cutoff: float | None, max_size: int,
                 logs: Mapping[int, int] = MappingProxyType({})) -> list[tuple[Any, ...]]:
    """The rows ``gc_plan`` drops, given every evaluation least recently used first as
    (id, fn, finished, last_hit, size, status, payload, payload_size, buffers, is_inline,
    last_use): those out of use or last used before ``cutoff``, then the least recently
    used until what is left fits ``max_size`` bytes. A blob shared by several rows counts
    once, and only stops counting when its last keeper goes; inline bytes and ``logs``
    (id -> bytes) belong to their row alone. The same plan for every index."""
    drop: list[tuple[Any, ...]] = []
    keep: list[tuple[Any, ...]] = []
    uses: dict[str, list[int]] = {}  # blob digest -> [rows of `keep` using it, size]
    total = 0
    for r in rows:
        if r[5] != "done" or (cutoff is not None and r[10] < cutoff):
            drop.append(r)
            continue
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
    if c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone() is None:
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
