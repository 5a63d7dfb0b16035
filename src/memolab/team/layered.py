"""``TeamStore``: the local store as a read-through, write-back cache of the team store.

- A hit on the local store is exactly a local hit: no team traffic at all.
- A local miss asks the team index (one query). A team hit downloads the
  payload and buffers into the local blob folder, each verified against its
  digest before it is kept (inline rows need no download), and records the row
  locally (``publish``): anything used once works offline afterwards. Its logs
  bundle is imported by the background thread, off the caller's path.
- A miss on both takes the local lease first (single flight on this machine),
  then the team lease (single flight across machines): the team says 'hit'
  (imported as above), 'wait' (another machine computes: we keep our local
  lease and poll) or 'owner' (we compute). Team leases are heart-beaten with the
  local ones, until the result is uploaded.
- A computed result is saved locally at once, with its upload queued in the
  same transaction (``journal``); the background uploader sends it.
- The team store being down never fails a call (``link``): one bounded wait,
  one warning, then local work.

Integrity: a team row is untrusted input. Its blobs are verified before they
enter the local store; with ``MEMOLAB_HMAC_KEY`` its signature is checked
before it is imported (and again on every load, as for any local row). Without
the key no team row is loaded at all where the team signs (its key check is
recorded), nor from an unsigned team store unless ``MEMOLAB_TEAM_UNSIGNED=1``
says to (``signing.load_refusal``): a row this machine cannot verify is never
unpickled. A team
result that turns out corrupt is refused: the caller recomputes, the team row
is taken out of use and the damaged object deleted, so the recomputed result
can replace it.

Importing team rows (``adopt``, ``pull``, blobs, logs bundles, source texts) is
``TeamReading``'s, in team/reading.py.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .. import errors
from ..errors import swallowed
from ..key import key_of
from ..settings import config
from ..store import Store, marks, signing
from ..store.inlist import chunks
from ..store.sqlite import Key, host_name
from . import journal
from .link import Failed, Link, Offline
from .reading import TeamReading

_warn_once = functools.partial(errors.warn_once, stacklevel=2, scope="team")


def layered(store: Store, remote: tuple[str, str | None]) -> Any:
    """A ``TeamStore`` holding ``store`` (a plain local store, just opened) in front of ``remote``;
    ``store`` itself when the team store is not fully configured. What ``memolab.store`` calls
    (``TEAM_STORE_FACTORY``) when a team store is configured."""
    index_url, blobs_url = remote
    if not index_url or not blobs_url:
        missing = "MEMOLAB_REMOTE (the team index)" if not index_url else "MEMOLAB_REMOTE_BLOBS (the team blob store)"
        _warn_once("incomplete", f"memolab: team store not used: {missing} is not set; working locally")
        return store
    return TeamStore(store, index_url, blobs_url)




#: What a ``TeamStore`` does exactly as its local store does: bound to the local store's
#: methods on the instance (a hit through a team store costs no extra call).
_LOCAL_OPERATIONS = ("owner_id", "load", "load_from_memory", "has_copy", "check_entry", "mark_corrupt", "forget", "forget_key",
                     "count_hit", "note_duration", "flush_hits", "ride_along", "gc_plan", "unreferenced_blobs",
                     "collect_garbage", "clear", "known_absent", "newest_id", "miss_rider", "write_rider")


#: every team store of this process still referenced (weakly: one the program let go of, and
#: its connections, is freed); each drains its journal at exit (``_drain_all``)
_live: weakref.WeakSet[TeamStore] = weakref.WeakSet()
_exit_hooked = False


def _drain_at_exit(st: TeamStore) -> None:
    """Drain ``st``'s journal at exit: one hook for every team store, registered with the first.
    Run by ``threading`` at shutdown, before threads are joined and before the interpreter
    finalizes (where a new thread or a module registering with ``threading``, as the S3
    client's pools do, is refused); ``atexit`` otherwise. ``threading._register_atexit`` is
    private: its absence (or a refusal) falls back to ``atexit`` (``memolab.cli.selftest``)."""
    global _exit_hooked
    _live.add(st)
    if _exit_hooked:
        return
    _exit_hooked = True
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise AttributeError
        register(_drain_all)
    except (AttributeError, RuntimeError):
        atexit.register(_drain_all)


def _drain_all() -> None:
    for st in list(_live):
        try:
            st.journal.drain_at_exit()
        except Exception:  # the next store's queue must still go up
            swallowed(f"the exit's upload of {st!r}")


class TeamStore(TeamReading):
    """A local ``Store`` (held, not subclassed) whose misses consult the team store and whose
    results are uploaded to it. It satisfies ``store.protocols.LayeredStore`` as ``Store`` does:
    lookups, leases and saves are its own; everything else is the local store's. It reaches
    into the local store only through its public hooks (``beat_with``: team leases are
    heart-beaten with the local ones; ``record_hooks``: a result's upload is queued in the
    transaction that records it). What it reads from the team (``adopt``, ``fetch_blobs``,
    ``pull``, …) is ``TeamReading``'s (team/reading.py)."""

    lease_free = False  # a miss also takes the team's lease: one computation across machines

    def __init__(self, local: Store, index_url: str, blobs_url: str) -> None:
        self.local = local
        self.root, self.index, self.blobs = local.root, local.index, local.blobs
        for name in _LOCAL_OPERATIONS:
            setattr(self, name, getattr(local, name))
        self.link = Link(index_url, blobs_url, config.settings().remote_timeout)
        self.identity = f"{host_name()}:{self.root}"
        self._team_held: dict[Key, str] = {}  # key -> owner of the team lease we hold until the upload
        self._unreleased: dict[Key, str] = {}  # key -> owner of a team lease whose release did not reach the server
        super().__init__()  # what ``TeamReading`` keeps: the team rows this process imported
        self._tl = threading.local()
        self._team_check: tuple[float, str | None] | None = None  # (when, the team's recorded key check)
        local.beat_with.append(self._team_leases)
        local.record_hooks.append(self._queue_upload)
        self.journal = journal.Journal(self)
        if local.usage.prompt:  # a process killed at its end (a Ray worker): hits go up as they are written
            local.usage.after.append(self.forward_hits)
        self.link.queued = lambda: journal.count(self.index)
        self.link.on_probe_due = self.journal.wake
        try:
            with self.index.write() as c:
                journal.ensure(c)
            pending = journal.count(self.index)
        except (sqlite3.Error, OSError):  # the local index (a read-only one refuses the write)
            swallowed("team.layered: TeamStore.__init__")
            pending = 0  # a read-only store: nothing of ours to upload
        if signing.secret() is None and signing.unsigned_allowed():
            _warn_once("hmac", "memolab: a team store is configured without MEMOLAB_HMAC_KEY and MEMOLAB_TEAM_UNSIGNED=1: "
                               "results are not signed, so anyone with write access to the team store can run code "
                               "in this process (see docs/team.md, trust model)")
        _drain_at_exit(self)
        if pending:
            import concurrent.futures.thread  # noqa: F401  (see save)

            self.journal.wake()  # results queued by an earlier process (offline, killed) go up now

    def __repr__(self) -> str:
        return f"TeamStore({str(self.root)!r}, remote={self.link.index_url!r})"

    # -- what is the local store's, seen through this one -------------------------------------
    @property
    def stored_codes(self) -> Any:
        return self.local.stored_codes  # (rebound by the local ``clear``: read through, never copied)

    @stored_codes.setter
    def stored_codes(self, value: Any) -> None:
        self.local.stored_codes = value

    @property
    def owner(self) -> str:
        return self.local.owner

    def is_quick(self, key: Key) -> bool:
        return False  # never lease-free (``lease_free``)

    #: Block until 'hit' or 'owner': ``Store``'s one wait loop, which asks this store's
    #: ``lookup`` and ``try_acquire`` (the team's), not the local store's.
    acquire = Store.acquire

    # -- reading: local first, then the team (its rows imported: ``TeamReading``) -------------
    def lookup(self, key: Key) -> dict[str, Any] | None:
        row = self.local.lookup(key)
        if row is not None or not self.link.usable() or key[0] in marks.LOCAL_ONLY:
            return row  # a local hit never touches the network, nor a function kept off the team
        try:
            if self.load_refusal() is not None:
                return None  # nothing of the team's may be loaded here: not even asked for
            trow = self.link.run(lambda: self.link.index.lookup(key))
        except Offline:
            return None
        return None if trow is None else self.adopt(key, trow)


    # -- the team's key -------------------------------------------------------------------------
    def key_refusal(self, run: Callable[[Callable[[], Any]], Any] | None = None) -> str | None:
        """Why this machine must not publish (nor take team leases): its ``MEMOLAB_HMAC_KEY`` is
        not the team's (``signing.key_refusal`` against the check ``memolab remote upgrade``
        recorded), or None. Asked of the team index once a minute; said once per process.
        ``Offline`` when the team store is down (``run``: how to ask, default ``link.run``)."""
        why = signing.key_refusal(self.team_check(run))
        if why is not None:
            _warn_once("team-key", f"memolab: {why}")
        return why

    def load_refusal(self, run: Callable[[Callable[[], Any]], Any] | None = None) -> str | None:
        """Why no team row may be loaded on this machine (``signing.load_refusal``: no key while
        the team signs, or an unsigned team store not opted into), or None; said once per
        process. ``Offline`` when the team store is down and must be asked."""
        why = signing.load_refusal(self.team_check(run)) if signing.secret() is None else None
        if why is not None:
            _warn_once("team-load", f"memolab: {why}")
        return why

    def team_check(self, run: Callable[[Callable[[], Any]], Any] | None = None) -> str | None:
        """The key check ``memolab remote upgrade`` recorded in the team index (None: none),
        asked once a minute (``run``: how to ask, default ``link.run``)."""
        import time

        now = time.monotonic()
        v = self._team_check
        if v is None or now - v[0] > 60.0:
            recorded = (run or self.link.run)(lambda: self.link.index.team_key())
            v = self._team_check = (now, recorded)
        return v[1]

    # -- accepted code changes: the team's are followed everywhere (team/accepts.py) ----------------
    def accepts_of(self, fn: str, schema: str) -> list[dict[str, Any]]:
        from . import accepts

        return accepts.accepts_of(self, fn, schema)

    def record_accept(self, rec: dict[str, Any]) -> dict[str, Any]:
        from . import accepts

        return accepts.record(self, rec)

    def undo_accept(self, accept_id: int, by: str) -> dict[str, Any]:
        from . import accepts

        return accepts.undo(self, accept_id, by)

    # -- leases: this machine, then the team -------------------------------------------------
    def try_acquire(self, key: Key, owner: str, force: bool = False, on_owner: Any = None) -> tuple[str, dict[str, Any] | None]:
        ttl = config.settings().lease_ttl
        mine = self.local.holds(key, owner)  # polling a team lease: the local one is ours already
        state, row = self.index.claim(key, owner, ttl, force, None if mine else on_owner)
        if state != "owner":
            return state, row
        if not mine:
            self.local.hold(key, owner)
        if self._team_held.get(key) == owner or not self.link.usable() or key[0] in marks.LOCAL_ONLY:
            return "owner", None  # (@memo(team=False): computed here, no team lease, never published)
        try:
            if self.key_refusal() is not None:
                return "owner", None  # its result will not be published: no team lease to hold others back
            if self.load_refusal() is not None:
                return "owner", None  # another machine's result could not be used here: no waiting for one
            tstate, trow = self.link.run(lambda: self.link.index.claim(key, owner, ttl, force))
        except Offline:
            return "owner", None  # compute here; the result is uploaded when the team store is back
        if tstate == "owner":
            with self.local.held_lock:
                self._team_held[key] = owner
                if self._unreleased.get(key) == owner:
                    del self._unreleased[key]  # (ours again: not to be released behind our back)
            return "owner", None
        if tstate == "hit" and trow is not None:
            local = self.adopt(key, trow)
            if local is None:
                return "owner", None  # refused: computed here (without the team lease)
            self.local.release(key, owner)
            return "hit", local
        return "wait", None  # another machine computes it: keep our local lease, poll

    def release(self, key: Key, owner: str) -> None:
        self.local.release(key, owner)
        with self.local.held_lock:
            team = self._team_held.get(key) == owner
            if team:
                del self._team_held[key]
        if team:
            self._release_team([(key, owner)])

    def _release_team(self, leases: Sequence[tuple[Key, str]]) -> None:
        """Release these team leases (held no more). Those the server cannot be told of now (down,
        a lost connection, a server out of connections) are remembered and released when it
        answers again (``release_unreleased``: the uploader's next round, the exit), instead of
        holding other machines back until their TTL and staying in the table."""
        for i, (key, owner) in enumerate(leases):
            if not owner:
                continue
            try:
                # ``link.index`` read inside ``run``: it connects lazily, and a link that is down
                # answers Offline without being touched (the loop's values bound as defaults)
                self.link.run(lambda key=key, owner=owner: self.link.index.release(key, owner))  # type: ignore[misc]  # (defaults it cannot type)
            except Offline:
                with self.local.held_lock:
                    self._unreleased.update((k, o) for k, o in leases[i:] if o)
                self.journal.wake()  # (it probes a team store that is down, then releases them)
                return

    def release_unreleased(self, run: Callable[[Callable[[], Any]], Any] | None = None) -> int:
        """Release the team leases whose release did not reach the server (``_release_team``);
        how many. ``Offline`` if it still does not answer: they stay remembered."""
        with self.local.held_lock:
            todo = [(k, o) for k, o in self._unreleased.items() if self._team_held.get(k) != o]
        for key, owner in todo:
            try:
                (run or self.link.run)(lambda key=key, owner=owner: self.link.index.release(key, owner))  # type: ignore[misc]  # (defaults it cannot type)
            except Failed:
                pass  # refused, not an outage (a permission): given up, never holding the uploads back
            with self.local.held_lock:
                if self._unreleased.get(key) == owner:
                    del self._unreleased[key]
        return len(todo)

    def release_at_exit(self) -> int:
        """At exit: the team leases this process still holds (results whose upload did not go:
        another machine may compute them now) and those whose release failed, released in one
        try bounded by the timeout, even while the team store is marked down (its connection
        was lost; the server may well answer). How many."""
        with self.local.held_lock:
            self._unreleased.update((k, o) for k, o in self._team_held.items() if o)
            self._team_held.clear()
        if not self._unreleased or self.link.disabled is not None:
            return 0
        try:
            return self.release_unreleased(self.link.attempt)
        except Offline:
            return 0  # they go stale after their TTL (`memolab doctor` lists those of dead owners)

    def uploaded(self, done: Iterable[tuple[Key, str]]) -> None:
        """The uploader published these (dropping their team leases): stop heart-beating them."""
        with self.local.held_lock:
            for key, owner in done:
                if self._team_held.get(key) == owner:
                    del self._team_held[key]

    # -- hits: forwarded to the team rows they were hits on ------------------------------------
    def forward_hits(self) -> int:
        """Give the team rows the hits counted on their local copies since the last time
        (the local ``hits`` column is the ledger, so nothing waits in memory): the team
        then knows each result's team-wide last use. Advisory; by the uploader thread,
        at exit of a process that used the team store, and by ``memolab sync``."""
        if not journal.unsent_hits(self.index, 1) or not self.link.usable():
            return 0
        rows = journal.claim_hits(self.index)  # claimed first: a concurrent forwarder sends the others
        counts: dict[int, tuple[int, float | None]] = {}
        for _, tid, n, _t in rows:
            # last used: now, by the team index's clock (this machine's may be off by days)
            counts[tid] = (counts.get(tid, (0, None))[0] + n, None)
        if not counts:
            return 0
        try:
            self.link.run(lambda: self.link.index.add_hits(counts))
        except Offline:
            journal.unclaim_hits(self.index, rows)  # not sent: sent next time
            return 0
        except BaseException:
            journal.unclaim_hits(self.index, rows)
            raise
        return len(rows)

    def drop_team_leases(self, held: Iterable[tuple[Key, str]]) -> None:
        """Give up team leases whose results cannot be uploaded now."""
        dropped = []
        for key, owner in held:
            with self.local.held_lock:
                if self._team_held.get(key) != owner:
                    continue
                del self._team_held[key]
            dropped.append((key, owner))
        self._release_team(dropped)

    def _team_leases(self) -> Callable[[], None] | None:
        """The local heartbeat's question (``Store.beat_with``, asked under its lock): the team
        leases held until their upload, and what beats them, or None while none is held."""
        team = list(self._team_held.items())
        if not team:
            return None

        def beat() -> None:
            if self.link.usable():
                try:
                    self.link.run(lambda: self.link.index.heartbeat(team))
                except Offline:
                    pass

        return beat

    def retire(self) -> None:
        """No longer this process's team store (``configure()`` replaced it): the uploader
        thread ends and the team store is not contacted again, without a warning.
        Queued uploads stay queued locally (the next process, or ``memolab sync``)."""
        self.link.retire()
        self.journal.stop()

    def close(self) -> None:
        """Retired (see ``retire``) and its local store closed: ``close_open_stores``."""
        self.retire()
        self.local.close()

    # -- writing: locally at once, uploaded in the background ------------------------------------
    def save(self, key: Key, owner: str, value: Any, fields: dict[str, Any], sources: dict[str, tuple[str, str]]) -> int:
        # Imported now, not at exit: the exit drain may need the S3 client's thread pools,
        # and a module registering with ``threading`` during interpreter shutdown fails.
        import concurrent.futures.thread  # noqa: F401

        self._tl.upload = (key, owner if self._team_held.get(key) == owner else "")
        try:
            eval_id = self.local.save(key, owner, value, fields, sources)
        finally:
            self._tl.upload = None
        self.journal.wake()
        return eval_id

    @contextlib.contextmanager
    def logs_pending(self, key: Key) -> Iterator[None]:
        # the upload of a result saved in this block waits for the block's end: the run's logs,
        # written after the save, go up with it (Journal.hold)
        self.journal.hold(key)
        try:
            yield
        finally:
            self.journal.release(key)

    def _queue_upload(self, c: Any) -> None:
        """In the local record transaction of a result this store saves (``Store.record_hooks``)."""
        up = getattr(self._tl, "upload", None)
        if up is not None and up[0][0] not in marks.LOCAL_ONLY:
            journal.enqueue(c, *up)  # the result's transaction: recorded and queued, or neither

    def enqueue_all(self) -> int:
        """Queue every local result the team index lacks (computed before the remote was configured)."""
        done = [key_of(r) for r in
                self.index.evaluations(where="status='done'", order="id")]
        missing: list[Key] = []
        for _, chunk in chunks(done):
            there = self.link.attempt(lambda chunk=chunk: self.link.index.lookup_many(chunk))  # type: ignore[misc]  # (defaults it cannot type)
            missing.extend(k for k in chunk if tuple(k) not in there)
        mine = marks.local_only_functions(self.index.conn())  # @memo(team=False): never uploaded
        missing = [k for k in missing if k[0] not in mine]
        if missing:
            with self.index.write() as c:
                journal.ensure(c)
                c.executemany("INSERT OR IGNORE INTO team_uploads(fn, code, args, schema, owner, queued) "
                              "VALUES (?,?,?,?,'',?)", [(*k, 0.0) for k in missing])
        return len(missing)
