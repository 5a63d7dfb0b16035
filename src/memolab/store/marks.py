"""Keep marks and functions kept off the team store (schema 6).

**Keep marks** (``keeps``): an evaluation's key marked by ``@memo(keep=True)`` when it is stored,
or by ``memolab keep EVAL``. ``gc`` (``gcplan``) and team gc never drop a row whose key is marked,
so never its blobs either (a blob is collected only once no remaining row refers to it). The mark
is on the key, not the row id: a row memolab found damaged (not 'done') is no result and is
dropped as before, and the result recomputed for that key is kept again.

**Local-only functions** (``local_only``): ``@memo(team=False)``. In the process that defines
them (``LOCAL_ONLY``) their calls neither ask nor publish to the team store; the mark is written
into the index with their first result, so ``memolab sync`` and ``pull`` (other processes,
which never import the function) leave them alone too.

Tables, not columns of ``evaluations``: a mark outlives a row replaced for its key, and the
row's columns (which the team index mirrors) stay as they were. Below ``sqlite`` (it takes a
connection), so ``gcplan`` and the index read it without importing the rest.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..key import Key
from .inlist import chunks
from .schema import has_table

__all__ = ["LOCAL_ONLY", "KEEP", "KEPT_SQL", "keep_keys", "unkeep_keys", "kept_keys", "mark_local_only",
           "local_only_functions", "kept_summary", "is_local_only"]


#: symbols of the ``@memo(team=False)`` functions defined in this process
LOCAL_ONLY: set[str] = set()
#: symbols of the ``@memo(keep=True)`` functions defined in this process: their results are kept
#: from the moment they are stored (the uploader marks them on the team even before ``after_save``
#: has written the local mark)
KEEP: set[str] = set()

#: an unnamed snapshot neither taken nor restored for this long is let go by gc (``snapshots.py``;
#: team gc: taken or restored from the team)
SNAPSHOT_RECENT = 30 * 86400.0

#: is the ``evaluations`` row aliased ``e`` kept (an SQL expression, for the gc plan)
KEPT_SQL = ("EXISTS (SELECT 1 FROM keeps k WHERE k.fn = e.fn AND k.code = e.code AND k.args = e.args "
            "AND k.schema = e.schema)")


def keep_keys(c: sqlite3.Connection, keys: Iterable[Key], source: str) -> int:
    """Mark ``keys`` kept, in the caller's write transaction: how many were not kept before."""
    now = time.time()
    n = 0
    for k in keys:
        n += c.execute("INSERT OR IGNORE INTO keeps(fn, code, args, schema, time, source) VALUES (?,?,?,?,?,?)",
                       (*k, now, source)).rowcount
    return n


def unkeep_keys(c: sqlite3.Connection, keys: Iterable[Key]) -> int:
    """Take the keep marks of ``keys`` off (caller's write transaction): how many there were."""
    return sum(c.execute("DELETE FROM keeps WHERE fn=? AND code=? AND args=? AND schema=?", tuple(k)).rowcount
               for k in keys)


def kept_keys(c: sqlite3.Connection, keys: Sequence[Key] | None = None) -> set[Key]:
    """The kept ones of ``keys`` (all kept keys when None)."""
    if not has_table(c, "keeps"):
        return set()
    if keys is None:
        return {Key._make(r) for r in c.execute("SELECT fn, code, args, schema FROM keeps")}
    out: set[Key] = set()
    for k in keys:
        if c.execute("SELECT 1 FROM keeps WHERE fn=? AND code=? AND args=? AND schema=?", tuple(k)).fetchone():
            out.add(tuple(k))  # type: ignore[arg-type]
    return out


def kept_ids(c: sqlite3.Connection, ids: Sequence[int]) -> set[int]:
    """Which of the evaluations ``ids`` are kept."""
    if not ids or not has_table(c, "keeps"):
        return set()
    out: set[int] = set()
    for q, part in chunks([int(x) for x in ids]):
        out.update(r[0] for r in c.execute(f"SELECT e.id FROM evaluations e WHERE e.id IN ({q}) AND {KEPT_SQL}", part))
    return out


def kept_summary(c: sqlite3.Connection) -> tuple[int, int]:
    """(rows, bytes) of the kept evaluations (their own sizes; a blob shared with others counted
    in each): what gc will not drop, for its summary."""
    if not has_table(c, "keeps"):
        return 0, 0
    # from the keep marks to their rows by the key's index (CROSS: the marks the outer loop, whatever
    # the planner guesses of a table it has no statistics of): what is kept is read, not every row
    n, size = c.execute("SELECT COUNT(*), COALESCE(SUM(e.size), 0) FROM keeps k CROSS JOIN evaluations e ON e.fn = k.fn "
                        "AND e.code = k.code AND e.args = k.args AND e.schema = k.schema").fetchone()
    return int(n), int(size)


def mark_local_only(c: sqlite3.Connection, fn: str) -> None:
    """Record that ``fn`` is ``@memo(team=False)`` (caller's write transaction)."""
    c.execute("INSERT OR REPLACE INTO local_only(fn, time) VALUES (?, ?)", (fn, time.time()))


def unmark_local_only(c: sqlite3.Connection, fn: str) -> None:
    c.execute("DELETE FROM local_only WHERE fn=?", (fn,))


def local_only_functions(c: sqlite3.Connection) -> set[str]:
    """Every function kept off the team store: those of this process and those the index records."""
    out = set(LOCAL_ONLY)
    if has_table(c, "local_only"):
        out.update(r[0] for r in c.execute("SELECT fn FROM local_only"))
    return out


def is_local_only(fn: str, index: Any = None) -> bool:
    """Is ``fn`` kept off the team store (this process's functions; with ``index``, also those
    its ``local_only`` table records)."""
    if fn in LOCAL_ONLY:
        return True
    if index is None:
        return False
    c = index.conn()
    return has_table(c, "local_only") and c.execute("SELECT 1 FROM local_only WHERE fn=?", (fn,)).fetchone() is not None


def declare(symbol: str, team: bool, keep: bool = False) -> None:
    """A memoized function ``symbol`` defined in this process with ``@memo(team=team, keep=keep)``."""
    (LOCAL_ONLY.discard if team else LOCAL_ONLY.add)(symbol)
    (KEEP.add if keep else KEEP.discard)(symbol)


_recorded: set[tuple[str, str]] = set()  # (index path, fn): local_only written by this process


def after_save(store: Any, key: Key, keep: bool, team: bool) -> None:
    """What a memoized call of ``key`` stored adds to the index: its keep mark
    (``@memo(keep=True)``), and the record that its function is kept off the team store
    (``@memo(team=False)``, written once per process and index). Best effort: a store that
    cannot be written now leaves the mark to ``memolab keep`` (logged at DEBUG)."""
    index = getattr(store, "index", None)
    write = getattr(index, "write", None)
    if write is None or (not keep and team):
        return
    tag = (str(getattr(store, "root", "")), key[0])
    if not keep and tag in _recorded:
        return
    try:
        with write() as c:
            if not isinstance(c, sqlite3.Connection):
                return  # an index of another database (team.pg): the local store records marks
            if keep:
                keep_keys(c, [key], source="memo")
            if not team:
                mark_local_only(c, key[0])
        if not team:
            _recorded.add(tag)
    except (sqlite3.Error, OSError) as e:
        import logging

        logging.getLogger("memolab").debug("marks of %s not written: %r", key[0], e)


def snapshot_refs(c: sqlite3.Connection) -> set[str]:
    """The blobs the snapshots recorded in the index hold (``snapshots.py``): gc keeps them."""
    if not has_table(c, "snapshot_blobs"):
        return set()
    return {d for (d,) in c.execute("SELECT DISTINCT digest FROM snapshot_blobs")}
