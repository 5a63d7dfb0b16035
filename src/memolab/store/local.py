"""The store: an index of evaluations plus content-addressed blobs.

The embedded default is an SQLite file (``index.sqlite``) and a blob folder
under one directory. ``Store`` is the only thing the memo layer talks to, so a
team backend (a server database and object storage) can replace both halves
without touching callers.

Single flight: a missing key is computed by exactly one process. The first to
``claim`` it holds a lease and heart-beats it from a background thread; the
others wait and then read the stored result. If the owner dies, its heartbeat
stops, the lease goes stale after ``lease_ttl`` seconds and a waiter takes over;
an owner on the waiter's own host is asked of the process table instead, since a
long C call that holds the GIL stalls its heartbeat while it still computes.

A hit never writes: the key is looked up with one point query (a lease is
claimed only when it is missing), loads keep the stamps they earn in memory,
and hit counts are batched and written by a background thread every few
seconds, with the next write transaction of this process, or at exit.

Small results (payload plus buffers up to ``INLINE_MAX`` bytes) live in their
index row: a small miss writes no file, a small hit reads none. Their digests
are kept and checked on every load, exactly as for blobs.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path, PosixPath, WindowsPath
from typing import Any, cast

from ..errors import BlobsGone, StoreMiss, swallowed
from ..settings import config, hooks
from ..settings.progress import result_progress
from . import layout, perms, signing, waits
from .beats import Heartbeats, beat_due as beat_due, track
from .blobs import BlobFolder, digest_bytes
from .inline import inline_problem as inline_problem, loads_result as _loads, split_inline  # (inline_problem: doctor's)
from .leases import LOCKS_MARK
from .leasing import process_token
from .misses import insert_miss
from .process import runtime_info as runtime_info  # (re-exported: call.py records it with each evaluation)
from .sqlite import NEWEST_ID_SQL, Index, Key, savepoint
from .upkeep import write_usage
from .usage import Flusher

_MEMORY_ENTRIES = 4096
_MEMORY_BYTES = 256 << 20
#: an evaluation's pending hit count before its first hit (count, when)
_NO_HITS = (0, 0.0)

#: Results whose payload plus buffers fit in this many bytes are stored in
#: their index row instead of blob files. Measured (benchmarks/store_scaling.py
#: --inline-sweep): up to 32 KiB an inline store costs one SQLite transaction
#: and beats a blob file plus its fsyncs by far; beyond it the row bloats the
#: index pages every lookup walks, and large buffers want memory maps and
#: deduplication, which only blobs give.
#: ``$MEMOLAB_INLINE_MAX`` overrides it (0: every result in blob files; docs/settings.md).
INLINE_MAX: int = config.env_setting("MEMOLAB_INLINE_MAX")


class Store(Heartbeats):
    # replaced by the read-only store of ``health`` (a store that can be read, not written)
    index_class = Index
    blob_class = BlobFolder
    #: may a quick function's miss compute without a lease (``MemoFunction._call``)?
    #: Not where a miss takes more than a local lease (the team store's) or none (read-only)
    lease_free = True
    _generation: int  # a degraded store's ``config.generation()`` when ``get_store`` opened it

    def __init__(self, root: Path) -> None:
        self.root = root if type(root) in (PosixPath, WindowsPath) else Path(root)  # (a Path: not parsed again)
        perms.prepare_root(self.root)  # a new store is private unless group sharing is configured
        layout.check(self.root)  # a store whose own folders are links is refused, never followed
        self.index = self.index_class(self.root / "index.sqlite")
        try:
            self.blobs = self.blob_class(self.root, self.index.get_stamp, self.index.set_stamp, self._defer_stamp)
        except BaseException:
            self.index.close()
            raise
        self._owner: str | None = None
        self._held: dict[tuple[Key, str], int] = {}
        #: guards the leases held (ours and ``beat_with``'s) and the start of background threads
        self.held_lock = threading.Lock()
        self._beat: threading.Thread | None = None  # (its ``_beat_stop``, an Event, is made when it starts)
        # What a store layered on this one (``TeamStore``, by composition) adds to it: more
        # leases to heart-beat with ours (each callable, run under ``held_lock``, returns a
        # callable that beats them, or None while it holds none: the heartbeat thread ends
        # once nobody holds anything), and writes made in every result's record transaction.
        self.beat_with: list[Callable[[], Callable[[], None] | None]] = []
        self.record_hooks: list[Callable[[Any], None]] = []
        # key -> (row, payload, buffer refs): a hit in this process costs an unpickle and an mmap, not a read
        self._memory: OrderedDict[Key, tuple[dict[str, Any], bytes, list[Any]]] = OrderedDict()
        self._memory_bytes = 0
        self._memory_lock = threading.Lock()
        # usage not yet written: hit counts (id -> (n, last time)) and stamps earned by loads
        self._hits: dict[int, tuple[int, float]] = {}
        self._stamps: dict[str, tuple[int, int, int]] = {}
        self.usage = Flusher(self.flush_hits)  # writes them when due (usage.py)
        self._riders = threading.local()  # see ``ride_along``
        # (fn, code digest) of results this process stored here: a later miss of that code
        # is explained when asked (``explain.settle`` reads its dependencies from them)
        self.stored_codes: set[tuple[str, str]] = set()
        # (fn, code digest) -> every computation of it here so far took less than
        # ``lease_free_below`` (see ``note_duration``)
        self.quick_codes: dict[tuple[str, str], bool] = {}
        self._beat_due: float | None = None  # when a lease held since will need beats (``ticker``)
        track(self)  # its hit counts are written at exit (``beats.flush_live``)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # -- leases ------------------------------------------------------------------------
    @property
    def owner(self) -> str:
        """host:pid:start:nonce (``owner_alive_here`` reads the first three); made
        on the first miss, since a hit takes no lease (reading /proc costs)."""
        if self._owner is None:
            locks = getattr(self.index, "key_locks", lambda: None)()  # "L": it takes key locks (store/leases.py)
            self._owner = f"{process_token()}:{LOCKS_MARK if locks is not None else ''}{uuid.uuid4().hex[:8]}"
        return self._owner

    def owner_id(self) -> str:
        """Lease owner: per thread, so two threads of one process also single-flight."""
        return f"{self.owner}:{threading.get_ident()}"

    def try_acquire(self, key: Key, owner: str, force: bool = False,
                    on_owner: Callable[[sqlite3.Connection], None] | None = None) -> tuple[str, dict[str, Any] | None]:
        """One attempt: ('hit', row), ('owner', None) or ('wait', None). ``on_owner``
        writes with the lease, in its transaction (see ``Index.claim``)."""
        state, row = self.index.claim(key, owner, config.settings().lease_ttl, force, on_owner)
        if state == "owner":
            self._hold(key, owner)
        return state, row

    def lookup(self, key: Key) -> dict[str, Any] | None:
        """The stored row of ``key`` with what loading needs, or None: one point
        query, no lock taken, nothing written. A hit ends here."""
        return self.index.lookup(key, not signing.keyed())  # (``lean``, by position: a keyword costs its parse)

    def acquire(self, key: Key, owner: str, force: bool = False, looked_up: bool = False,
                on_owner: Callable[[sqlite3.Connection], None] | None = None) -> tuple[str, dict[str, Any] | None]:
        """Block until the key is stored ('hit', row) or we own its lease ('owner', None).
        ``looked_up``: the caller's ``lookup`` just found nothing; go straight to the lease."""
        if not force and not looked_up:
            row = self.lookup(key)  # a hit takes no lease
            if row is not None:
                return "hit", row
        try:  # the one wait loop, shared with memoized calls
            return cast("tuple[str, dict[str, Any] | None]", waits.wait(waits.claim(self, key, owner, force, on_owner)))
        except BaseException:
            # a wait cut short (Ctrl-C) gives back what the claim may hold: a team store keeps
            # its local lease while the team says "wait"
            self.release(key, owner)
            raise

    def note_duration(self, key: Key, seconds: float) -> None:
        """A computation of ``key`` took ``seconds``: once one of a function's code takes
        ``lease_free_below`` or longer, its misses in this process take a lease for good."""
        k = (key[0], key[1])
        self.quick_codes[k] = self.quick_codes.get(k, True) and seconds < config.settings().lease_free_below

    def is_quick(self, key: Key) -> bool:
        """May a miss of ``key`` compute without a lease? Only if this store allows it and
        every computation of its function's code here so far was quick (none: no)."""
        return self.lease_free and self.quick_codes.get((key[0], key[1]), False) \
            and config.settings().lease_free_below > 0

    def holds(self, key: Key, owner: str) -> bool:
        """Does ``owner`` hold the local lease of ``key`` (taken by ``try_acquire``, not yet released)?"""
        return (key, owner) in self._held

    def release(self, key: Key, owner: str) -> None:
        """Give up a lease without storing (the function raised, or its result could not be stored).

        Best effort: it runs on error paths (a full disk, a locked index), where
        raising would replace the caller's value or exception with ours. A lease
        we fail to drop stops being heart-beaten and goes stale after ``lease_ttl``.
        """
        if not owner:
            return  # a lease-free miss (``MemoFunction._lease_free``) holds none
        self._unhold(key, owner)
        try:
            self.index.release(key, owner)
        except sqlite3.Error:
            swallowed("store: Store.release")

    # -- results -----------------------------------------------------------------------
    def save(self, key: Key, owner: str, value: Any, fields: dict[str, Any], sources: dict[str, tuple[str, str]]) -> int:
        """Serialise and store ``value``; raises whatever pickling raises (nothing is recorded then)."""
        from .. import pickling

        payload, buffers, refs = pickling.dumps_with_refs(value)
        sizes = [memoryview(b).nbytes for b in buffers]
        base = dict(fields, code_refs=json.dumps(refs, sort_keys=True) if refs else "{}")
        if len(payload) + sum(sizes) <= INLINE_MAX:
            eval_id = self._save_inline(key, owner, base, payload, buffers, sizes, sources)
        else:
            eval_id = self._save_blobs(key, owner, base, payload, buffers, sources)
        self._unhold(key, owner)
        self.forget_key(key)  # an in-process copy of an overwritten (fresh) result is outdated
        return eval_id

    def _save_inline(self, key: Key, owner: str, base: dict[str, Any], payload: bytes, buffers: list[Any],
                     sizes: list[int], sources: dict[str, tuple[str, str]]) -> int:
        """A small result: its bytes in the row, one transaction, no file."""
        views = [memoryview(b).cast("B") if memoryview(b).format != "B" or memoryview(b).ndim != 1 else memoryview(b)
                 for b in buffers]
        brefs = [(digest_bytes(v), n) for v, n in zip(views, sizes, strict=False)]
        row = dict(base, payload=digest_bytes(payload), payload_size=len(payload), buffers=json.dumps(brefs) if brefs else "[]",
                   size=len(payload) + sum(sizes), inline=b"".join([payload, *views]))
        row["signature"] = signing.sign(key, row)
        return self.index.record(key, owner, row, sources, also=self._usage_into)

    def _save_blobs(self, key: Key, owner: str, base: dict[str, Any], payload: bytes, buffers: list[Any],
                    sources: dict[str, tuple[str, str]]) -> int:
        total = len(payload) + sum(memoryview(b).nbytes for b in buffers)
        with result_progress("storing", key[0], total) as step:  # a bar for a big result, drawn if it lasts
            def put_and_record() -> int:
                pd, psize = self.blobs.put(payload, progress=step)
                # One blob per buffer: content-addressed, so equal arrays across results share one file.
                brefs = [self.blobs.put(b, progress=step) for b in buffers]
                paths = [self.blobs.path(d) for d in [pd, *(d for d, _ in brefs)]]
                row = dict(base, payload=pd, payload_size=psize, buffers=json.dumps(brefs),
                           size=psize + sum(s for _, s in brefs), inline=None)
                row["signature"] = signing.sign(key, row)
                # gc may take a blob between our put and our record (it deletes what
                # no row refers to yet unless our lease looks live, and a slow owner's
                # lease may not). The record checks, under the lock gc deletes under.
                return self.index.record(key, owner, row, sources, present=lambda: all(p.exists() for p in paths),
                                         also=self._usage_into)

            try:
                return put_and_record()
            except BlobsGone:
                # Rare: put again while holding the index, so gc cannot interleave this time.
                with self.index.write():
                    return put_and_record()

    def check_entry(self, key: Key, row: dict[str, Any]) -> str | None:
        """Why ``row`` cannot be used, found without reading blobs (signature, code references), or None."""
        from .. import pickling

        bad = signing.problem(key, row)
        if bad is None and row.get("code_refs"):
            try:
                refs = json.loads(row["code_refs"])
            except ValueError:
                return "damaged index row (its code_refs column is not JSON)"
            bad = pickling.check_refs(refs)
        return bad

    def load(self, key: Key, row: dict[str, Any]) -> Any:
        """The stored value of ``row``; ``StoreMiss`` if it cannot be loaded faithfully
        (``CodeChanged`` when code it refers to changed); ``ValueError``, ``TypeError`` (and
        their kin) when a column of the row does not decode: the caller takes it out of use."""
        bad = signing.problem(key, row) if signing.keyed() else None  # (``problem``: None without a key)
        if bad is not None:
            raise StoreMiss(bad)
        refs = [tuple(r) for r in json.loads(row["buffers"])] if row["buffers"] and row["buffers"] != "[]" else []
        # a listing row (Index.evaluations) does not carry the inline bytes: read them
        inline = row["inline"] if "inline" in row else self.index.inline_of(row["id"])
        source: tuple[memoryview, ...] | list[tuple[Any, ...]]  # views of the inline column, or blob refs
        if inline is not None:
            payload, source = split_inline(inline, row, refs)
        else:
            # The payload runs code when unpickled: it is re-hashed in full, every time.
            payload = bytes(self.blobs.get(row["payload"], row["payload_size"], verify="always"))
            source = refs
        if type(source) is tuple:  # inline: small, no bar (a ``with`` of even a null context is two Python calls)
            value = _loads(payload, source)  # (``_unpickle``'s inline way, a Python call less)
        else:
            total = sum(n for _, n in source)
            with result_progress("loading", key[0], total) as step:
                if step is not None:  # a big result: the caller says what it loaded
                    row["loaded_bytes"] = total + row["payload_size"]
                value = self._unpickle(payload, source, step)
        self._remember(key, row, payload, source)
        return value

    def _unpickle(self, payload: bytes, source: Any, progress: Callable[[int], None] | None = None) -> Any:
        """Unpickle with the buffers of ``source``: a list of blob refs, or a tuple of inline views."""
        if type(source) is tuple:  # inline: verified when the row was read
            return _loads(payload, source)
        # Mapped read-only, afresh for each load: numpy arrays come back
        # read-only (so a write can never reach the blob or the next hit, and
        # the identity cache may trust their digest); torch storages re-map
        # their buffer copy-on-write (blobs.copy_on_write).
        # A signed store re-hashes buffers too: the signature covers their
        # digests, but a stat stamp is no proof (whoever can edit a blob can
        # put its mtime back). Unsigned stores trust the stamp, as documented.
        verify = "always" if source and signing.secret() is not None else "stamp"
        buffers = [self.blobs.get(d, size, mapped=True, verify=verify, progress=progress) for d, size in source]
        return _loads(payload, buffers)

    def has_copy(self, key: Key) -> bool:
        """Does this process hold a copy of ``key``'s result in memory (``load_from_memory``'s
        candidate)? A peek without the lock, as a dict's membership test is atomic: a copy made
        or dropped meanwhile answers as if the peek had come just before or just after it."""
        return key in self._memory

    def load_from_memory(self, key: Key, accept: Callable[[dict[str, Any]], bool] | None = None) -> tuple[bool, Any]:
        memory = self._memory  # (without the lock, as ``hit_in_memory`` says why)
        entry = memory.get(key)
        if entry is None:
            return False, None
        try:
            memory.move_to_end(key)
        except KeyError:
            return False, None
        row, payload, source = entry
        if accept is not None and not accept(row):
            return False, None
        try:
            value = self._unpickle(payload, source)
        except StoreMiss:
            # Code changed under us (a notebook cell re-run) or a blob went bad:
            # take the slow path, which records why and recomputes.
            self.forget_key(key)
            return False, None
        self.count_hit(row["id"])
        return True, value

    def memory_payload(self, key: Key, row: dict[str, Any]) -> bytes | None:
        """The payload of the in-memory copy of ``key`` whose row is ``row`` (that very object), or None."""
        entry = self._memory.get(key)  # (one C call: no lock needed, as in ``hit_in_memory``)
        return entry[1] if entry is not None and entry[0] is row else None

    def hit_in_memory(self, key: Key, row: dict[str, Any]) -> bool:
        """``load_from_memory``'s hit on the copy of ``key`` whose row is ``row`` (that very
        object), for a caller that holds the immutable value it unpickles to (``calls/fasthits``):
        made most recent and counted as that load is, without unpickling. False: no such copy.

        Without the lock: the look-up and the move are each one C call, which no other thread
        interleaves (the one Python-level walk of the copies, ``forget``'s, walks a list made in
        one C call). The hit is the copy the look-up found: one dropped before the move is a
        ``KeyError`` there, and a miss; one replaced meanwhile was this row's copy when found."""
        memory = self._memory
        entry = memory.get(key)
        if entry is None or entry[0] is not row:
            return False
        try:
            memory.move_to_end(key)
        except KeyError:
            return False
        # ``count_hit``, written out (a repeat hit's every step is a check: a call less)
        hits = self._hits
        i = row["id"]
        n, _ = hits.get(i, _NO_HITS)
        hits[i] = (n + 1, time.time())
        usage = self.usage
        # (``noted``'s own tests, written out: it has something to do only for a prompt writer, or
        # for a writer not started once its time is due)
        if usage.prompt or usage.thread is None and time.monotonic() > usage.due:
            usage.noted()
        return True

    def _remember(self, key: Key, row: dict[str, Any], payload: bytes, source: Any) -> None:
        memory = self._memory
        with self._memory_lock:
            old = memory.pop(key, None)
            size = self._memory_bytes + len(payload) - (0 if old is None else len(old[1]))
            memory[key] = (row, payload, source)
            while memory and (size > _MEMORY_BYTES or len(memory) > _MEMORY_ENTRIES):
                _, (_, p, _) = memory.popitem(last=False)
                size -= len(p)
            self._memory_bytes = size

    def forget(self, fn: str | None = None) -> None:
        """Drop in-process copies (of one function, or all)."""
        with self._memory_lock:
            # (a list made in one C call: ``hit_in_memory`` moves copies without the lock)
            for k in [k for k in list(self._memory) if fn is None or k[0] == fn]:
                self._memory_bytes -= len(self._memory.pop(k)[1])

    def mark_corrupt(self, key: Key, row: dict[str, Any], reason: str | None = None, status: str = "corrupt") -> None:
        self.forget_key(key)
        try:
            self.index.mark_corrupt(row["id"], reason, status)
        except sqlite3.Error:
            # the row is refused again on its next load; a recomputation overwrites it anyway
            swallowed("store: Store.mark_corrupt")

    def forget_key(self, key: Key) -> None:
        with self._memory_lock:
            old = self._memory.pop(key, None)
            if old is not None:
                self._memory_bytes -= len(old[1])

    # -- usage (batched: a hit must not cost a database write) ----------------------------
    def count_hit(self, eval_id: int) -> None:
        hits = self._hits
        n, _ = hits.get(eval_id, _NO_HITS)
        hits[eval_id] = (n + 1, time.time())
        usage = self.usage
        if usage.prompt or usage.thread is None and time.monotonic() > usage.due:  # (``noted``'s tests, as above)
            usage.noted()

    def _defer_stamp(self, digest: str, stamp: tuple[int, int, int]) -> None:
        self._stamps[digest] = stamp
        self.usage.noted()

    def _take_usage(self) -> tuple[dict[int, tuple[int, float]], dict[str, tuple[int, int, int]]]:
        # Swapped, not copied: a hit counted meanwhile lands in the new dict.
        # Approximate by design: a count racing the swap, or a SIGKILL, is lost.
        hits, self._hits = self._hits, {}
        stamps, self._stamps = self._stamps, {}
        return hits, stamps

    def _usage_into(self, c: sqlite3.Connection) -> None:
        """Piggy-back pending usage, and this thread's rider (``ride_along``), on a
        write transaction that is paid anyway (a result's record)."""
        hits, stamps = self._take_usage()
        write_usage(c, hits, stamps)
        riders = getattr(self, "_riders", None)
        rider = getattr(riders, "fn", None)
        if rider is not None and riders is not None:  # (a rider is found on riders only)
            riders.fn = None
            if isinstance(c, sqlite3.Connection):  # an index of another database (team.pg) takes no rider
                rider(c)
        for hook in self.record_hooks:
            hook(c)  # (raising rolls the record back: recorded with its hooks' writes, or not at all)

    def ride_along(self, fn: Callable[[sqlite3.Connection], None] | None) -> None:
        """Run ``fn(connection)`` inside this thread's next result record (``save``), in
        its transaction, after the row is written; None withdraws it. A rider that
        raises is rolled back alone (a savepoint): the result is recorded anyway.
        Whoever sets one must check it ran (a save that records nothing, say on a
        lost lease, does not run it) and withdraw it after the save."""
        riders = getattr(self, "_riders", None)
        if riders is None:
            riders = self._riders = threading.local()
        riders.fn = None if fn is None else _savepointed(fn)

    def logs_pending(self, key: Key) -> contextlib.AbstractContextManager[None]:
        """A block around saving ``key`` and then writing its run's logs (which name the saved
        evaluation, so they come after it). Nothing here; a team store uploads the result only
        after the block, with its logs."""
        return contextlib.nullcontext()

    # -- why a call missed: the memo layer hands the record over, the store writes it ------------
    def known_absent(self, key: Key) -> bool:
        """This thread's last lookup of ``key`` found no row at all (not even one out of use)."""
        return self.index.known_absent(key)

    def newest_id(self) -> int | None:
        """The newest evaluation's id: a miss explained when asked is compared with what existed before it."""
        return cast("int | None", self.index.conn().execute(NEWEST_ID_SQL).fetchone()[0])

    def miss_rider(self, fn: str, record: str) -> Callable[[sqlite3.Connection], None]:
        """A rider (``ride_along``, ``acquire(on_owner=...)``) recording why ``fn`` missed in the
        transaction it rides with; advisory: it never fails that transaction."""
        def write(c: sqlite3.Connection) -> None:
            try:
                insert_miss(c, fn, record)
            except sqlite3.Error:
                swallowed("store: Store.miss_rider.write")  # the lease (or the result) matters, the explanation does not

        return write

    def write_rider(self, rider: Callable[[sqlite3.Connection], None]) -> None:
        """Run ``rider`` in a transaction of its own (a miss record whose result was not stored)."""
        with self.index.write() as c:
            rider(c)

    def flush_hits(self) -> None:
        hits, stamps = self._take_usage()
        if hits or stamps:
            try:
                self.index.add_hits(hits, stamps)
            except (sqlite3.Error, OSError):  # the local index (a NoStore's raises StoreUnavailable, an OSError)
                swallowed("store: Store.flush_hits")  # advisory (counts) or recomputable (stamps): never fail anything over them

    def close(self) -> None:
        """Write pending hit counts and close this thread's index connection (its three
        file descriptors: the file, ``-wal``, ``-shm``). A later call reopens it."""
        self.flush_hits()
        self.index.close()

    # -- accepted code changes (store/accepts.py: ``memolab accept``) ------------------------------
    def accepts_of(self, fn: str, schema: str) -> list[dict[str, Any]]:
        """The active accepts of ``fn`` under key schema ``schema`` that may be followed."""
        from .accepts import usable

        return usable(self.index.accepts(fn, schema))

    def record_accept(self, rec: dict[str, Any]) -> dict[str, Any]:
        """Record accept ``rec`` (signed): ``{"id", "team"}`` (``team``: None, no team store here)."""
        from .accepts import record

        return {"id": record(self.index, rec), "team": None}

    def undo_accept(self, accept_id: int, by: str) -> dict[str, Any]:
        """Take accept ``accept_id`` back: ``{"undone": was it active, "team": None}``."""
        return {"undone": self.index.undo_accept(accept_id, by=by), "team": None}

    # -- maintenance ---------------------------------------------------------------------
    def clear(self, fn: str | None = None) -> int:
        self.forget(fn)
        self.stored_codes = {c for c in self.stored_codes if fn is not None and c[0] != fn}
        n = self.index.clear(fn)
        hooks.resolve(hooks.UPWARD["purge_logs"])(self.index, fn)  # the function's logged runs go with it
        self.collect_garbage()
        return n

    #: while anything computes, unreferenced blobs this recent are spared by gc
    IN_FLIGHT_GRACE = 3600.0

    def unreferenced_blobs(self, dropping: Sequence[int] = (), among: Sequence[str] | None = None) -> list[tuple[str, int]]:
        """Blobs no evaluation (other than ``dropping``) refers to: [(digest, size)].

        A writer puts its blobs first and records its evaluation after, so a
        blob may be unreferenced only because its evaluation is a moment away.
        While any lease is live, blobs written or reused (touched) within
        ``IN_FLIGHT_GRACE`` seconds are therefore spared. Even a blob lost to
        this race costs a recomputation, never a wrong result: loads verify.
        """
        refs = self.index.referenced_digests(exclude=set(dropping))
        busy = self.index.live_leases(config.settings().lease_ttl) > 0
        cutoff = time.time() - self.IN_FLIGHT_GRACE
        out = []
        for d in (self.blobs if among is None else among):
            if d in refs:
                continue
            if busy and self.blobs.mtime(d) > cutoff:
                continue
            out.append((d, self.blobs.size(d)))
        return out

    def gc_plan(self, older_than: float | None = None, max_size: int | None = None,
                now: float | None = None) -> list[dict[str, Any]]:
        """The evaluations ``gc`` drops, least recently used first: those out of
        use (not 'done'), those unused for ``older_than`` seconds, then the least
        recently used until what is left fits ``max_size`` bytes (a deduplicated
        blob counted once). Rows carry id, fn, finished, last_hit, size, status.

        Selected in SQL over plain tuples: a million evaluations cost one scan,
        not a dict per row (only the dropped rows become dicts)."""
        now = time.time() if now is None else now
        cutoff = None if older_than is None else now - older_than
        return self.index.gc_plan(cutoff, max_size)

    def collect_garbage(self, dry_run: bool = False) -> tuple[int, int]:
        """Delete blobs no evaluation refers to: (count, bytes)."""
        if dry_run:
            dead = self.unreferenced_blobs()
            return len(dead), sum(n for _, n in dead)
        hooks.resolve(hooks.UPWARD["purge_orphan_logs"])(self.index)  # logs live as long as their evaluation
        # Walk the folder without the lock, then decide again and delete under
        # the write lock: a writer records its row under the same lock and checks
        # there that its blobs still exist (Index.record), so no row can end up
        # referring to a blob deleted here. The lock is held for the candidates only.
        candidates = [d for d, _ in self.unreferenced_blobs()]
        with self.index.write() as c:
            dead = self.unreferenced_blobs(among=candidates) if candidates else []
            for d, _ in dead:
                self.blobs.delete(d)
            c.executemany("DELETE FROM blob_stamps WHERE digest=?", [(d,) for d, _ in dead])
            # Leases of owners that provably gave them up (died, or released them where deleting
            # the row failed) are otherwise only cleared when their key is asked for again.
            gone = self.index.abandoned_leases(c)
            c.executemany("DELETE FROM leases WHERE owner=? AND fn=? AND code=? AND args=? AND schema=?", gone)
        self.blobs.clean_tmp()
        from .health import compact

        compact(self.index)  # deleted rows give their space back
        return len(dead), sum(n for _, n in dead)


def _savepointed(fn: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
    def run(c: sqlite3.Connection) -> None:
        try:
            with savepoint(c, "memolab_rider"):
                fn(c)
        except Exception:  # a rider (a miss record, a run's row) must never lose the result it rides with
            swallowed("store: _savepointed.run")  # the rider alone is rolled back: the result is recorded anyway

    return run
