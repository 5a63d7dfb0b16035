"""The upload queue: the local store is the journal of what the team store lacks.

A result computed on this machine is recorded in the local index at once, and a
row naming its key goes into ``team_uploads`` IN THE SAME TRANSACTION (the
``also`` hook of ``Index.record``). So whatever kills the process afterwards (a
crash, a SIGKILL, a dead network, a laptop lid) nothing computed is lost: the
result is in the local store and its upload is still queued; the next process
with the team store configured, or ``memolab sync``, uploads it.

The uploader is one background thread per store. For each queued key it PUTs
the result's blobs (idempotent: content-addressed, an existing object is never
rewritten), then the logs bundle, then ``publish``es the row into the team index
(a 'done' row there is never replaced: the first upload wins), drops the team
lease, and deletes the queue row. Batches of up to ``BATCH`` keys: one
``put_many`` (concurrent) and one ``publish_many`` (one round trip) each. A
failure marks the team store down (``link``); the thread probes it again with
growing intervals. At exit the queue gets a bounded wait (``DRAIN_SECONDS``) to
drain while the team store is up; what is left stays queued.

The table is created with ``IF NOT EXISTS``: no local schema version bump, and
a memolab without the team layer simply ignores it.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import swallowed
from ..settings import config
from ..store import marks
from ..store.inlist import chunks
from ..store.sqlite import LOOKUP_ONLY, Key
from . import keeps
from .link import Failed, Offline

DDL = """CREATE TABLE IF NOT EXISTS team_uploads(
    fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    queued REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    PRIMARY KEY(fn, code, args, schema)
)"""

#: local evaluation id -> the team row it is a copy of (imported) or was published as (uploaded):
#: what forwards this machine's hits to the team index (team-wide last use, for a team gc)
#: ``sent``: how many of the local row's hits the team row has been given already
IDS_DDL = """CREATE TABLE IF NOT EXISTS team_ids(local_id INTEGER PRIMARY KEY, team_id INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0)"""

#: keys this store published, until a later look finds them on the team index: a database
#: that acknowledged a write and then lost it (``synchronous_commit = off`` and a crash, a
#: failover to a replica behind) is noticed, and the result sent again (``Journal.reconcile``)
UNCONFIRMED_DDL = """CREATE TABLE IF NOT EXISTS team_unconfirmed(
    fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
    published REAL NOT NULL,
    PRIMARY KEY(fn, code, args, schema)
)"""

#: how long after its publish the background thread confirms a row: by then the database has
#: flushed it (PostgreSQL's WAL writer: every 200 ms by default), or lost it in a crash
CONFIRM_AFTER = 10.0
#: a publish still unconfirmed after this long is forgotten, not checked: the team may have
#: collected the row on purpose since (``gc --remote``), and a lost write is lost within seconds
CONFIRM_WITHIN = 86400.0

BATCH = 64
#: an item younger than this waits, so that a burst of results goes up in one batch (an item
#: whose logs are still being written waits for them whatever its age: ``Journal.hold``)
MIN_AGE = 0.3
#: how long the exit of a process may wait for its queue to drain (``$MEMOLAB_REMOTE_DRAIN``)
DRAIN_SECONDS = config.env_setting("MEMOLAB_REMOTE_DRAIN")

#: columns of a local row that are this store's own, not the evaluation's
_LOCAL_ONLY = ("id", "hits", "last_hit", "reason", "status") + LOOKUP_ONLY


def ensure(c: sqlite3.Connection) -> None:
    c.execute(DDL)
    c.execute(IDS_DDL)
    c.execute(UNCONFIRMED_DDL)


def remember_ids(index: Any, pairs: Sequence[tuple[int, int]], c: sqlite3.Connection | None = None) -> None:
    """Record (local id, team id) pairs (best effort: they only route hit counts)."""
    if not pairs:
        return
    # hits counted before the mapping existed (a local result uploaded later) are owed to the team too
    sql = "INSERT OR REPLACE INTO team_ids(local_id, team_id, sent) VALUES (?,?,0)"
    try:
        if c is not None:
            c.executemany(sql, pairs)
        else:
            with index.write() as w:
                w.executemany(sql, pairs)
    except sqlite3.Error:
        swallowed("team.journal: remember_ids")


def unsent_hits(index: Any, limit: int = 1000) -> list[tuple[int, int, int, float]]:
    """(local id, team id, hits not yet sent, last hit) of rows hit since their last forwarding."""
    try:
        return index.conn().execute(
            "SELECT t.local_id, t.team_id, e.hits - t.sent, COALESCE(e.last_hit, 0) FROM team_ids t "
            "JOIN evaluations e ON e.id = t.local_id WHERE e.hits > t.sent LIMIT ?", (limit,)).fetchall()
    except sqlite3.Error:
        return []


def claim_hits(index: Any, limit: int = 1000) -> list[tuple[int, int, int, float]]:
    """``unsent_hits``, marked sent in the same write transaction: two forwarders (the uploader
    thread and the exit, ``memolab sync`` in another process) never send the same hits twice.
    A forwarder whose send fails gives them back (``unclaim_hits``)."""
    try:
        with index.write() as c:
            rows = unsent_hits(index, limit)
            c.executemany("UPDATE team_ids SET sent = sent + ? WHERE local_id = ?", [(n, i) for i, _, n, _ in rows])
    except sqlite3.Error:
        return []
    return rows


def unclaim_hits(index: Any, rows: Sequence[tuple[int, int, int, float]]) -> None:
    with index.write() as c:
        c.executemany("UPDATE team_ids SET sent = sent - ? WHERE local_id = ?", [(n, i) for i, _, n, _ in rows])


def enqueue(c: sqlite3.Connection, key: Key, owner: str) -> None:
    """Queue ``key`` for upload, inside the caller's write transaction (that of the result)."""
    try:
        c.execute("INSERT OR REPLACE INTO team_uploads(fn, code, args, schema, owner, queued) VALUES (?,?,?,?,?,?)",
                  (*key, owner, time.time()))
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        ensure(c)
        c.execute("INSERT OR REPLACE INTO team_uploads(fn, code, args, schema, owner, queued) VALUES (?,?,?,?,?,?)",
                  (*key, owner, time.time()))


def count(index: Any) -> int:
    try:
        return int(index.conn().execute("SELECT COUNT(*) FROM team_uploads").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def failing(index: Any) -> tuple[int, str | None]:
    """Queued results the team store refused (not an outage): how many, and the last error."""
    try:
        c = index.conn()
        n = c.execute("SELECT COUNT(*) FROM team_uploads WHERE error IS NOT NULL").fetchone()[0]
        row = c.execute("SELECT error FROM team_uploads WHERE error IS NOT NULL ORDER BY attempts DESC LIMIT 1").fetchone()
        return int(n), row[0] if row else None
    except sqlite3.Error:
        return 0, None


def uploaded_count(index: Any) -> int:
    try:
        row = index.conn().execute("SELECT value FROM meta WHERE key='team_uploaded'").fetchone()
        return int(row[0]) if row else 0
    except (sqlite3.Error, ValueError):
        return 0


def team_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A local row as it travels to the team index (fields verbatim: the signature still verifies)."""
    return {k: v for k, v in row.items() if k not in _LOCAL_ONLY}


#: False in a process that uploads in the foreground only (``memolab sync``): no background
#: uploader is started there, so what sync reports as uploaded is all that left the queue
#: (the thread used to take part of the queue first, and sync said "uploaded 0")
background = True


def foreground_only() -> None:
    global background
    background = False


class Journal:
    def __init__(self, store: Any) -> None:
        self.store = store
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._upload_lock = threading.Lock()  # one batch at a time (thread, sync, exit)
        # one importer at a time: the exit's import waits (bounded) for the thread's import in
        # flight, which a daemon thread would otherwise lose at exit (a large bundle's GET)
        self._logs_lock = threading.Lock()
        self._stop = False
        #: a read-only process (``memolab remote status``): nothing is uploaded at exit
        self.read_only = False
        #: (local eval id, the team row's ``logs`` value) to import off the hit path
        self.logs_wanted: list[tuple[int, str]] = []
        #: digests of source texts to copy from the team (``TeamStore.import_sources``)
        self.sources_wanted: dict[str, None] = {}
        #: keys saved by this process whose run has not written its logs yet (``hold``)
        self._held: dict[Key, int] = {}
        self._held_lock = threading.Lock()

    # -- the background thread ------------------------------------------------------------
    def wake(self) -> None:
        if not background:
            return
        if self._thread is None or not self._thread.is_alive():
            with self._start_lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._loop, name="memolab-team-uploader", daemon=True)
                    self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """End the background thread (after the batch in flight, if any); not waited for."""
        self._stop = True
        self._wake.set()

    def join(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for a stopped background thread to end its round; whether
        it has (or none runs). Hit counts it claimed are marked sent before they go: until it
        ends, they may be in flight."""
        th = self._thread
        if th is None or th is threading.current_thread():
            return True
        th.join(timeout)
        return not th.is_alive()

    def _loop(self) -> None:
        link = self.store.link
        while not self._stop:
            self._wake.wait(timeout=self._next_wait())
            self._wake.clear()
            if self._stop:
                return
            try:
                if link.disabled is not None:
                    return
                if link.down_since is not None:
                    if time.monotonic() < link.probe_at or not link.probe():
                        continue
                self.store.release_unreleased()  # leases whose release was lost with a connection
                self.import_logs()
                while self.upload_batch(min_age=MIN_AGE) > 0 and not self._stop:
                    pass
                if self.reconcile(min_age=CONFIRM_AFTER):
                    self._wake.set()  # queued again: sent by the next round, now
                    continue
                self.store.forward_hits()
            except Offline:
                continue
            except Exception:  # the uploader thread's loop, over team backends of unknown behaviour: never let it die
                swallowed("team.journal: Journal._loop")
                continue  # never let the thread die: the queue stays for the next try or `memolab sync`

    def _next_wait(self) -> float:
        link = self.store.link
        if link.down_since is not None:
            return max(0.05, link.probe_at - time.monotonic())
        return MIN_AGE if self._young() else 30.0

    def _young(self) -> bool:
        try:
            row = self.store.index.conn().execute("SELECT MAX(queued) FROM team_uploads").fetchone()
        except sqlite3.Error:
            return False
        return row is not None and row[0] is not None and time.time() - row[0] < MIN_AGE * 3

    # -- uploading ------------------------------------------------------------------------
    # A result is recorded (and queued) before its run's logs are written: the run ends with the
    # evaluation's id, which exists only once the result is recorded. An upload in between would
    # publish the row with no logs, or some of them, for good (a row is published once). So the
    # computation holds its key from the save until its logs are written, whatever that takes on
    # a loaded machine; a timer (MIN_AGE) alone lost them there. Held only in memory: a process
    # killed in between leaves the item to the next one, which uploads it (its logs died too).
    def hold(self, key: Key) -> None:
        """Keep ``key``'s upload back until ``release(key)`` (its run's logs are written)."""
        key = tuple(key)  # type: ignore[assignment]
        with self._held_lock:
            self._held[key] = self._held.get(key, 0) + 1

    def release(self, key: Key) -> None:
        key = tuple(key)  # type: ignore[assignment]
        with self._held_lock:
            n = self._held.pop(key, 0) - 1
            if n > 0:
                self._held[key] = n
        self.wake()

    def _queued(self, limit: int, min_age: float) -> list[tuple[Key, str]]:
        c = self.store.index.conn()
        with self._held_lock:
            held = set(self._held)
        try:
            rows = c.execute("SELECT fn, code, args, schema, owner FROM team_uploads WHERE queued <= ? "
                             "ORDER BY attempts, queued LIMIT ?", (time.time() - min_age, limit + len(held))).fetchall()
        except sqlite3.OperationalError:
            return []
        items = [(Key._make(r[:4]), r[4]) for r in rows]
        return [it for it in items if it[0] not in held][:limit]

    def upload_batch(self, limit: int = BATCH, min_age: float = 0.0, force: bool = False) -> int:
        """Upload up to ``limit`` queued results; how many left the queue. ``Offline`` if
        the team store is down (``force``: try it even so, as ``sync`` does)."""
        store, link = self.store, self.store.link
        with self._upload_lock:
            items = self._queued(limit, min_age)
            if not items:
                return 0
            run = link.attempt if force else link.run
            refused = store.key_refusal(run)
            if refused is not None:
                # another key than the team's (or none where the team signs): nothing is published,
                # and the team leases held for these results go (another machine computes them)
                link.last_error = refused
                store.drop_team_leases(items)
                raise Failed()
            idx = store.index
            rows: list[tuple[Key, str, dict[str, Any], dict[str, tuple[str, str]]]] = []
            puts: list[tuple[str, Any]] = []
            gone: list[Key] = []
            local_ids: dict[Key, int] = {}
            mine = marks.local_only_functions(idx.conn())  # @memo(team=False): never leaves this machine
            for key, owner in items:
                local = None if key[0] in mine else idx.lookup(key)
                if local is None:
                    gone.append(key)  # cleared or out of use since, or kept off the team: nothing to upload
                    continue
                local_ids[tuple(key)] = local["id"]  # type: ignore[index]
                fields = team_fields(local)
                fields["finished"] = fields["started"] = None  # the team index's clock: this machine's may be off
                if local.get("inline") is None:
                    digests = [local["payload"], *(d for d, _ in json.loads(local["buffers"] or "[]"))]
                    paths = [store.blobs.path(d) for d in digests]
                    if not all(p.exists() for p in paths):
                        gone.append(key)  # a local blob lost: the next call recomputes and queues it again
                        continue
                    puts.extend(zip(digests, paths, strict=False))
                bundle = self._bundle(local["id"])
                if bundle is not None:
                    from . import logs

                    ref = logs.inline_ref(bundle)  # small: in the row, no request of its own
                    if ref is None:
                        from ..store.blobs import digest_bytes

                        ref = digest_bytes(bundle)
                        puts.append((ref, bundle))
                    fields["logs"] = ref
                fields["uploaded_by"] = store.identity
                rows.append((key, owner, fields, self._sources(local)))
            try:
                kept = {k for k, *_ in rows if k[0] in marks.KEEP} | marks.kept_keys(idx.conn(), [k for k, *_ in rows])
                if kept:  # marks before rows: a kept row is never on the team unmarked (team gc elsewhere)
                    keeps.send_marks(store, kept, run)
                if puts:
                    seen: set = set()
                    uniq = [(d, p) for d, p in puts if not (d in seen or seen.add(d))]  # type: ignore[func-returns-value]
                    run(lambda: link.blobs.put_many(uniq))
                by_owner: dict[str, list[tuple[Key, dict[str, Any], dict[str, tuple[str, str]]]]] = {}
                for key, owner, fields, sources in rows:
                    by_owner.setdefault(owner, []).append((key, fields, sources))
                published: dict[Key, int] = {}
                for owner, group in by_owner.items():
                    # the loop's values bound as defaults; ``link.index`` is read inside ``run`` (it connects
                    # lazily: a link that is down or disabled answers Offline without being touched)
                    got = run(lambda group=group, owner=owner: link.index.publish_many(group, owner=owner or None))
                    published.update((tuple(k), int(tid)) for (k, _, _), (tid, _) in zip(group, got, strict=False))  # type: ignore[misc]  # 4 columns
            except Failed:
                # Not an outage: these items wait behind the others (ordered by attempts)
                # and are tried again later; the error is kept for `memolab remote status`.
                with idx.write() as c:
                    c.executemany("UPDATE team_uploads SET attempts=attempts+1, error=? "
                                  "WHERE fn=? AND code=? AND args=? AND schema=?",
                                  [(link.last_error, *k) for k, *_ in rows])
                # their team leases are dropped, not heart-beaten on: another machine may compute
                store.drop_team_leases([(k, o) for k, o, *_ in rows])
                raise
            done = gone + [k for k, *_ in rows]
            with idx.write() as c:
                c.executemany("DELETE FROM team_uploads WHERE fn=? AND code=? AND args=? AND schema=?", done)
                remember_ids(idx, [(local_ids[k], published[k]) for k, *_ in rows if k in published], c)
                c.executemany("INSERT OR REPLACE INTO team_unconfirmed(fn, code, args, schema, published) "
                              "VALUES (?,?,?,?,?)", [(*k, time.time()) for k in published])
                if rows:
                    c.execute("INSERT INTO meta(key, value) VALUES ('team_uploaded', ?) ON CONFLICT(key) DO UPDATE "
                              "SET value=CAST(CAST(value AS INTEGER) + ? AS TEXT)", (str(len(rows)), len(rows)))
            store.uploaded([(k, o) for k, o, *_ in rows])
            return len(done)

    def _bundle(self, eval_id: int) -> bytes | None:
        try:
            from . import logs

            return logs.export(self.store.index, eval_id)
        except Exception:  # logs never hold a result's upload back: any error here would stall the queue
            swallowed("team.journal: Journal._bundle")
            return None  # logs never hold a result back

    def _sources(self, row: dict[str, Any]) -> dict[str, tuple[str, str]]:
        """The source texts the row's code digests name (``explain`` shows diffs from them)."""
        try:
            deps = json.loads(row.get("snapshot") or "{}").get("deps") or {}
            c = self.store.index.conn()
            out = {}
            for d in deps.values():
                r = c.execute("SELECT symbol, source FROM sources WHERE digest=?", (d,)).fetchone()
                if r is not None:
                    out[d] = (r[0], r[1])
            return out
        except Exception:  # texts for diffs never hold a result's upload back: any error here would stall the queue
            swallowed("team.journal: Journal._sources")
            return {}

    def reconcile(self, min_age: float = 0.0, force: bool = False) -> int:
        """Look for the rows this store published ``min_age`` seconds ago or more on the team
        index: those there are confirmed (forgotten here); those missing (the database lost an
        acknowledged write) are queued again. How many were queued again. One ``lookup_many``
        per 500 keys. ``Offline`` if the team store is down."""
        link = self.store.link
        run = link.attempt if force else link.run
        c = self.store.index.conn()
        try:
            keys = [Key._make(r) for r in c.execute(
                "SELECT fn, code, args, schema FROM team_unconfirmed WHERE published <= ? AND published >= ? "
                "ORDER BY published", (time.time() - min_age, time.time() - CONFIRM_WITHIN)).fetchall()]
        except sqlite3.OperationalError:
            return 0  # no such table yet
        with self.store.index.write() as w:
            w.execute("DELETE FROM team_unconfirmed WHERE published < ?", (time.time() - CONFIRM_WITHIN,))
        lost: list[Key] = []
        for _, chunk in chunks(keys):
            there = run(lambda chunk=chunk: link.index.lookup_many(chunk))
            missing = [k for k in chunk if k not in there]
            lost.extend(missing)
            with self.store.index.write() as w:
                if missing:
                    w.executemany("INSERT OR IGNORE INTO team_uploads(fn, code, args, schema, owner, queued) "
                                  "VALUES (?,?,?,?,'',?)", [(*k, 0.0) for k in missing])
                w.executemany("DELETE FROM team_unconfirmed WHERE fn=? AND code=? AND args=? AND schema=?", chunk)
        return len(lost)

    def drain(self, deadline: float | None = None, progress: Callable[[int], None] | None = None,
              force: bool = True) -> int:
        """Upload everything queued (until ``deadline``, a ``time.monotonic()``); how many left the queue.
        ``Offline`` if the team store is down."""
        total = 0
        while deadline is None or time.monotonic() < deadline:
            n = self.upload_batch(force=force)
            if n == 0:
                break
            total += n
            if progress is not None:
                progress(n)
        return total

    def drain_at_exit(self) -> None:
        """The bounded wait at exit: upload what is queued while the team store answers.

        The work runs on a daemon thread joined for at most ``DRAIN_SECONDS``: one large
        upload cannot hold the exit longer (cut short, it is simply done again later: the
        queue row stays until the row is published, and a PUT of a blob is idempotent)."""
        self._stop = True
        self._wake.set()
        link = self.store.link
        if self.read_only:
            return
        if link.disabled is not None or link.down_since is not None:
            # down: no wait for uploads (the next process or `memolab sync` sends them), but the
            # team leases still held go in one bounded try: others must not wait out their TTL
            self.store.release_at_exit()
            return
        try:
            t = threading.Thread(target=self._exit_work, name="memolab-team-exit", daemon=True)
            t.start()
        except RuntimeError:
            # Python 3.12.0-3.12.x refuses new threads at shutdown: the work runs here, still
            # bounded (the drain by its deadline, each request by the link's timeout)
            self._exit_work()
            return
        except Exception:  # an exit hook: it must never break the program's exit
            swallowed("team.journal: Journal.drain_at_exit")
            return
        t.join(DRAIN_SECONDS)

    def _exit_work(self) -> None:
        link = self.store.link
        # The background thread ends its round first (told to stop, it takes no new one): the exit's
        # own forwarding would find the hits it claimed gone and return while they are still in
        # flight, and the daemon thread dies with the interpreter. Bounded: the caller joins this
        # work for DRAIN_SECONDS at most.
        self.join(DRAIN_SECONDS)
        try:
            self.import_logs()  # of results hit in this process (small, a few GETs)
            if count(self.store.index):
                self.drain(deadline=time.monotonic() + DRAIN_SECONDS, force=False)
            if link.contacted:  # never a first connection at exit just for hit counts
                self.store.flush_hits()  # this process's hits: written locally, then forwarded
                self.store.forward_hits()
        except Exception:  # an exit hook's work (a thread or the exit itself), over team backends of unknown behaviour
            swallowed("team.journal: Journal._exit_work")
        self.store.release_at_exit()  # leases of results the drain did not upload, or whose release failed

    # -- logs of evaluations imported from the team ----------------------------------------
    def want_logs(self, eval_id: int, ref: str) -> None:
        """Import the logs of team row ``ref`` (its ``logs`` value) into local evaluation ``eval_id``."""
        self.logs_wanted.append((eval_id, ref))
        self.wake()

    def import_logs(self) -> int:
        n = 0
        with self._logs_lock:
            while self.logs_wanted:
                eval_id, ref = self.logs_wanted.pop()
                n += self.store.import_logs(eval_id, ref)
            if self.sources_wanted:
                wanted, self.sources_wanted = self.sources_wanted, {}
                try:
                    self.store.import_sources(wanted)
                except Exception:  # texts for diffs only, from a team backend of unknown behaviour: never worth a failure
                    swallowed("team.journal: Journal.import_logs")  # texts for diffs only: never worth a failure
        return n

    def want_sources(self, digests: Iterable[str]) -> None:
        """Copy these source texts from the team, in one batch with the thread's next work or
        at exit: not at once (no wake), as a burst of team hits must not meet a writer."""
        self.sources_wanted.update(dict.fromkeys(digests))
