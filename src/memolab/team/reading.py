"""What a ``TeamStore`` reads from the team: a team row imported into the local store
(``adopt``: once per key at a time, its signature checked, its blobs downloaded and
verified before they are kept, recorded with ``publish``), the team's source texts for
``explain``, logs bundles, and ``pull`` (many rows at once).

A mixin of ``TeamStore`` (team/layered.py), which gives what it reads (``local``, ``link``,
``index``, ``blobs``, ``journal``, ``load_refusal``); the state it keeps of its own (which
team row of a key this process imported, and the lock of an import in progress) is made
by its ``__init__`` and read only here.
"""
from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .. import errors
from ..errors import CorruptBlob, RemoteUnavailable, swallowed
from ..key import key_of
from ..store import Store, marks, signing
from ..store.blobs import BlobFolder, fsync_dir as _fsync_dir
from ..store.sqlite import LOOKUP_ONLY, Index, Key
from . import journal
from .link import Link, Offline

__all__ = ["TeamReading", "local_fields", "blob_refs", "code_digests"]

_warn_once = functools.partial(errors.warn_once, stacklevel=2, scope="team")


#: fields of a team row that are the team's own bookkeeping, not the evaluation's
_TEAM_ONLY = ("id", "hits", "last_hit", "reason", "status", "logs", "uploaded_by") + LOOKUP_ONLY


def local_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _TEAM_ONLY}


def blob_refs(row: dict[str, Any]) -> list[tuple[str, int]]:
    """(digest, size) of the blobs a row refers to (none for an inline row)."""
    if row.get("inline") is not None:
        return []
    refs = [(row["payload"], int(row["payload_size"]))]
    refs.extend((d, int(n)) for d, n in json.loads(row["buffers"] or "[]"))
    return refs


def code_digests(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The digests of the code a row depended on (its snapshot's ``deps``; package and
    Python versions name no source text): what ``explain`` diffs against on a miss."""
    out: dict[str, None] = {}
    for r in rows:
        try:
            deps = json.loads(r.get("snapshot") or "{}").get("deps") or {}
        except (ValueError, AttributeError):
            continue  # a damaged snapshot: no diff, as locally
        for sym, d in deps.items():
            if isinstance(d, str) and not sym.startswith(("pkg:", "python:")):
                out[d] = None
    return list(out)


class TeamReading:
    """Importing the team's rows into the local store (a mixin of ``TeamStore``)."""

    local: Store
    link: Link
    index: Index
    blobs: BlobFolder
    journal: journal.Journal

    def __init__(self) -> None:
        self._tried: dict[Key, Any] = {}  # key -> team row id imported once by this process
        self._adopting: dict[Key, threading.Lock] = {}  # key -> held while this process imports it

    def load_refusal(self, run: Callable[[Callable[[], Any]], Any] | None = None) -> str | None:  # pragma: no cover
        raise NotImplementedError  # (TeamStore's: the team's key)

    def adopt(self, key: Key, trow: dict[str, Any]) -> dict[str, Any] | None:
        """Import team row ``trow`` of ``key`` into the local store; the local row, or None if refused."""
        # One import of a key at a time in this process: two threads (two Dask tasks of
        # one key on a worker) that both find the team row must not both download it,
        # nor may the second take the first's import for a refusal and compute.
        with self._adopting.setdefault(key, threading.Lock()):
            if self._tried.get(key) == trow.get("id"):
                # imported once already: by another thread just now (its local row is
                # there: a hit), or refused locally (stale code, unloadable: its local
                # row is out of use, so None: compute here)
                return self.local.lookup(key)
            return self._adopt(key, trow)

    def _adopt(self, key: Key, trow: dict[str, Any]) -> dict[str, Any] | None:
        self._tried[key] = trow.get("id")
        try:
            bad = self.load_refusal() or signing.problem(key, trow)
        except Offline:
            del self._tried[key]  # not refused: asked again once the team store is back
            return None
        if bad is not None:
            _warn_once(("sig", key), f"memolab: team result #{trow.get('id')} of {key[0]} refused ({bad}); recomputing")
            return None
        try:
            self.fetch_blobs([trow])
        except CorruptBlob as e:
            self.refuse(trow, e)
            return None
        except Offline:
            del self._tried[key]  # not refused: asked again once the team store is back
            return None
        from . import logs

        digest, bundle = logs.parse_ref(trow.get("logs"))
        self.record_imported([(key, trow)], {trow["logs"]: bundle} if bundle is not None else {})
        local = self.local.lookup(key)
        if local is not None and digest is not None:
            self.journal.want_logs(local["id"], digest)  # a large bundle: fetched off the hit path
        self.journal.want_sources(code_digests([trow]))  # for `explain`'s diffs, later and in a batch
        return local

    def team_texts(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """The team's source texts of those of ``digests`` this store lacks (one query; {} when
        offline): rows imported from the team then explain their misses with diffs, as
        local ones do."""
        ds = list(dict.fromkeys(digests))
        have = self.index.sources_of(ds) if ds else {}
        missing = [d for d in ds if d not in have]
        if not missing:
            return {}
        try:
            return self.link.run(lambda: self.link.index.sources_of(missing))
        except Offline:
            return {}

    def import_sources(self, digests: Iterable[str]) -> int:
        """Keep the team's source texts of ``digests`` that this store lacks (best effort);
        how many were added."""
        got = self.team_texts(digests)
        self.index.add_sources(got)
        return len(got)

    def record_imported(self, pairs: Sequence[tuple[Key, dict[str, Any]]], bundles: dict[str, bytes],
                        sources: dict[str, tuple[str, str]] | None = None) -> int:
        """Record team rows locally, their blobs in place: in ONE local transaction, the rows,
        their team ids (hit counts are forwarded by them) and the logs bundles at hand
        (``bundles`` by the rows' ``logs`` values). The logs once followed in transactions
        of their own, from the background thread: a team hit then waited on SQLite's lock
        for the import of the previous one (1.6 ms a hit, 3x its cost). A bundle that does
        not import costs its logs, never the row (``import_bundle`` is all or nothing, in
        a savepoint). Returns the runs imported."""
        from . import logs

        runs = 0
        with self.index.write() as c:
            ids = [eid for eid, _ in self.index.publish_many([(k, local_fields(r), {}) for k, r in pairs])]
            self.index.add_sources(sources or {})  # (nested: in this transaction)
            journal.remember_ids(self.index, [(eid, int(r["id"])) for eid, (_, r) in zip(ids, pairs, strict=False)
                                              if r.get("id") is not None], c)
            for eid, (_, r) in zip(ids, pairs, strict=False):
                data = bundles.get(r.get("logs") or "")
                if data is not None:
                    try:
                        runs += logs.import_bundle(self.index, data, eid)
                    except Exception:  # a bundle of any shape from the team: logs are never worth a failure
                        # (nothing of this bundle was kept)
                        swallowed("team.reading: TeamStore.record_imported")
        return runs

    def refuse(self, trow: dict[str, Any], e: BaseException) -> None:
        """A team result that does not verify: never used; taken out of use on the team too."""
        _warn_once(("corrupt", trow.get("id")), f"memolab: team result #{trow.get('id')} of {trow.get('fn')} cannot be "
                                                f"used ({getattr(e, 'reason', e)}); recomputing")
        digest = getattr(e, "digest", None)
        try:
            self.link.run(lambda: self.link.index.mark_corrupt(trow["id"], f"downloaded blob: {getattr(e, 'reason', e)}"))
            if digest:
                # it does not match its name, so nothing valid is lost; the recomputed
                # result's upload puts the right bytes under that name
                self.link.run(lambda: self.link.blobs.delete([digest]))
        except Offline:
            pass

    def fetch_blobs(self, rows: Sequence[dict[str, Any]]) -> int:
        """Download the blobs ``rows`` refer to that the local folder lacks, verified; how many."""
        want: dict[str, int] = {}
        for r in rows:
            for d, n in blob_refs(r):
                p = self.blobs.path(d)
                try:
                    if p.stat().st_size == n:
                        continue  # here already (loads verify it as for any local blob)
                except FileNotFoundError:
                    pass
                want[d] = n
        if not want:
            return 0
        # Straight into the blob folder: each download is written to a temporary file in the
        # store's tmp/ (litter the store reclaims if we crash), verified against its digest while
        # it streams, fsynced, and only then renamed onto its final name (team/blobs.py
        # ``_finish``): one fsync and one rename per blob, no bytes under a blob's name before
        # they are verified and durable. The directories' fsyncs (which make the renames
        # durable) are done once per batch below instead of once per blob: nothing relies on
        # the new names until the batch's rows are recorded, which happens after them. (Another
        # process that finds such a blob meanwhile and records a row of its own might, after a
        # power cut, name a blob whose rename was lost: that load is a miss (CorruptBlob ->
        # recompute), never a wrong result; the old per-blob fsync had the same window, shorter.)
        finals = {d: self.blobs.path(d) for d in want}
        dirs = {p.parent for p in finals.values()}
        made = False
        for parent in dirs:
            if not parent.is_dir():
                parent.mkdir(parents=True, exist_ok=True)
                made = True
        items = [(d, n, finals[d]) for d, n in want.items()]
        blobs = self.link.blobs
        try:
            self.link.run(lambda: blobs.get_many_to(items, tmp_dir=self.blobs.tmp, sync_dir=False))
        except CorruptBlob as e:
            if getattr(e, "digest", None):
                raise
            for d, n, final in items:  # which one: asked one by one (those in place are verified)
                if final.exists():
                    continue
                try:
                    self.link.run(lambda d=d, n=n, final=final: blobs.get_to(d, n, final, tmp_dir=self.blobs.tmp, sync_dir=False))  # type: ignore[misc]  # (defaults it cannot type)
                except CorruptBlob as e1:
                    raise _corrupt(d, getattr(e1, "reason", str(e1))) from e1
            raise
        finally:
            # also after a failure: the blobs that did arrive are in place and may be relied on
            for parent in dirs:
                _fsync_dir(parent)
            if made:
                _fsync_dir(self.blobs.dir)  # the new shard directories' own entries
        for d, n in want.items():
            try:
                st = finals[d].stat()
            except FileNotFoundError:
                continue  # collected at once by a concurrent gc: a load notices and fetches it again
            if st.st_size != n:  # verified while streaming (size and digest): cannot happen
                raise _corrupt(d, f"downloaded blob {d[:12]} has the wrong size")
            self.blobs.trust(d, st)  # verified a moment ago: trusted by stamp
        return len(want)

    def import_logs(self, eval_id: int, ref: str) -> int:
        """Attach the logs bundle of a team row (its ``logs`` value: inline, or a blob
        fetched now) to local evaluation ``eval_id`` (best effort)."""
        from . import logs

        try:
            digest, data = logs.parse_ref(ref)
            if data is None:
                if digest is None:
                    return 0
                size = self.link.run(lambda: _blob_size(self.link.blobs, digest))
                if size is None:
                    return 0
                data = bytes(self.link.run(lambda: self.link.blobs.get(digest, size)))  # verified against the digest
            return logs.import_bundle(self.index, data, eval_id)
        except Offline:
            return 0
        except Exception:  # logs are never worth a failure: a team backend of unknown behaviour, bundles of any shape
            swallowed("team.reading: TeamStore.import_logs")
            return 0  # logs are never worth a failure

    def fetch_bundles(self, digests: Sequence[str]) -> dict[str, bytes]:
        """Logs bundles by digest, fetched concurrently (as blobs are: one at a time they cost
        two round trips each, a third of a pull's time on loopback); those that cannot be had
        are left out (logs are best effort)."""
        from .blobs import run_all

        digests = list(dict.fromkeys(digests))
        if not digests:
            return {}

        def fetch(digest: str) -> bytes | None:
            blobs = self.link.blobs
            try:
                size = _blob_size(blobs, digest)
                return None if size is None else bytes(blobs.get(digest, size))  # verified against the digest
            except RemoteUnavailable:
                raise  # stops the batch: a dead network costs one timeout, not one per bundle
            except Exception:  # a team blob store of unknown behaviour (boto3): logs are never worth a failure
                swallowed("team.reading: TeamStore.fetch_bundles.fetch")
                return None

        try:
            datas = self.link.run(lambda: run_all(fetch, digests, getattr(self.link.blobs, "concurrency", 8)))
        except Exception:  # Offline, or anything else: logs are never worth a failure
            swallowed("team.reading: TeamStore.fetch_bundles")
            return {}
        return {d: x for d, x in zip(digests, datas, strict=False) if x is not None}

    def pull(self, fn: str | None = None, since: float | None = None,
             progress: Any = None) -> dict[str, Any]:
        """Import the team's results of ``fn`` finished after ``since``: one ``rows_since``
        query, the missing blobs downloaded concurrently, rows published locally in one
        transaction, their logs imported. ``Offline`` if the team store is down."""
        rows = self.link.attempt(lambda: self.link.index.rows_since(fn, since))
        keys = [key_of(r) for r in rows]
        have = self.index.lookup_many(keys)
        mine = marks.local_only_functions(self.index.conn())  # @memo(team=False): this machine's own
        have.update((k, {}) for k in keys if k[0] in mine)
        new, refused = [], 0
        wholesale = self.load_refusal(self.link.attempt)  # (said once, on stderr)
        for k, r in zip(keys, rows, strict=False):
            if k in have:
                continue
            if wholesale is not None or signing.problem(k, r) is not None:
                refused += 1
                continue
            new.append((k, r))
        fetched = 0
        ok: list[tuple[Key, dict[str, Any]]] = []
        # logs bundles by the rows' ``logs`` values: the small ones came inline in the rows; the
        # others come down meanwhile, alongside the blobs (attached once the rows are in)
        from . import logs

        bundles: dict[str, bytes] = {}
        want_logs: list[str] = []
        for _, r in new:
            digest, data = logs.parse_ref(r.get("logs"))
            if data is not None:
                bundles[r["logs"]] = data
            elif digest is not None:
                want_logs.append(digest)
        logs_thread = threading.Thread(target=lambda: bundles.update(self.fetch_bundles(want_logs)),
                                       name="memolab-pull-logs", daemon=True)
        if want_logs:
            logs_thread.start()
        step = 32
        for i in range(0, len(new), step):
            chunk = new[i:i + step]
            try:
                fetched += self.fetch_blobs([r for _, r in chunk])
                ok.extend(chunk)
            except CorruptBlob:
                for k, r in chunk:  # find the culprit(s) one by one
                    try:
                        fetched += self.fetch_blobs([r])
                        ok.append((k, r))
                    except CorruptBlob as e:
                        self.refuse(r, e)
                        refused += 1
            if progress is not None:
                progress(len(chunk), len(new))
        logs_n = 0
        if ok:
            texts = self.team_texts(code_digests(r for _, r in ok))  # for `explain`: one query
            if want_logs:
                logs_thread.join()
            logs_n = self.record_imported(ok, bundles, texts)
        return {"team_rows": len(rows), "imported": len(ok), "already_here": len(have), "refused": refused,
                "blobs": fetched, "runs": logs_n, "not_loaded": wholesale}


def _blob_size(blobs: Any, digest: str) -> int | None:
    """The size of a remote blob whose size no row records (a logs bundle: the team row
    keeps only its digest): a stat or a HEAD (``RemoteBlobs.size``), None if absent."""
    return blobs.size(digest)


def _corrupt(digest: str, reason: str) -> CorruptBlob:
    e = CorruptBlob(reason)
    e.digest = digest  # type: ignore[attr-defined]
    return e
