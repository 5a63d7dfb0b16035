"""``memolab doctor``'s one walk over the index's rows: each evaluation and each run read once.

What each row is checked for, in the one pass over ``evaluations`` (in rowid order, read with a
bytes text factory so that one row that is not UTF-8 cannot stop the walk):

* text that is not UTF-8 (``garbled``: the row decoded with replacement characters, which doctor
  writes back and takes out of use);
* a done row whose columns do not decode (``store.health.row_problem``);
* a done row's result kept in the row itself, against its digests (``store.inline_problem``);
* the blob files a done row refers to (``refs``: what ``Index.referenced_blobs(only_done=True)``
  reads), for the missing and damaged blobs doctor marks;
* the per-function counts the triggers keep (``tracking/counts.py``), recounted.

And in the one pass over ``runs`` (only where the counts are kept): the per-function and script
counts and the run ids' shared digits. Both walks and the kept counts are read in one read
transaction, so they are one snapshot of the index; ``unchanged`` says (under doctor's write
lock) whether anything was committed since: if not, doctor decides from this walk, else it reads
again what it decides from, as it always did.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Tick = Callable[[int], None]


@dataclass
class Walk:
    #: id -> the row (text decoded with replacement characters) of rows holding text that is not UTF-8
    garbled: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: id -> why a done row cannot be used (its text, columns or inline result)
    undecodable: dict[int, str] = field(default_factory=dict)
    #: blob digest -> the done rows (not inline) that refer to it
    refs: dict[str, list[int]] = field(default_factory=dict)
    #: the kept counts that differ from the rows (``counts.differences``); empty where not kept
    drift: list[str] = field(default_factory=list)
    #: what the index of the runs' arguments says that the runs do not (``argindex.walk_differences``)
    args_drift: list[str] = field(default_factory=list)
    #: the recount, for a repair: ({(fn, script): (runs, stored, last)}, {fn: (n, hits, size, duration)}, digits)
    recount: tuple[dict[tuple[str, str], tuple[Any, ...]], dict[str, tuple[Any, ...]], int] | None = None
    conn: sqlite3.Connection | None = None
    version: int = 0

    def unchanged(self) -> bool:
        """Whether no other connection committed to the index since the walk began (``PRAGMA
        data_version``: any connection, this process's included). Ask it under the write lock."""
        if self.conn is None:
            return False
        try:
            return bool(self.conn.execute("PRAGMA data_version").fetchone()[0] == self.version)
        except sqlite3.Error:
            return False

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


#: what SQLite hands back for a number (a type test per value: a million rows, five columns each)
_NUMBER = (int, float)


def walk(index: Any, bar: Callable[[int], Any]) -> Walk:
    """Read every evaluation once (and every run once where the counts are kept) and check each
    as the module says. ``bar(total)``: a context manager with ``update(n)`` (doctor's progress),
    drawn by rowid (a count of the rows would be a walk of its own)."""
    from ..store import inline_problem
    from ..store.health import ReadOnlyIndex, row_problem
    from ..store.sqlite import EVAL_COLUMNS
    from ..tracking import argindex, counts

    out = Walk()
    conn = ReadOnlyIndex(index.path).conn()  # a private connection (read-only mounts included)
    out.conn = conn
    conn.text_factory = bytes
    out.version = conn.execute("PRAGMA data_version").fetchone()[0]
    have_inline = any(r[1] == b"inline" or r[1] == "inline" for r in conn.execute("PRAGMA table_info(evaluations)"))
    cols = [*EVAL_COLUMNS, "inline"]
    sql = f"SELECT {','.join(EVAL_COLUMNS)}, {'inline' if have_inline else 'NULL'} FROM evaluations"
    conn.execute("BEGIN")  # one snapshot: the kept counts, the evaluations and the runs
    try:
        keep = counts.available(conn)
        have = counts.kept(conn) if keep else None
        evals: dict[str, list[Any]] = {}
        exact = True
        # (two statements: one seek each, where MIN and MAX in one would walk the table)
        lo = conn.execute("SELECT MIN(id) FROM evaluations").fetchone()[0]
        hi = conn.execute("SELECT MAX(id) FROM evaluations").fetchone()[0]
        with bar(0 if lo is None else hi - lo + 1) as progress:
            at = lo or 0
            for k, r in enumerate(conn.execute(sql), 1):
                row: dict[str, Any] = {}
                bad = False
                for col, v in zip(cols, r, strict=False):
                    if isinstance(v, bytes) and col != "inline":
                        try:
                            v = v.decode("utf-8")
                        except UnicodeDecodeError:
                            v, bad = v.decode("utf-8", "replace"), True
                    row[col] = v
                i = row["id"]
                if k % 1000 == 0:
                    progress.update(i - at)
                    at = i
                if keep:
                    n = evals.setdefault(row["fn"], [0, 0, 0, 0.0])
                    hits, size, duration = row["hits"], row["size"] or 0, row["duration"] or 0
                    if type(hits) in _NUMBER and type(size) in _NUMBER and type(duration) in _NUMBER:
                        n[0] += 1
                        n[1] += hits
                        n[2] += size
                        n[3] += duration
                    else:
                        exact = False  # (a damaged number: SQLite's arithmetic is the judge, below)
                if bad:
                    out.garbled[i] = row
                    out.undecodable[i] = "text that is not UTF-8"
                    continue
                if row["status"] != "done":
                    continue
                why = row_problem(row)
                if why:
                    out.undecodable[i] = why
                if row["inline"] is not None:  # payload and buffers inside the row: checked against their digests
                    if why is None:
                        why = inline_problem(row)
                        if why:
                            out.undecodable[i] = why
                    continue  # (its digests name no file)
                if row["payload"]:
                    out.refs.setdefault(row["payload"], []).append(i)
                try:
                    buf = [d for d, _size in json.loads(row["buffers"] or "[]")]
                except (ValueError, TypeError):
                    continue  # a damaged row (marked above): its blobs are not kept for it
                for d in buf:
                    out.refs.setdefault(d, []).append(i)
            if hi is not None:
                progress.update(hi - at + 1)
        if keep and have is not None:
            runs: dict[tuple[str, str], list[Any]] = {}
            ids: list[int] = []
            # (and, where the runs' arguments are indexed, how many rows of it each run has)
            args = argindex.available(conn)
            pending = {r for (r,) in conn.execute("SELECT run FROM args_pending")} if args else set()
            args = args and argindex.EVERY not in pending  # (not filled yet: nothing to compare)
            leaves: dict[Any, int] = {}
            for rid, fn, script, stored, started, n_args in conn.execute(
                    "SELECT r.id, r.fn, COALESCE(r.script, ''), EXISTS (SELECT 1 FROM evaluations e WHERE e.id = r.eval_id), "
                    f"r.started, {argindex.leaf_count('r') if args else '0'} FROM runs r"):
                if args and rid not in pending:
                    leaves[fn] = leaves.get(fn, 0) + n_args
                g = runs.setdefault((counts.as_text(fn), counts.as_text(script)), [0, 0, None])
                g[0] += 1
                g[1] += stored
                if started is not None and (g[2] is None or started > g[2]):
                    g[2] = started
                ids.append(rid)
            shared = counts.digits_shared_by(ids)
            want_e = {fn: tuple(v) for fn, v in evals.items()}
            if not exact:
                want_e = {counts.as_text(r[0]): tuple(r[1:5]) for r in conn.execute(counts.RECOUNT_EVALUATIONS)}
            out.drift = counts.differences(have, {k: (v[0], v[1]) for k, v in runs.items()}, want_e, shared)
            out.recount = ({k: tuple(v) for k, v in runs.items()}, want_e, shared)
            if args:
                out.args_drift = argindex.walk_differences(conn, leaves)
    finally:
        conn.execute("COMMIT")
    return out
