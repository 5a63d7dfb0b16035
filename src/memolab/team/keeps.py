"""Keep marks and snapshots on the team index, whichever database holds it: what ``memolab keep``,
the uploader, ``memolab sync``, ``memolab snapshot`` and team gc call.

``PgIndex`` holds them in its schema-3 tables (``team.pgmarks``); a team index on SQLite (one
host) is a local index, whose own ``keeps`` and ``snapshots`` tables (store schema 6) hold them:
``of(index)`` gives either the same operations.

When marks reach the team index:
- a result of a kept key (``@memo(keep=True)``, ``memolab keep``) that the uploader publishes: its
  mark first, in the same upload, then the row (a row never sits on the team unmarked);
- ``memolab keep`` / ``unkeep``: at once, when the team store is reachable; else ``memolab sync``
  sends every mark of this store (idempotent);
- never for a function kept off the team (``@memo(team=False)``).
"""
from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..key import Key
from ..store import marks

__all__ = ["of", "send_marks", "unsend_marks", "supported", "TEAM_KEEP_NOTE"]



#: what `memolab keep` says of a team index that predates shared marks
TEAM_KEEP_NOTE = ("the team index predates shared keep marks (schema < 3): team gc run elsewhere does not see "
                  "them until `memolab remote upgrade`")


class _SqliteMarks:
    """The team-marks operations of a team index on SQLite: its own tables (``store.marks``,
    ``snapshots``), which its ``referenced_digests`` and ``gc_plan`` already honour."""

    marks_supported = True

    def __init__(self, index: Any) -> None:
        self.index = index

    def keep(self, keys: Sequence[Key], by: str | None = None) -> int:
        with self.index.write() as c:
            return marks.keep_keys(c, keys, source=f"team:{by or ''}")

    def unkeep(self, keys: Sequence[Key]) -> int:
        with self.index.write() as c:
            return marks.unkeep_keys(c, keys)

    def kept_keys(self) -> set[Key]:
        return marks.kept_keys(self.index.conn())

    def record_snapshot(self, digest: str, size: int, kind: str, blobs: Collection[str], files: int, nbytes: int,
                        name: str | None = None) -> None:
        now = time.time()
        with self.index.write() as c:  # (the lock its gc deletes under)
            c.execute("INSERT INTO snapshots(digest, size, kind, files, bytes, name, source, time, used) "
                      "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(digest) DO UPDATE SET used = excluded.used, "
                      "name = COALESCE(excluded.name, snapshots.name)",
                      (digest, size, kind, files, nbytes, name, None, now, now))
            c.executemany("INSERT OR IGNORE INTO snapshot_blobs(snapshot, digest) VALUES (?, ?)",
                          [(digest, d) for d in sorted(set(blobs) | {digest})])

    def touch_snapshot(self, digest: str) -> bool:
        with self.index.write() as c:
            return int(c.execute("UPDATE snapshots SET used=? WHERE digest=?", (time.time(), digest)).rowcount) > 0

    def forget_snapshot(self, digest: str) -> bool:
        with self.index.write() as c:
            c.execute("DELETE FROM snapshot_blobs WHERE snapshot=?", (digest,))
            return int(c.execute("DELETE FROM snapshots WHERE digest=?", (digest,)).rowcount) > 0

    def snapshot_blobs(self, unused_before: float | None = None) -> set[str]:
        return marks.snapshot_refs(self.index.conn())  # (its referenced_digests includes them anyway)

    def stale_snapshots(self, unused_before: float, drop: bool = False) -> list[str]:
        return []  # its records follow the local rule (``memolab gc`` on its folder)

    @contextmanager
    def gc_lock(self) -> Iterator[None]:
        yield  # one host: a snapshot records under the index's write lock, checking its blobs


def of(index: Any) -> Any:
    """The marks operations of team index ``index`` (``PgIndex`` has them; SQLite: its tables)."""
    return index if hasattr(index, "record_snapshot") else _SqliteMarks(index)


def send_marks(store: Any, keys: Collection[Key], run: Any) -> int:
    """Mark ``keys`` kept on the team index through ``run`` (``link.run``/``attempt``), those of
    functions kept off the team left out: how many were new there. Nothing (0) where the team index
    predates shared marks."""
    ks = sorted(k for k in keys if k[0] not in marks.local_only_functions(store.local.index.conn()))
    if not ks:
        return 0

    def work() -> int:
        m = of(store.link.index)  # (read inside ``run``: the link connects lazily)
        return int(m.keep(ks, by=store.identity)) if m.marks_supported else 0
    return int(run(work))


def unsend_marks(store: Any, keys: Collection[Key], run: Any) -> int:
    """Take the team's marks of ``keys`` off through ``run``: how many there were."""
    def work() -> int:
        m = of(store.link.index)
        return int(m.unkeep(sorted(keys))) if m.marks_supported else 0
    return int(run(work))


def supported(store: Any, run: Any) -> bool:
    """Does the team index of ``store`` hold keep marks and snapshots (connecting through ``run``)?"""
    return bool(run(lambda: of(store.link.index).marks_supported))
