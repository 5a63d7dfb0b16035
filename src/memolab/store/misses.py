"""Miss records: why a function missed, kept in the ``misses`` table of a local index
(a few per function) for ``memolab why`` and ``explain``."""
from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

__all__ = ["MISSES_KEPT", "insert_miss", "parse_miss", "recent_misses"]


#: misses kept per function (at least; see ``insert_miss``)
MISSES_KEPT = 20
_TRIM_EVERY = 16
_misses_here: dict[str, int] = {}


def insert_miss(c: sqlite3.Connection, fn: str, explanation: str) -> None:
    """Record why ``fn`` missed (JSON text), inside the caller's write transaction."""
    c.execute("INSERT INTO misses(fn, time, explanation) VALUES (?,?,?)", (fn, time.time(), explanation))
    # Keep the table small: the last 20 misses per function are plenty for `why`.
    # Trimmed on a process's first miss of ``fn`` and every 16th after it, not on
    # each: a trim deletes rows on older pages, which the WAL then writes in full
    # (every 4th: 2-3% of a small miss). At most 20 + 15 rows per process writing
    # meanwhile.
    n = _misses_here.get(fn, 0)
    _misses_here[fn] = n + 1
    if n % _TRIM_EVERY == 0:
        c.execute("DELETE FROM misses WHERE fn=:fn AND id <= (SELECT id FROM misses WHERE fn=:fn ORDER BY id DESC "
                  f"LIMIT 1 OFFSET {MISSES_KEPT})", {"fn": fn})


def parse_miss(fn: str, t: Any, raw: bytes | None) -> dict[str, Any]:
    """A miss record as written (plus ``time``); one whose text is not a JSON object (read as
    bytes, so text that is not UTF-8 is damage here, not an error) says so under ``damaged``,
    for whoever shows it (``explain.record_problem``)."""
    try:
        d = json.loads(raw or b"")
    except (ValueError, TypeError):
        d = None
    if not isinstance(d, dict):
        d = {"fn": fn, "damaged": "its text is not a JSON object"}
    d["time"] = t
    return d


def recent_misses(index: Any, fn: str, limit: int) -> list[dict[str, Any]]:
    """``fn``'s last ``limit`` miss records in ``index`` (a local ``Index``), newest first."""
    rows = index.conn().execute("SELECT time, CAST(explanation AS BLOB) FROM misses WHERE fn=? ORDER BY id DESC "
                                "LIMIT ?", (fn, limit)).fetchall()
    return [parse_miss(fn, t, raw) for t, raw in rows]
