"""Scalar series for the dashboard's charts: one batched request per view, sized to the chart.

A chart ``px`` pixels wide cannot show more than ~``px`` distinct x positions, so a series is
sent as it is only while it has at most ``2 * px`` points. A longer one is summarised into at
most ``px`` buckets: the mean (the line) plus each bucket's min and max (the band), so a
one-point spike stays visible, as TensorBoard and W&B do. The last point is always exact.

**The summary level depends on the series, not on the chart's width.** A series of at least
``MIN_BLOCKS`` blocks (more than 960 points) is summarised from ``scalar_blocks`` (per-64-point
summaries kept by the sink): one bucket per block, or per several blocks when there are more
blocks than pixels. Reading 50 runs x 20 tags x 5,000 steps that way is ~4,000 summary rows per
tag instead of 250,000 points (0.1 s against 4.8 s on the reference machine). Choosing the level
by the width made a 1,400 px window read every point (a chart there was just too wide for the
blocks) and draw a 24-run view in 2.2-4.0 s, against 0.6-1.0 s at 1,280 px (issue 40; now the
same at every width: benchmarks/dashboard.py). A zoomed chart asks for the points of its range
(``window``). A shorter series is sent as logged (at most ``2 * px`` points) or bucketed by step;
so is one whose steps went backwards (blocks are then not step ranges).

Live refresh is incremental: the page says, per series it holds, how many points it has and
its last step; the answer holds only the points after those (a series that grew by more than
``2 * px`` points sends those new points bucketed). A series whose steps went backwards cannot
be extended that way and is sent whole again (``reset``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..store.inlist import chunks, placeholders
from ..tracking import counts, query, schema

#: a series of at least this many blocks is summarised from them, whatever the chart's width
MIN_BLOCKS = 16


def _f(x: float | None) -> float | None:
    # JSON has no NaN/inf; the page draws a gap for null
    return None if x is None or not math.isfinite(x) else x


# Done in SQL, not per value in Python (a sweep's view is ~400,000 numbers): wall time to the
# millisecond (14 characters of JSON, not 18) and +-inf as null (JSON has no inf; SQLite already
# stores NaN as NULL). The page draws a gap for null.
WALL = "ROUND({}, 3)"
FINITE = "(CASE WHEN abs({0}) <= 1.7976931348623157e308 THEN {0} END)"


def _raw(rows: list[tuple], n: int) -> dict[str, Any]:
    return {"n": n, "step": [r[0] for r in rows], "wall": [r[1] for r in rows], "value": [r[2] for r in rows]}


def _buckets(rows: list[tuple], n: int, last: tuple | None) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n, "step": [r[0] for r in rows], "wall": [r[1] for r in rows],
                           "value": [r[2] for r in rows], "min": [r[3] for r in rows], "max": [r[4] for r in rows],
                           "downsampled": True}
    if last is not None and (not out["step"] or out["step"][-1] != last[0]):
        # the final value is what people read off a curve: keep it exact
        v = last[2]
        for k, x in (("step", last[0]), ("wall", last[1]), ("value", v), ("min", v), ("max", v)):
            out[k].append(x)
    return out


POINT = f"step, {WALL.format('wall')}, {FINITE.format('value')}"


def _last(c: Any, run: int, tag: str) -> tuple | None:
    return c.execute(f"SELECT {POINT} FROM scalars WHERE run=? AND tag=? ORDER BY step DESC, seq DESC LIMIT 1",
                     (run, tag)).fetchone()


def _by_step(c: Any, run: int, tag: str, px: int, s0: int, s1: int, seen: int = 0) -> list[tuple]:
    width = max(1, -(-(s1 - s0 + 1) // px))
    return c.execute(
        f"SELECT MIN(step), {WALL.format('AVG(wall)')}, {FINITE.format('AVG(value)')}, {FINITE.format('MIN(value)')},"
        f" {FINITE.format('MAX(value)')} FROM scalars"
        " WHERE run=? AND tag=? AND step >= ? AND step <= ? AND seq >= ? GROUP BY (step - ?) / ? ORDER BY 1",
        (run, tag, s0, s1, seen, s0, width)).fetchall()


def full(c: Any, run: int, tag: str, n: int, ordered: bool, first: int, last_step: int, px: int) -> dict[str, Any]:
    """The whole series, at most ``2 * px`` points."""
    k = blocks_per_bucket(n, bool(ordered), px)
    if not k and n <= 2 * px:
        rows = c.execute(f"SELECT {POINT} FROM scalars WHERE run=? AND tag=? ORDER BY step, seq", (run, tag)).fetchall()
        return _raw(rows, n)
    if k:
        rows = [r[1:] for r in _from_blocks(c, [run], tag, k)]
    else:
        lo, hi = (first, last_step) if ordered else c.execute(
            "SELECT MIN(step), MAX(step) FROM scalars WHERE run=? AND tag=?", (run, tag)).fetchone()
        rows = _by_step(c, run, tag, px, lo, hi)
    return _buckets(rows, n, _last(c, run, tag))


def blocks_per_bucket(n: int, ordered: bool, px: int) -> int:
    """How many block summaries make one bucket of a series summarised from them; 0: not from
    blocks. Only a series past ``px`` blocks (64 points a pixel) gets a width-dependent answer."""
    nblocks = -(-n // schema.BLOCK)
    if not ordered or nblocks < MIN_BLOCKS:
        return 0
    return max(1, -(-nblocks // px))


def _from_blocks(c: Any, runs: Sequence[int], tag: str, k: int) -> list[tuple]:
    # one query for every run of a sweep whose series have the same length (the common case)
    q = placeholders(len(runs))
    if k == 1:  # a bucket per block: nothing to group
        return c.execute(
            f"SELECT run, step_min, {WALL.format('wall_sum / n')}, {FINITE.format('value_sum / NULLIF(value_n, 0)')},"
            f" {FINITE.format('vmin')}, {FINITE.format('vmax')} FROM scalar_blocks WHERE tag=? AND run IN ({q})"
            " ORDER BY run, block", (tag, *runs)).fetchall()
    return c.execute(
        f"SELECT run, MIN(step_min), {WALL.format('SUM(wall_sum) / SUM(n)')},"
        f" {FINITE.format('SUM(value_sum) / NULLIF(SUM(value_n), 0)')}, {FINITE.format('MIN(vmin)')},"
        f" {FINITE.format('MAX(vmax)')} FROM scalar_blocks WHERE tag=? AND run IN ({q})"
        " GROUP BY run, block / ? ORDER BY run, 2", (tag, *runs, k)).fetchall()


def after(c: Any, run: int, tag: str, n: int, seen: int, last_seen: int, px: int) -> dict[str, Any]:
    """The points of an ordered series after the ``seen`` first ones (whose last step was ``last_seen``)."""
    rows = c.execute(f"SELECT {POINT} FROM scalars WHERE run=? AND tag=? AND step >= ? AND seq >= ?"
                     " ORDER BY step, seq LIMIT ?", (run, tag, last_seen, seen, 2 * px + 1)).fetchall()
    if len(rows) <= 2 * px:
        out = _raw(rows, n)
    else:
        last = _last(c, run, tag)
        out = _buckets(_by_step(c, run, tag, px, last_seen, last[0], seen), n, last)  # type: ignore[index]  # many rows: the scalar's last point exists
    out["append"] = True
    return out


def window(index: Any, runs: Sequence[int], tag: str, px: int, s0: int, s1: int) -> dict[str, dict[str, dict[str, Any]]]:
    """``{tag: {run: series}}`` of the points with ``s0 <= step <= s1``: a zoomed chart's detail.

    Sized to the chart as a whole series is (as logged up to ``2 * px`` points, else ``px``
    buckets from the points), read from the points in that range only (the primary key's order:
    run, tag, step). ``n`` counts the points in the range."""
    c = query.ready(index)
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        (n,) = c.execute("SELECT COUNT(*) FROM scalars WHERE run=? AND tag=? AND step >= ? AND step <= ?",
                         (run, tag, s0, s1)).fetchone()
        if not n:
            continue
        if n <= 2 * px:
            rows = c.execute(f"SELECT {POINT} FROM scalars WHERE run=? AND tag=? AND step >= ? AND step <= ?"
                             " ORDER BY step, seq", (run, tag, s0, s1)).fetchall()
            out[str(run)] = _raw(rows, n)
        else:
            out[str(run)] = _buckets(_by_step(c, run, tag, px, s0, s1), n, None)
    return {tag: out} if out else {}


Seen = dict[str, dict[str, Sequence[int]]]


def batch(index: Any, runs: Sequence[int], tags: Sequence[str] | None, px: int,
          seen: Seen | None = None, skip: Sequence[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """``{tag: {run: series}}`` for every scalar tag (or only ``tags``; never those in ``skip``) of ``runs``.

    ``seen`` is ``{run: {tag: [points held, last step held]}}`` for what the page already has:
    a series it holds whole is left out, one that grew is sent as its new points (``append``),
    one whose steps went backwards is sent whole (``reset``).
    """
    c = query.ready(index)
    seen = seen or {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if not runs:
        return out
    metas: list[tuple[Any, ...]] = []
    for q, chunk in chunks(runs):
        sql = (f"SELECT run, tag, n, ordered, first_step, last_step, last_value, last_wall FROM scalar_tags"
               f" WHERE run IN ({q})")
        params: list[Any] = chunk
        if tags is not None:
            sql += f" AND tag IN ({placeholders(len(tags))})"
            params = params + list(tags)
        if skip:  # the page holds these already (the charts in view, asked for first)
            sql += f" AND tag NOT IN ({placeholders(len(skip))})"
            params = params + list(skip)
        metas.extend(c.execute(sql, params))
    # whole series summarised from blocks, grouped by tag and bucket size: 20 queries for a
    # 50-run x 20-tag view instead of 1,000
    grouped: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    rest = []
    for m in metas:
        run, tag, n, ordered, first, last_step, last_value, last_wall = m
        held = seen.get(str(run), {}).get(tag)
        k = blocks_per_bucket(n, bool(ordered), px) if held is None else 0
        if k:
            grouped.setdefault((tag, k), []).append(m)
        else:
            rest.append(m)
    for (tag, k), ms in grouped.items():
        for _, part in chunks(ms):  # (``_from_blocks`` makes its own list)
            rows: dict[int, list[tuple]] = {}
            for r in _from_blocks(c, [m[0] for m in part], tag, k):
                rows.setdefault(r[0], []).append(r[1:])
            for run, _, n, _, _, last_step, last_value, last_wall in part:
                last = (last_step, None if last_wall is None else round(last_wall, 3),
                        None if last_value is None or not math.isfinite(last_value) else last_value)
                out.setdefault(tag, {})[str(run)] = _buckets(rows.get(run, []), n, last)
    for run, tag, n, ordered, first, last_step, _, _ in rest:
        if not n:
            continue
        held = seen.get(str(run), {}).get(tag)
        if held is not None and held[0] == n:
            continue  # nothing new
        if held is not None and ordered and 0 < held[0] < n:
            s = after(c, run, tag, n, held[0], held[1], px)
        else:
            s = full(c, run, tag, n, bool(ordered), first, last_step, px)
            if held is not None and held[0]:
                s["reset"] = True
        out.setdefault(tag, {})[str(run)] = s
    return out


# Every point as logged, for a chart's CSV download: the charts hold summaries (a bucket's mean
# is no logged value), so the download reads the points themselves. NaN and +-inf, which JSON
# cannot carry as numbers, come as the strings a CSV reader takes for them.
def _exact(v: float) -> Any:
    return v if math.isfinite(v) else "nan" if v != v else "inf" if v > 0 else "-inf"


def point_count(index: Any, runs: Sequence[int], tag: str) -> int:
    c = query.ready(index)
    n = 0
    for q, part in chunks(runs):
        (k,) = c.execute(f"SELECT COALESCE(SUM(n), 0) FROM scalar_tags WHERE tag=? AND run IN ({q})",
                         (tag, *part)).fetchone()
        n += k
    return n


def points(index: Any, runs: Sequence[int], tag: str) -> dict[str, dict[str, list[Any]]]:
    """``{run: {"step", "wall", "value"}}``: every point of ``tag`` logged by ``runs``, in step order."""
    out: dict[str, dict[str, list[Any]]] = {}
    for run in runs:
        p = query.points(index, run, tag)
        if p["step"]:
            p["value"] = [_exact(v) for v in p["value"]]
            out[str(run)] = p
    return out


def heartbeat(index: Any) -> dict[str, Any]:
    """What changed, cheaply: counts and newest times of runs and evaluations, and the running runs.

    An idle page polls this and nothing else; ``sig`` changes when a run starts or ends or an
    evaluation is stored or hit, ``running`` (run id -> last write) when a running run logs.
    """
    c = query.ready(index)
    if counts.available(c):  # (kept counts: a few rows, not a count of every run)
        ev = c.execute("SELECT SUM(n), (SELECT MAX(id) FROM evaluations), SUM(hits) FROM evaluation_counts").fetchone()
        rn = c.execute("SELECT SUM(runs), SUM(stored), (SELECT COUNT(*) FROM runs WHERE status='running') "
                       "FROM run_counts").fetchone()
        running = {str(r): u for r, u in c.execute("SELECT id, updated FROM runs WHERE status='running'")}
        return {"sig": f"{ev[0]}:{ev[1]}:{ev[2]}:{rn[0]}:{rn[1]}:{rn[2]}",
                "running": running}
    ev = c.execute("SELECT COUNT(*), MAX(finished), SUM(hits) FROM evaluations").fetchone()
    rn = c.execute("SELECT COUNT(*), MAX(started), MAX(finished), SUM(status='running') FROM runs").fetchone()
    running = {str(r): u for r, u in c.execute("SELECT id, updated FROM runs WHERE status='running'")}
    return {"sig": f"{ev[0]}:{ev[1]}:{ev[2]}:{rn[0]}:{rn[1]}:{rn[2]}:{rn[3]}", "running": running}


def metric_stats(index: Any, fn: str, minmax: bool = False,
                 runs: list[int] | None = None) -> dict[str, dict[str, list[Any]]]:
    """``{run: {tag: [last, min, max, points]}}`` for the runs of ``fn``: the runs table's metric columns.

    Read from the per-tag summaries, and with ``minmax`` the per-block ones, never from the points;
    min and max are None unless asked for (a sweep's blocks are ~100,000 rows).
    """
    c = query.ready(index)
    out: dict[str, dict[str, list[Any]]] = {}
    if runs is None:  # (``runs``: those the page shows; else every run of ``fn``)
        runs = [r for (r,) in c.execute("SELECT id FROM runs WHERE fn=?", (fn,))]
    for q, part in chunks(runs):
        for run, tag, last, n in c.execute(f"SELECT run, tag, last_value, n FROM scalar_tags WHERE run IN ({q})", part):
            out.setdefault(str(run), {})[tag] = [_f(last), None, None, n]
        if not minmax:
            continue
        for run, tag, lo, hi in c.execute(
                f"SELECT run, tag, MIN(vmin), MAX(vmax) FROM scalar_blocks WHERE run IN ({q}) GROUP BY run, tag", part):
            d = out.get(str(run), {}).get(tag)
            if d is not None:
                d[1], d[2] = _f(lo), _f(hi)
    return out
