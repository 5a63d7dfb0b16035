"""Logs across a resumed computation (``memolab.checkpoint``).

A checkpoint records how far its run's logs had got (``mark``: points per
scalar tag, the last event, the default-step counters). When a later process
resumes from it, its new run first receives a copy of exactly those logs
(``continue_from``), so the curves stored with the finished evaluation are
those of an uninterrupted run: what the crashed process logged after its last
checkpoint is not copied (it is logged again, by the resumed computation).
The crashed run itself is left as it was, like any run whose process died.
"""
from __future__ import annotations

import json
from typing import Any

from . import runs as _runs, schema


def mark() -> dict[str, Any] | None:
    """Flush the current run's logs and say how far they go."""
    run = _runs.in_call()
    if run is None:
        return None
    run.sink.flush()
    c = run.sink.index.conn()
    tags = {t: n for t, n in c.execute("SELECT tag, n FROM scalar_tags WHERE run=?", (run.id,))}
    last_event = c.execute("SELECT MAX(id) FROM log_events WHERE run=?", (run.id,)).fetchone()[0]
    return {"run": run.id, "scalars": tags, "events": last_event or 0, "steps": dict(run.steps)}


def continue_from(m: dict[str, Any] | None) -> None:
    """Give the current run the logs of ``m``'s run up to the mark, ahead of its own.

    The new run may already hold points of a tag when it resumes: the system metrics sampled
    before ``restore`` on a slow start, or what the program logged before it. The copied
    points go first and the run's own follow them, renumbered, with the tag's summaries
    rebuilt: a copy that skipped the points whose numbers were taken, and a sink counting on
    from its old numbers, made the next flush fail on the store's unique key (the resumed
    training raised from ``ck.step``)."""
    run = _runs.in_call()
    if run is None or not m:
        return
    src, dst = m["run"], run.id
    index = run.sink.index
    with run.sink.drained(), index.write() as c:  # our run's START row and points first, no flush meanwhile
        for tag, n in m["scalars"].items():
            old = c.execute("SELECT step, seq, wall, value FROM scalars WHERE run=? AND tag=? AND seq<? ORDER BY seq",
                            (src, tag, n)).fetchall()
            if not old:
                continue
            mine = c.execute("SELECT step, seq, wall, value FROM scalars WHERE run=? AND tag=? ORDER BY seq",
                             (dst, tag)).fetchall()
            if mine:
                c.execute("DELETE FROM scalars WHERE run=? AND tag=?", (dst, tag))
                c.execute("DELETE FROM scalar_blocks WHERE run=? AND tag=?", (dst, tag))
            rows = [(step, i, wall, value) for i, (step, _, wall, value) in enumerate(old + mine)]
            c.executemany("INSERT INTO scalars(run, tag, step, seq, wall, value) VALUES (?,?,?,?,?,?)",
                          [(dst, tag, *r) for r in rows])
            _summaries(c, dst, tag, rows)
        c.execute("INSERT INTO log_events(run, kind, tag, step, wall, meta, data) SELECT ?, kind, tag, step, wall, meta, "
                  "data FROM log_events WHERE run=? AND id<=? ORDER BY id", (dst, src, m["events"]))
        got = c.execute("SELECT hparams FROM runs WHERE id=?", (src,)).fetchone()
        mine_h = c.execute("SELECT hparams FROM runs WHERE id=?", (dst,)).fetchone()
        if got and mine_h:
            merged = json.loads(got[0] or "{}")
            merged.update(json.loads(mine_h[0] or "{}"))
            c.execute("UPDATE runs SET hparams=? WHERE id=?", (json.dumps(merged, default=str), dst))
    run.steps.update({str(k): int(v) for k, v in m.get("steps", {}).items()})


def _summaries(c: Any, run: int, tag: str, rows: list[Any]) -> None:
    """``scalar_tags`` and ``scalar_blocks`` for points copied in bulk (the sink keeps them per flush)."""
    last_step: int | None = None
    last_value = last_wall = None
    ordered = 1
    blocks: dict[int, list[Any]] = {}
    for step, seq, wall, value in rows:
        if last_step is not None and step < last_step:
            ordered = 0
        if last_step is None or step >= last_step:
            last_step, last_value, last_wall = step, value, wall
        b = blocks.get(seq // schema.BLOCK)
        if b is None:
            b = blocks[seq // schema.BLOCK] = [0, step, step, 0.0, 0.0, 0, None, None]
        b[0] += 1
        b[1], b[2] = min(b[1], step), max(b[2], step)
        b[3] += wall
        if value is not None:
            b[4] += value
            b[5] += 1
            b[6] = value if b[6] is None else min(b[6], value)
            b[7] = value if b[7] is None else max(b[7], value)
    c.execute("INSERT OR REPLACE INTO scalar_tags(run, tag, n, last_step, last_value, last_wall, first_step, ordered)"
              " VALUES (?,?,?,?,?,?,?,?)", (run, tag, len(rows), last_step, last_value, last_wall, rows[0][0], ordered))
    c.executemany("INSERT OR REPLACE INTO scalar_blocks(run, tag, block, n, step_min, step_max, wall_sum, value_sum,"
                  " value_n, vmin, vmax) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                  [(run, tag, k, *v) for k, v in blocks.items()])
