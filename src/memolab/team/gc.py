"""``memolab gc --remote``: collect the team store, driven by the team index.

What goes:

1. **Rows**, chosen by the team index exactly as ``memolab gc`` chooses local
   ones (``gc_plan``): rows out of use (corrupt, stale), rows not used for
   ``older_than`` seconds, then the least recently used until the blobs fit
   ``max_size``. Never a row whose key is kept (``@memo(keep=True)``, ``memolab keep``): on the
   team index (schema 3, ``team.keeps``: every machine's marks), or in the local store of the
   machine running team gc; its bytes count toward ``max_size``, it and its blobs stay. A mark
   made after the plan still wins: ``delete_evaluations`` deletes no kept row.
   "Used" is team-wide: a row's ``last_hit`` on the team index
   grows with every machine's hits, local ones included (``team/hits.py``), so a
   result that everyone reads from their local caches is not taken for unused.
2. **Blobs** that no remaining row refers to (payloads, buffers, logs bundles),
   and only those last written more than ``grace`` seconds ago.
   Never a blob a snapshot holds (``memolab snapshot``): those recorded on the team index (every
   machine's), and those recorded on the machine running team gc. The team's unnamed snapshots
   unused (taken or restored from the team) for ``marks.SNAPSHOT_RECENT`` (30 days) are let go first,
   as ``gc`` does locally; a named one stays until ``memolab snapshot --forget``.
3. **Abandoned multipart uploads** of blobs (S3: a process killed mid-upload leaves its
   parts, billed, until the upload is aborted) started more than ``grace`` seconds ago.

Order and races (the team store has no transaction spanning the index and the
bucket, so each step is chosen to be safe on its own):

- Rows are deleted first, blobs after: a reader never finds a row whose blobs
  were deleted by this gc. (A reader that looked a row up just before it went
  may find a blob gone: a ``MissingBlob``, a miss that recomputes, never a wrong
  result: every download is verified.)
- The grace period protects uploads in flight: a writer PUTs its blobs first and
  publishes its row after, so for a while its blobs are referenced by nothing.
  A blob younger than ``grace`` (its object's last-modified time) is never
  deleted. The clocks of this machine and the object store must agree to well
  within the grace period (default one hour).
- References are read again right before blobs are deleted: a row published
  since the plan keeps its blobs. Left open: an upload that found an *old* blob
  already there (content-addressed: equal bytes), whose row is published between
  that re-read and the delete. Its row then refers to a missing blob: on the
  next hit the download fails, the row is taken out of use and the result is
  recomputed and uploaded again. A lost result, never a wrong one.
- A snapshot is recorded on the team index before its blobs are uploaded, under a shared lock
  that team gc holds exclusively from that re-read to its last delete (``team.pgmarks``): a
  snapshot's blob is never deleted once it is recorded (the upload after the record puts back
  whatever a gc that finished just before took).
- Nothing is deleted without ``--yes``: the default is a dry run.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..key import Key

#: blobs last written less than this many seconds ago are never deleted
DEFAULT_GRACE = 3600.0
_BATCH = 1000


@dataclass
class Plan:
    #: team rows to drop, least recently used first (id, fn, finished, last_hit, size, status)
    rows: list[dict[str, Any]]
    #: blobs referenced by no row once ``rows`` are gone and older than the grace: (digest, size)
    blobs: list[tuple[str, int]]
    #: blobs referenced by no row but younger than the grace (uploads in flight): kept
    young: list[tuple[str, int]] = field(default_factory=list)
    #: objects in the blob store, and their bytes, before anything is deleted
    listed: int = 0
    listed_bytes: int = 0
    #: multipart uploads started before the grace period and never completed: (key, id, initiated)
    uploads: list[tuple[str, str, float]] = field(default_factory=list)
    grace: float = DEFAULT_GRACE
    #: team leases not heart-beaten for the grace period (their owners are dead)
    leases: int = 0
    #: team rows this machine's keep marks protect, and their bytes
    kept: int = 0
    kept_bytes: int = 0
    #: blobs held by this machine's recorded snapshots (never deleted)
    held: set[str] = field(default_factory=set)
    #: the team's unnamed snapshots unused since ``snapshots_cutoff`` (the database's clock): let go
    stale_snapshots: list[str] = field(default_factory=list)
    snapshots_cutoff: float | None = None

    def summary(self, dry_run: bool) -> dict[str, Any]:
        return {"evaluations": len(self.rows), "evaluation_ids": [r["id"] for r in self.rows],
                "blobs": len(self.blobs), "blob_bytes": sum(n for _, n in self.blobs),
                "young_blobs_kept": len(self.young), "young_bytes_kept": sum(n for _, n in self.young),
                "remote_objects": self.listed, "remote_bytes": self.listed_bytes,
                "abandoned_uploads": len(self.uploads), "stale_leases": self.leases, "kept_evaluations": self.kept,
                "kept_bytes": self.kept_bytes, "stale_snapshots": len(self.stale_snapshots), "dry_run": dry_run}


def plan(index: Any, blobs: Any, older_than: float | None = None, max_size: int | None = None,
         grace: float = DEFAULT_GRACE, now: float | None = None,
         kept: Collection[Key] = (), held: Collection[str] = ()) -> Plan:
    """What ``gc --remote`` would delete now (nothing is changed); ``kept``: keys never dropped
    besides those kept on the team index; ``held``: blobs never deleted besides those of the
    snapshots recorded on the team index (the snapshots recorded on this machine)."""
    from ..store.marks import SNAPSHOT_RECENT as RECENT
    from .keeps import of

    now = index.clock() if now is None else now  # the database's clock: a machine's may be off by days
    marks = of(index)
    kept = set(kept) | marks.kept_keys()
    rows = index.gc_plan(None if older_than is None else now - older_than, max_size, kept)
    out = Plan(rows, [], grace=grace, held=set(held))
    out.snapshots_cutoff = now - RECENT
    out.stale_snapshots = marks.stale_snapshots(out.snapshots_cutoff)
    refs = (index.referenced_digests(exclude={r["id"] for r in rows}) | out.held
            | marks.snapshot_blobs(out.snapshots_cutoff))
    ks = list(kept)
    for i in range(0, len(ks), _BATCH):
        found = index.lookup_many(ks[i:i + _BATCH])
        out.kept += len(found)
        out.kept_bytes += sum(int(r.get("size") or 0) for r in found.values())
    oldest_kept = now - grace
    for digest, size, modified in blobs.list():
        out.listed += 1
        out.listed_bytes += size
        if digest in refs:
            continue
        (out.blobs if modified <= oldest_kept else out.young).append((digest, size))
    leases = getattr(index, "stale_leases", None)  # PostgreSQL: a SQLite team index has its own expiry
    if leases is not None:
        out.leases = leases(grace)
    stale = getattr(blobs, "stale_uploads", None)  # S3 only: a file:// upload leaves a tmp/ file
    if stale is not None:
        out.uploads = stale(oldest_kept)
    return out


def execute(index: Any, blobs: Any, p: Plan, progress: Any = None) -> dict[str, Any]:
    """Delete what ``p`` planned: rows first, then the blobs still unreferenced."""
    ids = [r["id"] for r in p.rows]
    for i in range(0, len(ids), _BATCH):
        index.delete_evaluations(ids[i:i + _BATCH])
        if progress is not None:
            progress(len(ids[i:i + _BATCH]))
    from .keeps import of

    marks = of(index)
    if p.stale_snapshots and p.snapshots_cutoff is not None:  # (those still stale: one restored since stays)
        p.stale_snapshots = marks.stale_snapshots(p.snapshots_cutoff, drop=True)
    with marks.gc_lock():  # a snapshot is recorded on the team before this re-read or after the last delete
        # again: rows published and snapshots recorded since the plan keep their blobs
        refs = index.referenced_digests() | p.held | marks.snapshot_blobs(p.snapshots_cutoff)
        dead = [(d, n) for d, n in p.blobs if d not in refs]
        for i in range(0, len(dead), _BATCH):
            blobs.delete([d for d, _ in dead[i:i + _BATCH]])
            if progress is not None:
                progress(len(dead[i:i + _BATCH]))
    p.blobs = dead
    if p.uploads:
        blobs.abort_uploads(p.uploads)
    if p.leases:
        p.leases = index.stale_leases(p.grace, drop=True)
    return p.summary(dry_run=False)
