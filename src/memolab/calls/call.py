"""One call of a memoized function past this process's memory: the steps of its life.

``lifecycle.lifecycle`` decides what happens when (hit, wait, compute, store,
give back); ``Call`` does each step against the store: load a row (refusing a
damaged one), explain a miss (with the lease, in its transaction), open the run
its logs go to, store the result (or say why not), give a lease back. It never
waits for another owner and never calls the function: the drivers do.

The fields of a row as a call writes and reads them, and memory hits: ``calls/rows.py``.
"""
from __future__ import annotations

import contextvars
import inspect
import sqlite3
import time
import warnings
from collections.abc import Callable
from typing import Any

from .. import codegraph, hashing
from ..errors import CodeChanged, MemolabWarning, StoreMiss, Unloadable, swallowed, user_stacklevel
from ..inputs import expiry, globalrng, implicit, mutations, reads, upstream
from ..settings import config, hooks
from ..settings.text import short_repr
from ..store import Key, Store, marks, runtime_info
from ..tracking import runs
from . import report
from .explain import miss_record, pending_miss, with_before
from .rows import arg_snapshot, json_text, memory_hit, result_token, state_deps, states_named, versions_json
from .summary import summarize

__all__ = ["Call", "Running", "running", "IMPLICIT", "UNSTORED"]

#: the argument name under which a memoized callable object's own state is keyed
IMPLICIT = "<callable>"

#: stored rows of one key a call may find unusable before it computes without the store
LOADS_PER_CALL = 4


class Running:
    """The evaluation being computed in this context (``running()``): what
    ``memolab.checkpoint`` files its checkpoints under."""

    __slots__ = ("key", "store", "run", "force", "on_stored", "writes")

    def __init__(self, key: Key, store: Store, run: Any, force: bool) -> None:
        self.key = key
        self.store = store
        self.run = run  # the tracking run handle (or None), whose logs a resumed computation continues
        self.force = force  # computed by ``fresh()``: start over, whatever was checkpointed
        #: checkpoints are saved here (False: a rank other than 0 of a collective call, docs/distributed.md)
        self.writes = True
        self.on_stored: list[Callable[[], None]] = []

    def stored(self) -> None:
        """The result is stored: run what waited for that (dropping checkpoints)."""
        for cb in self.on_stored:
            try:
                cb()
            except Exception:  # housekeeping must never fail a call that succeeded
                swallowed("call: Running.stored")


_running: contextvars.ContextVar[Running | None] = contextvars.ContextVar("memolab_evaluation", default=None)


def running() -> Running | None:
    """The memoized evaluation computing in this context (a miss in progress), or None."""
    return _running.get()


#: a call whose key a stored row sent elsewhere this many times computes without the store
ROUTES_PER_CALL = 4
#: ``Call.reroute``'s answer when the rows of a call's global generator states run in circles
UNSTORED = "unstored"


#: ``Call``'s ``at`` not given: read here
_NOW: Any = object()
#: the exact types of a loaded value ``Call.load`` hands back as it is (``upstream.mark``'s atoms
#: too: pinned by ``tests/test_hit_path_costs.py``)
_SCALARS = frozenset((int, float, complex, bool, str, bytes, type(None)))


class Call:
    """One call on its way through a miss (the ``lifecycle.Steps`` of a memoized call).

    Warnings' stack levels count the frames above them to where the call was made:
    the step, ``lifecycle``, the driver, ``MemoFunction._call``, ``__call__``."""

    # The fields every call sets are slots; those a new call holds at a constant until a step of
    # a miss sets them are class attributes (read through the instance until then, written into
    # its ``__dict__``, made on the first write): a store hit sets none of them, 1,000 instructions
    # of its ``Call`` less. Mutable ones (a list, a dict) are each call's own, made here.
    __slots__ = ("memo", "signature", "arguments", "key", "key0", "per_arg", "cv", "store", "force", "files",
                 "named", "pending", "state_deps", "at", "visited", "__dict__")

    #: a damaged row of this key was taken out of use (at most once per call)
    retried: bool = False
    #: the argument snapshot, once made (``call_snapshot``)
    snapshot: dict[str, list[str]] | None = None
    #: stored rows of the key this call found unusable (``again``)
    loads: int = 0
    #: the global generators while the body runs (``globalrng.begin``), and what it did to them
    rng_frame: tuple[Any, Any] | None = None
    rng: globalrng.Outcome | None = None
    #: how often a stored row sent this call to another key (``reroute``)
    routes: int = 0
    #: the environment variables the body reads (``implicit.environ_frame``), the imports it tries
    env_frame: Any = None
    imports: Any = None
    #: the row in hand was found under other code the user accepted as this code
    #: (``accepted``): (the key it is stored under, the accepts followed); None: under ``key``
    via: tuple[Any, list[dict[str, Any]]] | None = None
    #: why the stored row of the key expired (``expired``): the call recomputes it
    expiry: str | None = None
    #: the miss record ``miss_writer`` made (JSON text), which ``report`` explains from
    miss_text: str | None = None
    #: ``report`` announced this miss (its store is then announced too); seconds it computed
    announced: bool = False
    computed: float | None = None
    edges: list[dict[str, str]] | None = None
    #: what the body read by path and the evaluations it used (``reads``), and why its
    #: result must not be stored (a file it read changed while it ran), once it ran
    reads: tuple[dict[str, Any] | None, str | None] = (None, None)
    #: what the arguments held before the body that their key does not show: live iterators,
    #: gradients (``mutations.live_parts``)
    live0: mutations.Before | None = None
    #: ``bound``, once made
    _bound: inspect.BoundArguments | None = None

    def __init__(self, memo: Any, signature: inspect.Signature, arguments: dict[str, Any], key: Key,
                 per_arg: dict[str, str], cv: codegraph.CodeVersion, store: Store, force: bool,
                 files: bool | list[str], named: list[tuple[str, Any]], visited: list[Any] | None = None,
                 at: Any = _NOW) -> None:
        self.memo = memo  # the MemoFunction: symbol, ignore, version, implicit
        #: the call's arguments as bound (``MemoFunction.bind``: defaults applied, in signature
        #: order), and the signature they were bound with: ``bound``, made only when asked
        self.signature = signature
        self.arguments = arguments
        self.key = key
        #: the key as the arguments made it (``key`` differs once a row routed the call:
        #: see ``reroute``); every rank of a collective call agrees on this one
        self.key0 = key
        self.per_arg = per_arg
        self.cv = cv
        self.store = store
        self.force = force
        #: the key hashed File/Dir arguments: re-check them before storing
        self.files = files
        #: the (name, value) pairs the key hashed
        self.named = named
        #: a lease-free miss's record, until written (with the result, or alone)
        self.pending: list[Callable[[Any], None]] = []
        #: what the result depends on besides its key (``implicit``): generator states, libraries
        self.state_deps: dict[str, str] = {}
        #: when the call started, by memolab's clock (``expiry``): what a stored row's age is judged
        #: at; None for a function that does not expire. ``at``: the caller's reading of it, if made
        self.at: float | None = at if at is not _NOW else (
            expiry.now() if memo.max_age is not None or memo.validate is not None else None)
        #: what the argument hash walked through (``hashing.hash_arguments(visit=...)``), until a
        #: miss looks for results of other evaluations in it (``inputs``); a hit drops it
        self.visited = visited

    @property
    def bound(self) -> inspect.BoundArguments:
        """The call's ``BoundArguments`` (what the body is called with), made on first use: a
        store hit never asks (its Python ``__init__`` is 1,700 instructions)."""
        b = self._bound
        if b is None:
            b = self._bound = inspect.BoundArguments(self.signature, self.arguments)
        return b

    # -- lineage -------------------------------------------------------------------------
    def inputs(self) -> list[dict[str, str]]:
        """The input edges of this call (``upstream.input_edges``), found once, on a miss."""
        if self.edges is None:
            visited, self.visited = self.visited, None
            try:
                self.edges = upstream.input_edges(self.named, visited, self.per_arg, self.store, self.key0)
            except Exception:  # lineage is information: never fail a call over it
                swallowed("call: Call.inputs")
                self.edges = []
        return self.edges

    # -- global generators ---------------------------------------------------------------
    def reroute(self, row: dict[str, Any]) -> Any | None:
        """``row`` was found for this call's key: None to use it; else the key to look at
        instead (the call has moved there), or ``UNSTORED``.

        A row whose body drew from a global generator (``globalrng``) records the digest of
        that generator's state at its entry, and one whose body imported a library inside a
        function records its version (``implicit``); it serves only a call made in those
        states. Any other call goes to the key of its own states — computed from the
        arguments' key and the current states the row names — where an evaluation made
        in those states is stored, or will be."""
        deps = state_deps(row)
        if not deps:
            return None
        now = implicit.mismatch(deps)
        if now is None:
            return None
        self.routes += 1
        if self.routes > ROUTES_PER_CALL:
            return UNSTORED
        fn, code, args, schema = self.key0
        self.key = Key(fn, code, implicit.routed(args, now), schema)
        self.per_arg = dict(self.per_arg, **{implicit.pseudo_argument(n): d for n, d in now.items()})
        self.snapshot = None
        self.via = None
        return self.key

    # -- accepted code changes and expiry -------------------------------------------------------
    def accepted(self, row: dict[str, Any] | None, lookup: Callable[[Any], Any] | None = None) -> dict[str, Any] | None:
        """The row this call may use: ``row`` when one was found under its key; else one stored
        under code the user accepted as giving the same results as this code (``memolab accept``:
        the same function, argument digest and key schema, only the code digest replaced, as
        ``store/accepts.py`` says); else None. ``via`` says which."""
        self.via = None
        if row is not None or self.force or self.memo.code == "version":
            return row
        fn, code, args, schema = self.key
        try:
            found = self.store.accepts_of(fn, schema)
        except Exception:  # accepts are a shortcut: never a reason to fail or to skip the store
            swallowed("call: Call.accepted")
            return None
        if not found:
            return None
        from ..store.accepts import resolve

        look = lookup or self.store.lookup
        for old, chain in resolve(found, code):
            k = Key(fn, old, args, schema)
            other = look(k)
            if other is not None:
                self.via = (k, chain)
                return other
        return None

    def expired(self, row: dict[str, Any]) -> str | None:
        """Why stored ``row`` is expired for this call (``@memo(max_age=..., validate=...)``; a file
        it read by path changed, an evaluation it used is out of date: ``reads``), or None. An
        expired row makes the call recompute and replace it (as ``fresh()`` does)."""
        why = reads.stale(row, self.at)
        if why is None:
            if self.at is None:
                return None
            why = expiry.verdict(row, self.at, self.memo.max_age, self.memo.validate, self.memo.symbol)
        if why is not None:
            self.expiry, self.force, self.via = why, True, None
        return why

    def from_memory(self) -> tuple[bool, Any]:
        """A hit on this process's in-memory copy of the key's result, or (False, None)."""
        at, memo = self.at, self.memo
        fresh = None if at is None else (lambda row: expiry.verdict(row, at, memo.max_age, memo.validate,
                                                                    memo.symbol) is None)
        return memory_hit(self.store, self.key, fresh, self.named)

    # -- looking up ----------------------------------------------------------------------
    def load(self, row: dict[str, Any]) -> tuple[bool, Any]:
        """(True, value) of a stored row; (False, None) if it cannot be used (taken out of use)."""
        store, key = self.store, (self.via[0] if self.via is not None else self.key)
        t0 = time.perf_counter()
        try:
            value = store.load(key, row)
        except CodeChanged as e:
            # Code the result refers to changed: an ordinary miss, not damage.
            store.mark_corrupt(key, row, e.reason, status="stale")
            return False, None
        except Unloadable as e:
            # The result's own code refused to rebuild it: not damage, and the same
            # value stored again would be refused again (see ``_unloadable``).
            warnings.warn(f"{self.memo.symbol}: stored result #{row['id']} cannot be used ({e.reason}); recomputing",
                          MemolabWarning, stacklevel=user_stacklevel())
            store.mark_corrupt(key, row, e.reason, status="unloadable")
            return False, None
        except (ValueError, TypeError, KeyError, IndexError) as e:
            # An index row that does not decode (damaged JSON or sizes): a miss
            # whose recomputation replaces the row, never an error out of the call.
            warnings.warn(f"{self.memo.symbol}: stored result #{row.get('id')} cannot be used (damaged index row: "
                          f"{type(e).__name__}: {e}); recomputing", MemolabWarning, stacklevel=user_stacklevel())
            store.mark_corrupt(key, row, f"damaged index row: {e}")
            return False, None
        except StoreMiss as e:
            if self._row_replaced(row):
                # Another process cleared, collected or recomputed this row (and
                # its blobs) while we read it: nothing is damaged, read again.
                return False, None
            warnings.warn(f"{self.memo.symbol}: stored result #{row['id']} cannot be used ({e.reason}); recomputing",
                          MemolabWarning, stacklevel=user_stacklevel())
            store.mark_corrupt(key, row, e.reason)
            return False, None
        seconds = time.perf_counter() - t0
        v = self.memo.verbose  # (the hit path: attributes, not calls)
        if seconds >= report.SLOW or "loaded_bytes" in row or v == 2 or (v is None and report.ALL):  # slow, big, level 2
            _quietly(report.loaded, self, row, seconds)
        store.count_hit(row["id"])
        if type(value) in _SCALARS:
            # a scalar as stored: no generators' states (``globalrng.Result``) nor arguments to put
            # back (``mutations.Post``) wrap it, and lineage marks no scalar (``upstream.mark``):
            # those steps would return it as it is (four Python calls of a store hit)
            hashing.remember_loaded(value, key, result_token(row), row["id"])
        else:
            value, post = mutations.split(globalrng.restore(value))
            hashing.remember_loaded(value, key, result_token(row), row["id"])
            value = mutations.restore(value, post, self.named)  # into the caller's arguments
            upstream.mark(value, store, row["id"], key)
        self.visited = None
        if reads.RECORDING.get() is not None:  # (``reads.active()``: a body calls this one) it used this evaluation
            reads.consumed(key, row.get("started"), row.get("finished"), row["id"], reads.record_text(row))
        return True, value

    def _row_replaced(self, row: dict[str, Any]) -> bool:
        try:
            now = self.store.index.lookup(self.key)
        except (sqlite3.Error, OSError):  # the local index (every store's, a team store's too): "not replaced"
            swallowed("call: Call._row_replaced")
            return False
        return now is None or now["id"] != row["id"]

    def again(self) -> bool:
        """A stored row of the key could not be used (and was taken out of use): look
        again? Bounded: a row the store cannot take out of use (a read-only store, a write
        that fails) would otherwise be found, and refused, forever."""
        self.loads += 1
        return self.loads < LOADS_PER_CALL

    def trouble(self, e: BaseException) -> bool:
        """The store failed this call: True to claim again (once: the key's row held text that
        does not decode and was taken out of use), else warn and let the caller compute unstored."""
        from ..store.health import take_out_of_use

        if isinstance(e, UnicodeDecodeError) and not self.retried:
            self.retried = True
            if take_out_of_use(self.store, self.key, f"undecodable text in the index ({e})"):
                return True
        self._unusable(e)
        return False

    def _unusable(self, e: BaseException) -> None:
        # A full disk, an unwritable, read-only, damaged or newer index must cost
        # the cache, never the value: compute without a lease and without storing.
        # Once per store and problem: a loop of calls must not drown in warnings.
        from ..store.health import warn_unusable

        warn_unusable(self.memo.symbol, e, stacklevel=user_stacklevel())

    # -- missing -------------------------------------------------------------------------
    def lease_free(self) -> bool:
        """A miss of a quick function (``Store.is_quick``) computes without a lease: its miss
        is recorded with its result, in one transaction instead of two."""
        if self.force or not self.store.is_quick(self.key):
            return False
        writer = self.miss_writer()
        self.pending[:] = [] if writer is None else [writer]
        return True

    def miss_writer(self) -> Callable[[Any], None] | None:
        """Why this call misses, recorded with the lease we are about to take, in its
        transaction (a lease-free miss: with its result); None if it cannot be
        explained. A miss of code this process has seen stored, whose key has no row
        at all (the common one: new arguments), is explained when asked
        (``explain.settle``), from its key and argument snapshot; any other is
        explained now (bounded: indexed reads of the nearest evaluation)."""
        store, key = self.store, self.key
        try:
            inputs = self.inputs()
            if self.expiry is not None:
                text = json_text({"fn": self.memo.symbol, "hit": False, "reasons": [self.expiry], "diffs": {},
                              "evaluation": None})
            elif not self.force and (key[0], key[1]) in store.stored_codes and store.known_absent(key):
                # the evaluations that exist now, before this miss stores its own
                text = with_before(pending_miss(key, self.call_snapshot(), self.cv.sensitivity, inputs),
                                   store.newest_id())
            else:
                text = json_text(miss_record(store, key, self.call_snapshot(), self.cv, forced=self.force, inputs=inputs))
        except Exception:  # explaining must never stop the computation
            swallowed("call: Call.miss_writer")
            return None
        self.miss_text = text
        return store.miss_rider(self.memo.symbol, text)

    def call_snapshot(self) -> dict[str, list[str]]:
        """``arg_snapshot`` of this call, made once for its miss record and its result's row."""
        if self.snapshot is None:
            self.snapshot = arg_snapshot(self.named + states_named(self.per_arg), self.per_arg)
        return self.snapshot

    # -- computing -----------------------------------------------------------------------
    def start(self) -> tuple[float, Any]:
        """We own the key's lease (its miss recorded with it), or need none (a quick
        function): open a run for its logs."""
        self.announced = bool(_quietly(report.miss, self))  # on the ``memolab`` logger, if its verbosity says so
        t0 = expiry.now()
        return t0, runs.begin(self.memo.symbol, self.key, self.bound.arguments, self.store, self.call_snapshot)

    def enter(self, run: Any) -> tuple[Running, Any]:
        """``running()`` is this evaluation while the function computes; the global
        generators are watched while it does (``globalrng``)."""
        hooks.before_computing()  # integrations acting inside computations (HF's cache names, generators)
        self.inputs()  # (the walk's objects are let go before the body runs)
        self.live0 = mutations.live_parts(self.named)
        ev = Running(self.key, self.store, run, self.force)
        token = (_running.set(ev), reads.begin(self.store.root, self.files if isinstance(self.files, list) else ()))
        self.env_frame = implicit.environ_frame()
        self.imports = implicit.imports_frame()
        if self.memo.global_rng:
            self.rng_frame = globalrng.begin()
        return ev, token

    def leave(self, token: Any, seconds: float) -> None:
        token, reading = token
        self.reads = reads.end(*reading)
        # (the body that called this one, if any, consumed this evaluation and what it read)
        reads.consumed(self.key, reading[0].started, expiry.now(), None, self.reads[0])
        if self.rng_frame is not None:
            frame, self.rng_frame = self.rng_frame, None
            self.rng = globalrng.end(*frame)
        if self.env_frame is not None:
            frame, self.env_frame = self.env_frame, None
            implicit.env_read(frame, self.memo.symbol, self.memo.env)
        if self.imports is not None:
            frame, self.imports = self.imports, None
            self.state_deps = implicit.imports_used(frame, self.cv.lazy)
        if self.rng is not None:
            self.state_deps.update(self.rng.deps)
        _running.reset(token)
        self.store.note_duration(self.key, seconds)
        self.computed = seconds
        report.note(self.store, self.key, seconds)

    def failed(self, owner: str, run: Any, error: BaseException | None = None) -> None:
        self.store.release(self.key, owner)
        self._write_pending()
        runs.end(run, "failed", error=error)
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C: one line, where its logs are
            _quietly(report.interrupted, self, self.computed, run[0].id if run else None)

    def release(self, owner: str) -> None:
        """Give back a lease the call may hold (it ends without settling it: an exception, a
        cancellation). Best effort, like ``Store.release``: it runs while something else is raised."""
        try:
            self.store.release(self.key, owner)
        except Exception:  # runs while something else is raised; the store may be of any backend
            swallowed("call: Call.release")

    def _write_pending(self) -> None:
        """The miss record of a lease-free miss that did not ride with a stored result."""
        if not self.pending:
            return
        write = self.pending.pop()
        try:
            self.store.write_rider(write)
        except Exception:  # the explanation is advisory, and the store may be of any backend
            swallowed("call: Call._write_pending")  # the explanation is advisory: never fail the call over it

    # -- storing -------------------------------------------------------------------------
    def done(self, owner: str, value: Any, t0: float, run: Any, ev: Running | None = None) -> None:
        try:
            self._finish(owner, value, t0, run, ev)
        finally:
            self._write_pending()

    def _finish(self, owner: str, value: Any, t0: float, run: Any, ev: Running | None) -> None:
        store, key = self.store, self.key
        if not self.force and not store.known_absent(key) and self._unloadable(value):
            store.release(key, owner)
            runs.end(run, "done", None)
            return
        # the arguments hashed again against the key's own digests (``key0``'s, not a routed key's):
        # what the body changed is stored with the result and put back by a hit (``mutations``)
        changes = mutations.changed(self.named, self.per_arg, self.live0, bool(self.files))
        why = None
        if changes.files:
            # A file argument was rewritten between keying and reading: the result
            # belongs to neither content, so it is returned but not stored.
            why = "a memolab.File/Dir argument changed while the function ran"
        elif changes.unrestorable is not None:
            path, what = changes.unrestorable
            why = f"memolab cannot put back on a hit what the function did to {path} ({what})"
        if why is not None:
            warnings.warn(f"{self.memo.symbol}: {why}; the result is returned but not stored", MemolabWarning,
                          stacklevel=user_stacklevel())
            store.release(key, owner)
            runs.end(run, "done", None)
            return
        if self.reads[1] is not None:
            # A file it read by path changed while it ran (or it read too many to record)
            warnings.warn(f"{self.memo.symbol}: {self.reads[1]}; the result is returned but not stored",
                          MemolabWarning, stacklevel=user_stacklevel())
            store.release(key, owner)
            runs.end(run, "done", None)
            return
        # A run that logged nothing is written with the result, in its transaction, and
        # so is a lease-free miss's record.
        rider = runs.rider(run, key)
        ride = store.ride_along if rider is not None or self.pending else None
        if ride is not None:
            ride(rider if not self.pending else _with_pending(self.pending, rider))
        with store.logs_pending(key):  # the run names the evaluation: a team upload waits for its logs
            try:
                eval_id = self._save(owner, value, t0, changes)
            finally:
                if ride is not None:
                    ride(None)
            if eval_id is not None and ev is not None:
                ev.stored()
            runs.end(run, "done", eval_id, written=rider if ride is not None and eval_id is not None else None)

    def _unloadable(self, value: Any) -> bool:
        """The same result was stored before and could not be rebuilt (a ``__setstate__`` that
        raises): storing it again would only be refused again on the next call, so the value is
        returned unstored. "The same" is the same pickle payload; a different one is stored."""
        from ..store.health import unloadable

        prev = unloadable(self.store, self.key)
        if prev is None:
            return False
        why, payload_digest = prev
        try:
            from .. import pickling
            from ..store import digest_bytes

            if digest_bytes(pickling.dumps_with_refs(value)[0]) != payload_digest:
                return False
        except Exception:  # pickling runs the value's own code (__reduce__): it cannot even be pickled
            swallowed("call: Call._unloadable")
            return False  # ``_save`` says why
        warnings.warn(f"{self.memo.symbol}: result not stored: the same result stored before could not be rebuilt "
                      f"({why}), so it is computed on every call. Make its class load again (or return plain data).",
                      MemolabWarning, stacklevel=user_stacklevel())
        return True

    def _save(self, owner: str, value: Any, t0: float, changes: mutations.Changes | None = None) -> int | None:
        store, key, memo, cv = self.store, self.key, self.memo, self.cv
        t1 = expiry.now()
        info = runtime_info()
        # the arguments it changed (and those it returns) travel with the result: a hit puts them back
        rng, stored = self.rng, value if changes is None else changes.wrap(value)
        args = self.call_snapshot()
        token, value_digest = hashing.result_digests(value)
        if rng is not None and (rng.deps or rng.exit or rng.replay):
            # the generators' states travel with the result: a hit restores them
            stored = globalrng.Result(stored, rng.deps, rng.exit, rng.replay)
        if self.state_deps:
            # the states it was made in are what a later call must have to use it (``reroute``)
            states = {implicit.pseudo_argument(n): d for n, d in self.state_deps.items()}
            args = {**{n: a for n, a in args.items() if not implicit.is_pseudo_argument(n)},
                    **arg_snapshot(states_named(states), states)}
        snapshot = {
            "deps": cv.deps,
            "args": args,
            "ignored": sorted(memo.ignore),
            "version": memo.version,
            "result": short_repr(value),
            "result_summary": summarize(value),  # "state_dict: 6 tensors, 1.2 MB" for the dashboard
            # digests of the result's arrays/tensors: a loaded copy passed to
            # another memoized function is then hashed in O(1) (hashing.remember_loaded)
            "result_digest": token,
            # generator -> digest of its state at entry, "pkg:<library>" -> version: a row used
            # only in those states
            "state_deps": self.state_deps or None,
        }
        if rng is not None and rng.why:  # why a generator's state is in the key, for a miss line
            snapshot["state_why"] = {implicit.pseudo_argument(n): w for n, w in rng.why.items()}
        if memo.max_age is not None:  # what `memolab ls` tells expired rows by (the code's own max_age decides hits)
            snapshot["max_age"], snapshot["expires"] = memo.max_age, t0 + memo.max_age
        # lineage (upstream.py): where the arguments' results of other evaluations sit, and this
        # result's digest as an argument (how a copy of it is recognised later)
        inputs = self.inputs()
        if inputs:
            snapshot["inputs"] = inputs
        if self.reads[0]:  # files read by path, evaluations used (``reads``): checked on every hit
            snapshot["reads"] = self.reads[0]
        if value_digest is not None:
            snapshot["value_digest"] = value_digest
        sources = {d: (sym, cv.sources[sym]) for sym, d in cv.deps.items() if sym in cv.sources}
        fields = {
            "started": t0, "finished": t1, "duration": t1 - t0,
            "host": info["host"], "python": info["python"],
            "versions": versions_json(info["memolab"]),
            "snapshot": json_text(snapshot),
        }
        try:
            s0 = time.perf_counter()
            eval_id = store.save(key, owner, stored, fields, sources)
            saving = time.perf_counter() - s0
            hashing.note_result(key, snapshot["result_digest"], eval_id)
            upstream.mark(value, store, eval_id, key, self.bound.arguments.values())
        except Exception as e:  # pickling runs the value's own code; the store may be of any backend
            swallowed("call: storing the result")
            store.release(key, owner)
            from ..pickling import find_unpicklable

            path, reason = find_unpicklable(value)
            if not path and changes is not None and changes.args:
                path, reason = find_unpicklable(changes.args, "args")  # an argument it changed, stored with it
            where = f" at {path}" if path else ""
            if config.settings().warn_unstorable:
                warnings.warn(f"{memo.symbol}: result not stored{where}: {reason or e}. The computed value is returned "
                              "but the next call will recompute it.", MemolabWarning, stacklevel=user_stacklevel())
            return None
        store.stored_codes.add((key[0], key[1]))  # this code's later misses can be explained when asked
        marks.after_save(store, key, memo.keep, memo.team)  # @memo(keep=True), @memo(team=False)
        _quietly(report.stored, self, eval_id, saving, self.computed, self.announced)
        return eval_id


def _quietly(fn: Callable[..., Any], *args: Any) -> Any:
    """A ``report`` line: what memolab says must never fail the call it speaks of."""
    try:
        return fn(*args)
    except Exception:  # report formats the user's values (their __repr__): what memolab says never fails the call
        swallowed("call: _quietly")
        return None


def _with_pending(pending: list[Callable[[Any], None]],
                  rider: Callable[[Any], None] | None) -> Callable[[Any], None]:
    """A rider writing a lease-free miss's record, then ``rider`` (a run's)."""
    def both(c: Any) -> None:
        pending[0](c)
        if rider is not None:
            rider(c)
        pending.clear()  # reached only if nothing raised: the savepoint keeps both

    return both
