"""The upkeep of the embedded store's SQLite index: usage, blob references, gc and clearing.

``IndexUpkeep`` is mixed into ``store.sqlite.Index`` (which gives ``conn()`` and ``write()``):
batched hit counts and blob stamps (``add_hits``, ``write_usage``), the blob stamps read and
written by the blob folder, which blobs the rows (and snapshots, checkpoints) reference, gc's
plan, deleting evaluations and clearing a function. What a call reads and writes (lookups,
claims, records) stays in ``store/sqlite.py``.
"""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..key import Key
from . import arming, marks
from .gcplan import local_plan


class IndexUpkeep:
    """Counts, stamps, references and deletion of the local index."""

    def conn(self) -> sqlite3.Connection:  # pragma: no cover (the index's own)
        raise NotImplementedError

    def write(self, arms: frozenset[arming.Write] = arming.EVERY) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover (the index's own)

    def add_hits(self, counts: dict[int, tuple[int, float]], stamps: dict[str, tuple[int, int, int]] | None = None) -> None:
        """Write batched hit counts and blob stamps in one transaction (off the hit path; armed for
        that write alone: a process that only hits makes one trigger, not thirteen)."""
        with self.write(arming.HIT_COUNTS) as c:
            write_usage(c, counts, stamps or {})

    def delete_evaluations(self, ids: Sequence[int]) -> None:
        with self.write() as c:
            c.executemany("DELETE FROM evaluations WHERE id=?", [(i,) for i in ids])

    # -- blob stamps and references ---------------------------------------------------------
    def get_stamp(self, digest: str) -> tuple[int, int, int] | None:
        row = self.conn().execute("SELECT size, mtime_ns, inode FROM blob_stamps WHERE digest=?", (digest,)).fetchone()
        return tuple(row) if row else None

    def set_stamp(self, digest: str, stamp: tuple[int, int, int]) -> None:
        with self.write() as c:
            c.execute("INSERT OR REPLACE INTO blob_stamps(digest, size, mtime_ns, inode) VALUES (?,?,?,?)", (digest, *stamp))

    def referenced_blobs(self, only_done: bool = False) -> dict[str, list[int]]:
        """blob digest -> ids of the evaluations that use it."""
        refs: dict[str, list[int]] = {}
        # Inline rows hold their bytes in the row: their digests name no file.
        sql = "SELECT id, payload, buffers FROM evaluations WHERE inline IS NULL" + (" AND status='done'" if only_done else "")
        for i, payload, buffers in self.conn().execute(sql):
            if payload:
                refs.setdefault(payload, []).append(i)
            try:
                buf_refs = [d for d, _size in json.loads(buffers or "[]")]
            except (ValueError, TypeError):
                continue  # a damaged row: a miss when asked for, recomputed and replaced (its blobs are not kept)
            for d in buf_refs:
                refs.setdefault(d, []).append(i)
        if not only_done:
            from . import checkpoints  # computations in flight hold blobs too (memolab.checkpoint)

            for d in marks.snapshot_refs(self.conn()):
                refs.setdefault(d, []).append(0)  # (0: held by a snapshot, no evaluation)
            for d, i in checkpoints.referenced(self.conn()).items():
                refs.setdefault(d, []).append(i)
        return refs

    def referenced_digests(self, exclude: Collection[int] = frozenset()) -> set[str]:
        """Digests of the blob files that evaluations (other than ``exclude``) refer to."""
        refs: set[str] = set()
        add = refs.add
        for i, payload, buffers in self.conn().execute("SELECT id, payload, buffers FROM evaluations WHERE inline IS NULL"):
            if i in exclude:
                continue
            if payload:
                add(payload)
            if buffers and buffers != "[]":
                try:
                    refs.update(d for d, _ in json.loads(buffers))
                except (ValueError, TypeError):
                    continue  # a damaged row: a miss when asked for; its blobs are not kept for it
        from . import checkpoints  # computations in flight hold blobs too (memolab.checkpoint)

        refs.update(checkpoints.referenced(self.conn()))
        refs.update(marks.snapshot_refs(self.conn()))  # files and folders by digest (memolab snapshot)
        return refs

    def gc_plan(self, cutoff: float | None, max_size: int | None, kept: Collection[Key] = ()) -> list[dict[str, Any]]:
        """See ``Store.gc_plan``; ``cutoff``: drop what was last used before it (``gcplan.local_plan``)."""
        return local_plan(self, cutoff, max_size, kept)

    def clear(self, fn: str | None = None) -> int:
        with self.write() as c:
            if fn is None:
                n = c.execute("DELETE FROM evaluations").rowcount
                c.execute("DELETE FROM misses")
                c.execute("DELETE FROM accepts")  # (a team's accepts are copied again from the team)
            else:
                n = c.execute("DELETE FROM evaluations WHERE fn=?", (fn,)).rowcount
                c.execute("DELETE FROM misses WHERE fn=?", (fn,))
                c.execute("DELETE FROM accepts WHERE fn=?", (fn,))
            from . import checkpoints

            checkpoints.clear(c, fn)
        return n


def write_usage(c: sqlite3.Connection, counts: dict[int, tuple[int, float]],
                stamps: dict[str, tuple[int, int, int]]) -> None:
    """Batched hit counts and blob stamps, inside the caller's write transaction."""
    if counts:  # (a time of None: now, by this index's clock)
        now = time.time()
        c.executemany("UPDATE evaluations SET hits=hits+?, last_hit=MAX(COALESCE(last_hit,0),?) WHERE id=?",
                      [(n, now if t is None else t, i) for i, (n, t) in counts.items()])
    if stamps:
        c.executemany("INSERT OR REPLACE INTO blob_stamps(digest, size, mtime_ns, inode) VALUES (?,?,?,?)",
                      [(d, *st) for d, st in stamps.items()])

