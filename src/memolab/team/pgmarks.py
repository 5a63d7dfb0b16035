"""What team gc never drops, on PostgreSQL (team schema 3): keep marks (``memolab_keeps``) and the
snapshots recorded on the team (``memolab_snapshots``, ``memolab_snapshot_blobs``), mixed into
``PgIndex``. Every machine's team gc reads them, so a result kept on one machine, or a snapshot
taken on one, is never collected by a team gc run on another.

A team database at schema 1 or 2 has neither: ``marks_supported`` is False, the marks stay each
machine's own (team gc honours those of the machine running it), until ``memolab remote upgrade``.

Races with a team gc running meanwhile, each closed by an order or a lock:

- A keep mark is written before the row it keeps is published (the uploader), and
  ``delete_evaluations`` deletes no row whose key is marked in the same statement: a mark
  committed before that statement began always wins.
- A snapshot is recorded under ``pg_advisory_xact_lock_shared(GC_LOCK_KEY)`` and its blobs are
  uploaded (what is missing) after the record; team gc holds that lock exclusively from its last
  reading of what is referenced to its last blob deleted (``gc_lock``). So a gc either finished its
  deletes before the record (the upload that follows puts back whatever it took) or read the
  references after it (and keeps the snapshot's blobs).
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from ..errors import RemoteUnavailable, swallowed
from ..key import Key
from .pgschema import MARKS_SINCE, NOW, key_arrays

T = TypeVar("T")


#: the advisory lock team gc holds (exclusive) while it deletes blobs and a snapshot's record takes
#: (shared): 'memolab2'
GC_LOCK_KEY = int.from_bytes(b"memolab2", "big") & 0x7FFFFFFFFFFFFFFF
_KEY_ARRAYS = "unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS k(fn, code, args, schema)"
#: the snapshot's columns a listing gives
SNAPSHOT_COLUMNS = ("digest", "size", "kind", "files", "bytes", "name", "taken_by", "time", "used")


class MarksUnsupported(Exception):
    """The team index is at a schema without keep marks and snapshots (1, 2): `memolab remote upgrade`."""


class PgMarkIndex:
    """Keep marks and snapshots of ``PgIndex`` (which gives ``_run``, ``version``, ``who``)."""

    version: int
    who: str

    def _run(self, work: Callable[[Any], T], retry: bool = True, slow: bool = False) -> T:  # pragma: no cover
        raise NotImplementedError

    @property
    def marks_supported(self) -> bool:
        return self.version >= MARKS_SINCE

    def _need(self) -> None:
        if not self.marks_supported:
            raise MarksUnsupported(f"the team index is at schema {self.version}, which predates shared keep marks and "
                                   "snapshots: run `memolab remote upgrade`")

    # -- keep marks --------------------------------------------------------------------------
    def keep(self, keys: Sequence[Key], by: str | None = None) -> int:
        """Mark ``keys`` kept on the team (one statement): how many were not kept before."""
        self._need()
        keys = list(keys)
        if not keys:
            return 0
        cur = self._run(lambda c: c.execute(
            f"INSERT INTO memolab_keeps(fn, code, args, schema, time, kept_by) SELECT k.fn, k.code, k.args, k.schema, "
            f"{NOW}, %s FROM {_KEY_ARRAYS} ON CONFLICT DO NOTHING", [by or self.who, *key_arrays(keys)]), slow=True)
        return int(cur.rowcount)

    def unkeep(self, keys: Sequence[Key]) -> int:
        """Take the team's keep marks of ``keys`` off: how many there were."""
        self._need()
        keys = list(keys)
        if not keys:
            return 0
        cur = self._run(lambda c: c.execute(
            f"DELETE FROM memolab_keeps m USING {_KEY_ARRAYS} WHERE m.fn = k.fn AND m.code = k.code "
            "AND m.args = k.args AND m.schema = k.schema", key_arrays(keys)), slow=True)
        return int(cur.rowcount)

    def kept_keys(self) -> set[Key]:
        """Every key kept on the team (none before schema 3)."""
        if not self.marks_supported:
            return set()
        rows = self._run(lambda c: c.execute("SELECT fn, code, args, schema FROM memolab_keeps").fetchall(), slow=True)
        return {Key._make(r) for r in rows}

    # -- snapshots -----------------------------------------------------------------------------
    def record_snapshot(self, digest: str, size: int, kind: str, blobs: Collection[str], files: int, nbytes: int,
                        name: str | None = None) -> None:
        """Record snapshot ``digest`` (its manifest's size, kind, file count and bytes) holding
        ``blobs`` (its manifest included), or mark it used now if it is recorded; ``name`` is kept
        once given. Under the shared gc lock: a team gc deleting blobs now finishes first."""
        self._need()
        ds = sorted(set(blobs) | {digest})

        def work(c: Any) -> None:
            with c.transaction():
                c.execute("SELECT pg_advisory_xact_lock_shared(%s)", (GC_LOCK_KEY,))
                c.execute(f"INSERT INTO memolab_snapshots(digest, size, kind, files, bytes, name, taken_by, time, used) "
                          f"VALUES (%s, %s, %s, %s, %s, %s, %s, {NOW}, {NOW}) ON CONFLICT (digest) DO UPDATE SET "
                          "used = EXCLUDED.used, name = COALESCE(EXCLUDED.name, memolab_snapshots.name)",
                          (digest, int(size), kind, int(files), int(nbytes), name, self.who))
                c.execute("INSERT INTO memolab_snapshot_blobs(snapshot, digest) SELECT %s, d FROM unnest(%s::text[]) "
                          "AS d ON CONFLICT DO NOTHING", (digest, ds))
        self._run(work, slow=True)

    def touch_snapshot(self, digest: str) -> bool:
        """Mark a recorded snapshot used now (restored from the team); whether it is recorded."""
        if not self.marks_supported:
            return False
        cur = self._run(lambda c: c.execute(f"UPDATE memolab_snapshots SET used = {NOW} WHERE digest = %s", (digest,)))
        return int(cur.rowcount) > 0

    def forget_snapshot(self, digest: str) -> bool:
        """Take snapshot ``digest``'s record off the team (its blobs go at the next team gc unless
        something else holds them); whether it was recorded."""
        if not self.marks_supported:
            return False
        cur = self._run(lambda c: c.execute("DELETE FROM memolab_snapshots WHERE digest = %s", (digest,)), slow=True)
        return int(cur.rowcount) > 0

    def snapshots(self) -> list[dict[str, Any]]:
        if not self.marks_supported:
            return []
        rows = self._run(lambda c: c.execute(f"SELECT {', '.join(SNAPSHOT_COLUMNS)} FROM memolab_snapshots "
                                             "ORDER BY time").fetchall(), slow=True)
        return [dict(zip(SNAPSHOT_COLUMNS, r, strict=False)) for r in rows]

    def snapshot_blobs(self, unused_before: float | None = None) -> set[str]:
        """The blobs the team's snapshots hold, those of the unnamed ones unused since
        ``unused_before`` (the database's clock) left out."""
        if not self.marks_supported:
            return set()
        sql = "SELECT DISTINCT b.digest FROM memolab_snapshot_blobs b JOIN memolab_snapshots s ON s.digest = b.snapshot"
        args: tuple[Any, ...] = ()
        if unused_before is not None:
            sql += " WHERE s.name IS NOT NULL OR s.used >= %s"
            args = (float(unused_before),)
        return {r[0] for r in self._run(lambda c: c.execute(sql, args).fetchall(), slow=True)}

    def stale_snapshots(self, unused_before: float, drop: bool = False) -> list[str]:
        """The unnamed snapshots unused since ``unused_before``: let go with ``drop`` (team gc)."""
        if not self.marks_supported:
            return []
        sql = "FROM memolab_snapshots WHERE name IS NULL AND used < %s"
        if drop:
            rows = self._run(lambda c: c.execute(f"DELETE {sql} RETURNING digest", (float(unused_before),)).fetchall(),
                             slow=True)
        else:
            rows = self._run(lambda c: c.execute(f"SELECT digest {sql}", (float(unused_before),)).fetchall(), slow=True)
        return sorted(r[0] for r in rows)

    @contextmanager
    def gc_lock(self) -> Iterator[None]:
        """Held (exclusive, this session) by team gc from its last reading of the references to its
        last blob deleted: a snapshot is recorded before or after, never in between."""
        self._run(lambda c: c.execute("SELECT pg_advisory_lock(%s)", (GC_LOCK_KEY,)), slow=True)
        try:
            yield
        finally:
            try:
                self._run(lambda c: c.execute("SELECT pg_advisory_unlock(%s)", (GC_LOCK_KEY,)), retry=False)
            except (RemoteUnavailable, psycopg.Error):  # the session is gone, and its lock with it
                swallowed("team.pgmarks: gc_lock release")
