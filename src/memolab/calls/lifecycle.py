"""The life of one memoized call, as one generator shared by sync and async calls.

``lifecycle`` is the decision logic of a call that missed this process's memory:
lookup → hit (load); a lease-free miss; claim the key's lease → wait while another
owner computes it → compute → store (or give the lease back); store trouble
(compute without the store); damaged rows (take them out of use, look again,
boundedly). It does no I/O of its own kind: it *yields* what it needs done,
``Pause(seconds)`` (another owner holds the key) and ``COMPUTE`` (call the
function), and is sent the answer (or thrown the exception). Two drivers of about
twenty lines do those two things: ``drive_sync`` sleeps and calls, ``drive_async``
awaits ``asyncio.sleep`` and the coroutine (the shape of h11/httpcore: protocol
logic without I/O). A third driver (all ranks of a process group agreeing on hit
or miss) plugs in at the same seam. ``first_look`` runs the first round as a plain
function for a sync call (a store hit needs no generator) and hands what it found to
``lifecycle``; ``use_row`` is what every round does with a stored row.

One ``finally`` gives back a lease the call may hold on every exit: the function
raising, ``KeyboardInterrupt`` during the computation or the wait, an async task
cancelled while it waits or computes. (A team store keeps its local lease while
the team says "wait": before this, a cancelled wait kept it heart-beaten for the
life of the process, and the key blocked every later call of it there.)

The wait for another owner, ``claim`` and its ``Pause``, is the store's
(``store/waits.py``: ``Store.acquire`` waits with it too); this module imports nothing
else of memolab. What a call does at each step is the ``Steps`` it is given
(``memolab.calls.call.Call``).
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Generator
from enum import Enum
from typing import Any, Protocol

from ..store.waits import Pause, claim

__all__ = ["Pause", "Compute", "COMPUTE", "Steps", "State", "ROUNDS", "claim", "lifecycle", "first_look", "use_row",
           "drive_sync", "drive_async"]


class State(str, Enum):
    """Where a call stands in ``lifecycle``. A ``str``: the store's ``try_acquire`` answers with
    the same words ('hit', 'owner', 'wait'), and ``call.reroute`` with 'unstored'."""

    HIT = "hit"  # a stored row answers the call: load it
    FREE = "free"  # a lease-free miss (``Steps.lease_free``): compute, claim nothing
    OWNER = "owner"  # this call holds the key's lease: compute and store
    WAIT = "wait"  # another owner computes the key (``claim`` polls)
    UNSTORED = "unstored"  # compute, store nothing (a row that cannot be used, or routed nowhere)


HIT, FREE, OWNER, UNSTORED = State.HIT, State.FREE, State.OWNER, State.UNSTORED

#: rounds of ``lifecycle``'s loop at most. Each way round is bounded by its step (a reroute by
#: ``call.ROUTES_PER_CALL``, a refused row by ``LOADS_PER_CALL``, a damaged row once, an expired
#: row once: it recomputes); this bound, far above their sum, turns a step that breaks its own
#: bound into an error instead of a call that never returns
ROUNDS = 64


class Compute:
    """Call the function with the call's arguments; send its value, or throw what it raised."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "COMPUTE"


COMPUTE = Compute()

Request = Any  # Pause | Compute
Row = dict[str, Any]

#: what the store raises when it cannot serve a call: the value is computed without it
#: (``StoreUnavailable`` is an ``OSError``; an index text that does not decode, a ``UnicodeDecodeError``)
STORE_TROUBLE = (sqlite3.Error, OSError, UnicodeDecodeError)


class Steps(Protocol):
    """What ``lifecycle`` asks of a call (``memolab.calls.call.Call``); each step is plain I/O-free-to-the-
    lifecycle code: it may read and write the store, never wait for another owner."""

    store: Any
    key: Any
    force: bool
    expiry: str | None  # why the row in hand expired (set by ``expired``): the call recomputes it
    at: float | None  # when the call started, by the expiry's clock; None: its function does not expire

    def reroute(self, row: Row) -> Any | None: ...
    def accepted(self, row: Row | None) -> Row | None: ...
    def expired(self, row: Row) -> str | None: ...
    def lease_free(self) -> bool: ...
    def miss_writer(self) -> Callable[[Any], None] | None: ...
    def load(self, row: Row) -> tuple[bool, Any]: ...
    def again(self) -> bool: ...
    def trouble(self, e: BaseException) -> bool: ...
    def start(self) -> tuple[float, Any]: ...
    def enter(self, run: Any) -> tuple[Any, Any]: ...
    def leave(self, token: Any, seconds: float) -> None: ...
    def failed(self, owner: str, run: Any, error: BaseException) -> None: ...
    def done(self, owner: str, value: Any, t0: float, run: Any, ev: Any) -> None: ...
    def release(self, owner: str) -> None: ...


#: what a stored row in hand came to (``use_row``), which ``lifecycle``'s round acts on
LOADED, ROUTED, EXPIRED, AGAIN = "loaded", "routed", "expired", "again"
Outcome = tuple[str, Any]  # (LOADED, value) | (ROUTED, key) | (EXPIRED, None) | (AGAIN, None) | (UNSTORED, None)


def use_row(call: Steps, row: Row) -> Outcome:
    """What a round of ``lifecycle`` does with a stored row that answers the call: look where
    the call's global generator states send it (``ROUTED``, or ``UNSTORED``), recompute it if
    it expired (``EXPIRED``), else load it (``LOADED``; one that cannot be used: ``AGAIN``
    while the call may look again, else ``UNSTORED``)."""
    # (a row whose extracted ``state_deps`` is empty, most rows, was made in no recorded state:
    # ``reroute`` would answer None from that alone, so it is asked only of the others)
    where = None if "state_deps" in row and not row["state_deps"] else call.reroute(row)
    if where is not None:
        # made from other global generator states: look where this call's belong
        return (ROUTED, where) if where != UNSTORED else (UNSTORED, None)
    # (nor ``expired`` of a row that recorded no reads, most rows, in a call of a function that
    # does not expire, ``at`` None: it would answer None from those two alone)
    if not ("reads" in row and not row["reads"] and call.at is None) and call.expired(row) is not None:
        return EXPIRED, None  # (``expired`` made the call one that recomputes and replaces it)
    found, value = call.load(row)
    if found:
        return LOADED, value
    return (AGAIN, None) if call.again() else (UNSTORED, None)


def first_look(call: Steps) -> tuple[bool, Any]:
    """Round one of ``lifecycle`` up to where it would yield, as a plain function: a generator
    costs a store hit ~9,000 instructions (its frame, the driver, the ``StopIteration`` of its
    return). (True, value) when the stored row answers the call; else (False, what the round
    found), which ``lifecycle(call, new_owner, found)`` goes on from, as if it had found it
    itself: its own lookup, the row's outcome or what the lookup raised."""
    try:
        row = None if call.force else call.store.lookup(call.key)
        # (``accepted`` of a row found under the key returns it and clears ``via``, which a new
        # call has not set: it is asked only when none was found)
        if row is None:
            row = call.accepted(None)
            if row is None:
                return False, (None, None)
        outcome = use_row(call, row)
    except STORE_TROUBLE as e:
        return False, e
    if outcome[0] is LOADED:
        return True, outcome[1]
    return False, (row, outcome)


def lifecycle(call: Steps, new_owner: Callable[[], str],
              first: tuple[Row | None, Outcome | None] | BaseException | None = None) -> Generator[Request, Any, Any]:
    """The decision logic of one call (see the module's docstring); returns its value.

    ``new_owner`` makes the lease owner id, only when the call first claims the key
    (a hit makes none: it reads /proc): per thread for a sync call, per task for an
    async one (two coroutines on one thread must not share a lease). ``first``: what
    ``first_look`` found in the first round, which then starts from it."""
    store, key, force = call.store, call.key, call.force
    owner = ""  # ours, once made
    held = ""  # a lease this call may hold: the ``finally`` gives it back unless settled
    try:
        state: str  # a ``State``, or the store's same word for one (``claim``: 'hit', 'owner')
        for _round in range(ROUNDS):
            try:
                outcome: Outcome | None = None
                if first is None:
                    # (no row under the key: perhaps one under code the user accepted as this code)
                    row = call.accepted(None if force else store.lookup(key))
                else:
                    key, force = call.key, call.force  # (as ``first_look``'s steps left them)
                    if isinstance(first, BaseException):
                        e, first = first, None
                        raise e
                    (row, outcome), first = first, None
                if row is not None:
                    state = HIT
                elif call.lease_free():
                    state = FREE
                else:
                    owner = held = owner or new_owner()
                    # (a team store keeps its local lease while it says "wait": held until settled)
                    state, row = yield from claim(store, key, owner, force, call.miss_writer())
                    if state == HIT:
                        held = ""
                        row = call.accepted(row)
                    elif state == OWNER and force and call.expiry is not None:
                        # recomputing an expired row: another process may have just done it
                        # while we waited for its lease (then its row is fresh: use it)
                        again = store.lookup(key)
                        if again is not None and call.expired(again) is None:
                            call.release(owner)
                            held, state, row = "", HIT, again
                if state == HIT:
                    what, value = outcome if outcome is not None else use_row(call, row)  # type: ignore[arg-type]
                    if what is LOADED:
                        return value
                    if what is ROUTED:
                        key = value
                        continue
                    if what is EXPIRED:
                        force = True
                        continue
                    if what is AGAIN:
                        continue
                    state = UNSTORED
            except STORE_TROUBLE as e:
                if call.trouble(e):
                    continue  # the key's damaged row was taken out of use: claim it afresh
                return (yield COMPUTE)
            if state == UNSTORED:
                return (yield COMPUTE)
            lease = owner if state == OWNER else ""  # a lease-free miss holds none
            t0, run = call.start()
            ev, token = call.enter(run)
            c0 = time.perf_counter()
            try:
                value = yield COMPUTE
            except BaseException as e:
                call.leave(token, time.perf_counter() - c0)
                call.failed(lease, run, e)  # gives the lease back first
                held = ""
                raise
            call.leave(token, time.perf_counter() - c0)
            call.done(lease, value, t0, run, ev)  # stores (dropping the lease) or gives it back
            held = ""
            return value
        raise RuntimeError(f"memolab internal error: the call of {key[0] if key else '?'} went round its lifecycle "
                           f"{ROUNDS} times without an answer (a step broke its own bound); nothing was stored")
    finally:
        if held:
            call.release(held)


def drive_sync(gen: Generator[Request, Any, Any], fn: Callable[..., Any] | None, bound: Any = None) -> Any:
    """Run ``gen`` in this thread: sleep for a ``Pause``; for ``COMPUTE`` call ``fn`` with the
    arguments of ``bound`` (``inspect.BoundArguments``, read only then: a hit never pays for
    ``.args``/``.kwargs``). What either raises (``KeyboardInterrupt`` in the sleep too) is
    thrown into ``gen``, which settles (gives a held lease back) and raises it again."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = gen.send(answer) if error is None else gen.throw(error)
        except StopIteration as stop:
            return stop.value
        except RuntimeError as r:
            # a StopIteration of ``fn`` leaving the generator became this (PEP 479): raise fn's own
            if error is None or r.__cause__ is not error:
                raise
            break
        error = None
        try:
            if request.__class__ is Pause:
                time.sleep(request.seconds)
                answer = None
            else:
                answer = fn(*bound.args, **bound.kwargs)  # type: ignore[misc]
        except BaseException as e:  # the user's body: handed to the lifecycle, which raises it
            error = e
    raise error  # set: the loop leaves only by return, raise or this break


async def drive_async(gen: Generator[Request, Any, Any], fn: Callable[..., Awaitable[Any]], bound: Any) -> Any:
    """Run ``gen`` in this task: ``await asyncio.sleep`` for a ``Pause`` (never block the
    event loop while another owner computes); for ``COMPUTE`` await ``fn`` with ``bound``'s
    arguments. What either raises (``CancelledError`` in the sleep too) is thrown into
    ``gen``, as ``drive_sync`` does. (A coroutine turns ``fn``'s StopIteration into
    RuntimeError itself: nothing to undo.)"""
    import asyncio  # here: asyncio alone costs 30 ms of `import memolab`

    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = gen.send(answer) if error is None else gen.throw(error)
        except StopIteration as stop:
            return stop.value
        error = None
        try:
            if request.__class__ is Pause:
                await asyncio.sleep(request.seconds)
                answer = None
            else:
                answer = await fn(*bound.args, **bound.kwargs)
        except BaseException as e:  # the user's body: handed to the lifecycle, which raises it
            error = e
