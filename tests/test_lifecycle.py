"""One call lifecycle (memolab/calls/lifecycle.py), under both of its drivers.

Every test runs a sync memoized function (``drive_sync``: sleeps and calls) and an
async one (``drive_async``: awaits ``asyncio.sleep`` and the coroutine): hit, miss,
lease-free miss, waiting for another owner then hitting what it stored, taking a
dead owner's key over, and a lease given back on every way out (an exception, a
``KeyboardInterrupt``, a cancellation, during the computation or during the wait).
The last tests pin the lease leak of issue 23 on a real team store: a call
interrupted while the team says "wait" used to keep its local lease, and the key
blocked every later call of it in that process.

No timing is asserted: a call is known to wait when the store answered it "wait"
(a spy on ``try_acquire``), and the other owner acts only then.
"""
from __future__ import annotations

import _thread
import asyncio
import signal
import threading
import time
import warnings

import pytest

import memolab
from conftest import Calls
from memolab import memo
from memolab.calls.lifecycle import COMPUTE, Pause, claim, lifecycle
from memolab.errors import MemolabWarning
from memolab.settings import config

DRIVERS = ["sync", "async"]
#: generous bound for a thread a test waits on: a hang fails the test instead of the run
JOIN = 120


def _gate_closed(gate, deadline: float) -> bool:
    """The computation's poll: a gate never opened within JOIN fails the test instead of hanging
    the run (a Ctrl-C that never arrived: a SIGINT handler that swallows it, see conftest)."""
    if gate is None or gate:
        return False
    if time.monotonic() > deadline:
        raise AssertionError(f"the gate was not opened within {JOIN} s: the interrupt meant to end this "
                             f"computation never arrived (SIGINT's handler: {signal.getsignal(signal.SIGINT)!r})")
    return True


def memoized(kind: str, calls: Calls, gate=None):
    """f(x) = x * 10, memoized, sync or async; appends x to ``calls`` when it computes.
    ``gate``: a ``Calls`` the computation polls until something is put in it (a poll, not a
    lock's wait: Ctrl-C reaches Python code between two sleeps), for JOIN seconds at most."""
    if kind == "sync":
        @memo
        def f(x):
            calls.append(x)
            deadline = time.monotonic() + JOIN
            while _gate_closed(gate, deadline):
                time.sleep(0.01)
            if x < 0:
                raise ValueError("negative")
            return x * 10
    else:
        @memo
        async def f(x):
            calls.append(x)
            deadline = time.monotonic() + JOIN
            while _gate_closed(gate, deadline):
                await asyncio.sleep(0.01)
            if x < 0:
                raise ValueError("negative")
            return x * 10
    return f


def call(kind: str, f, *args):
    return f(*args) if kind == "sync" else asyncio.run(f(*args))


def leases(store) -> list:
    return store.index.conn().execute("SELECT owner FROM leases").fetchall()


def rows(store, key) -> int:
    return store.index.conn().execute("SELECT COUNT(*) FROM evaluations WHERE fn=? AND code=? AND args=? "
                                      "AND status='done'", key[:3]).fetchone()[0]


class Spy:
    """Wraps ``store.try_acquire``: ``waiting`` is set once the store answered "wait"."""

    def __init__(self, store, monkeypatch) -> None:
        self.waiting = threading.Event()
        self.answers: list = []
        orig = store.try_acquire

        def spy(*a, **k):
            state = orig(*a, **k)
            self.answers.append(state[0])
            if state[0] == "wait":
                self.waiting.set()
            return state

        monkeypatch.setattr(store, "try_acquire", spy)


def hold(store, key, owner: str = "other-box:1:1:holder:1") -> str:
    """Another owner (another machine: its process cannot be asked) takes the key's lease."""
    assert store.index.claim(key, owner, config.settings().lease_ttl) == ("owner", None)
    return owner


def store_as(store, key, owner: str, value) -> None:
    store.save(key, owner, value, {"started": 0.0, "finished": 0.0, "duration": 0.0, "snapshot": "{}"}, {})


@pytest.fixture(params=DRIVERS)
def kind(request, tmp_store):
    return request.param


# -- the generator itself ---------------------------------------------------------------------

def test_the_lifecycle_yields_its_waits_and_its_computation(tmp_store):
    """Sans-IO: a miss behind another owner yields Pause (growing, bounded), then COMPUTE once the
    owner is gone; nothing sleeps or calls inside it."""
    calls = Calls()
    f = memoized("sync", calls)
    store, key = f.store(), f.key(1)
    owner = hold(store, key)
    call_, _ = f._prepare((1,), {}, False)
    gen = lifecycle(call_, store.owner_id)
    pauses = [gen.send(None), next(gen), next(gen)]
    assert all(type(p) is Pause for p in pauses) and pauses[0].seconds < pauses[1].seconds < pauses[2].seconds
    store.release(key, owner)
    assert next(gen) is COMPUTE and calls == []
    with pytest.raises(StopIteration) as stop:
        gen.send(10)
    assert stop.value.value == 10 and leases(store) == [] and f(1) == 10 and calls == []


def test_the_back_off_is_bounded(tmp_store):
    class Busy:
        def try_acquire(self, *a):
            return "wait", None

    gen = claim(Busy(), ("f", "c", "a", 1), "me")
    pauses = [next(gen).seconds for _ in range(40)]
    assert pauses[0] == 0.01 and max(pauses) == pauses[-1] == 0.25


def test_store_acquire_waits_through_the_same_loop(tmp_store):
    """``Store.acquire`` (blocking) is ``claim`` driven by ``drive_sync``: it waits for the holder."""
    calls = Calls()
    f = memoized("sync", calls)
    store, key = f.store(), f.key(2)
    owner = hold(store, key)
    spy = Spy(store, pytest.MonkeyPatch())
    t = threading.Thread(target=lambda: (spy.waiting.wait(JOIN), store_as(store, key, owner, 20)))
    t.start()
    state, row = store.acquire(key, "reader")
    t.join(JOIN)
    assert state == "hit" and store.load(key, row) == 20 and "wait" in spy.answers


def test_drive_sync_keeps_a_stop_iteration_of_the_function(tmp_store):
    """A generator turns a StopIteration passing through it into RuntimeError (PEP 479): the
    sync driver raises the function's own, as a plain call of it would."""
    @memo
    def f(x):
        raise StopIteration(x)

    with pytest.raises(StopIteration):
        f(1)
    assert leases(f.store()) == []


# -- every lifecycle under both drivers ---------------------------------------------------------

def test_miss_then_hit_from_memory_and_from_the_store(kind):
    calls = Calls()
    f = memoized(kind, calls)
    assert call(kind, f, 1) == 10 and calls == [1]
    assert call(kind, f, 1) == 10  # this process's copy
    f.store().forget()
    assert call(kind, f, 1) == 10 and calls == [1]  # read from the store, through the lifecycle
    assert leases(f.store()) == [] and rows(f.store(), f.key(1)) == 1


def test_a_hit_makes_no_owner_id(kind, monkeypatch):
    """An owner id reads /proc: only a call that claims the key makes one (the async path made one
    before its lookup)."""
    calls = Calls()
    f = memoized(kind, calls)
    call(kind, f, 1)
    store = f.store()
    store.forget()

    def no_owner():
        raise AssertionError("a hit made an owner id")

    monkeypatch.setattr(store, "owner_id", no_owner)
    assert call(kind, f, 1) == 10 and calls == [1]


def test_a_quick_function_misses_without_a_lease(kind):
    memolab.configure(lease_free_below=5.0)  # the rule, not the 1 ms default a loaded machine can exceed
    calls = Calls()
    f = memoized(kind, calls)
    store = f.store()
    call(kind, f, 1)  # the first miss of this code takes a lease: nothing is known of it yet
    statements: list = []
    store.index.conn().set_trace_callback(statements.append)
    try:
        assert call(kind, f, 2) == 20
    finally:
        store.index.conn().set_trace_callback(None)
    assert not any("INTO leases" in s for s in statements) and calls == [1, 2]
    assert rows(store, f.key(2)) == 1


def test_fresh_recomputes_and_overwrites(kind):
    calls = Calls()
    f = memoized(kind, calls)
    call(kind, f, 3)
    fresh = f.fresh(3)
    assert (fresh if kind == "sync" else asyncio.run(fresh)) == 30 and calls == [3, 3]
    assert leases(f.store()) == []


def test_waits_for_another_owner_then_hits_what_it_stored(kind, monkeypatch):
    """The wait branch, in both drivers: the call is answered "wait" until the holder stores."""
    calls = Calls()
    f = memoized(kind, calls)
    store, key = f.store(), f.key(4)
    owner = hold(store, key)
    spy = Spy(store, monkeypatch)
    t = threading.Thread(target=lambda: (spy.waiting.wait(JOIN), store_as(store, key, owner, 41)))
    t.start()
    assert call(kind, f, 4) == 41  # the holder's value: not computed here
    t.join(JOIN)
    assert calls == [] and "wait" in spy.answers and spy.answers[-1] == "hit" and leases(store) == []


def test_a_dead_owners_key_is_taken_over_after_its_lease_goes_stale(kind, monkeypatch):
    calls = Calls()
    f = memoized(kind, calls)
    store, key = f.store(), f.key(5)
    old = config.settings()
    memolab.configure(lease_ttl=0.5, heartbeat=0.1)
    try:
        hold(store, key)  # never heart-beaten: its holder is gone
        spy = Spy(store, monkeypatch)
        assert call(kind, f, 5) == 50
    finally:
        memolab.configure(lease_ttl=old.lease_ttl, heartbeat=old.heartbeat)
    assert calls == [5] and "wait" in spy.answers and spy.answers[-1] == "owner"
    assert leases(store) == [] and rows(store, key) == 1


def test_an_exception_in_the_function_gives_the_lease_back(kind):
    calls = Calls()
    f = memoized(kind, calls)
    with pytest.raises(ValueError, match="negative"):
        call(kind, f, -1)
    assert leases(f.store()) == [] and rows(f.store(), f.key(-1)) == 0
    with pytest.raises(ValueError):
        call(kind, f, -1)
    assert calls == [-1, -1]  # nothing stored: computed again


def test_an_interrupted_computation_gives_the_lease_back(kind):
    """KeyboardInterrupt (sync) or a cancelled task (async) while the function computes."""
    calls = Calls()
    gate = Calls()
    f = memoized(kind, calls, gate)
    store = f.store()
    if kind == "sync":
        _sigint_raises()
        threading.Thread(target=lambda: _wait_for(calls) and _thread.interrupt_main(), daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            f(6)
    else:
        async def main():
            task = asyncio.ensure_future(f(6))
            deadline = time.monotonic() + JOIN
            while not calls:
                assert time.monotonic() < deadline, "the computation never started"
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        asyncio.run(main())
    assert calls == [6] and leases(store) == [] and rows(store, f.key(6)) == 0
    gate.append(True)
    assert call(kind, f, 6) == 60  # nothing blocks the key


def test_an_interrupted_wait_leaves_the_holders_lease_alone(kind, monkeypatch):
    """KeyboardInterrupt (sync) or a cancelled task (async) while another owner computes: this call
    goes, the holder keeps its lease and stores; nothing of this call is left behind."""
    calls = Calls()
    f = memoized(kind, calls)
    store, key = f.store(), f.key(7)
    owner = hold(store, key)
    spy = Spy(store, monkeypatch)
    _interrupt_the_wait(kind, f, 7, spy)
    assert leases(store) == [(owner,)] and calls == []
    store_as(store, key, owner, 71)
    assert call(kind, f, 7) == 71 and calls == []


def test_store_trouble_computes_without_storing(kind, monkeypatch):
    import sqlite3

    calls = Calls()
    f = memoized(kind, calls)
    store = f.store()

    def broken(key):  # (the text names the driver: the warning comes once per problem and process)
        raise sqlite3.OperationalError(f"disk I/O error ({kind})")

    monkeypatch.setattr(store, "lookup", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert call(kind, f, 8) == 80
    assert calls == [8] and any(issubclass(w.category, MemolabWarning) for w in caught)
    monkeypatch.undo()
    assert rows(store, f.key(8)) == 0 and leases(store) == []


def test_a_damaged_row_costs_one_recomputation(kind):
    calls = Calls()
    f = memoized(kind, calls)
    store, key = f.store(), f.key(9)
    call(kind, f, 9)
    with store.index.write() as c:
        c.execute("UPDATE evaluations SET buffers='not json' WHERE fn=? AND code=? AND args=?", key[:3])
    store.forget()
    with pytest.warns(MemolabWarning, match="cannot be used"):
        assert call(kind, f, 9) == 90
    assert calls == [9, 9]
    store.forget()
    assert call(kind, f, 9) == 90 and calls == [9, 9] and leases(store) == []


# -- the lease leak of issue 23, on a team store -------------------------------------------------

@pytest.fixture
def team_store(tmp_path, team, monkeypatch):
    """This process's store in front of the team store of ``team`` (SQLite+file, PostgreSQL+S3)."""
    for k, v in team.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MEMOLAB_HMAC_KEY", "lifecycle-team")  # a team store wants signed rows (and warns without)
    old = config.settings()
    memolab.configure(store=str(tmp_path / "local"), remote=team.env["MEMOLAB_REMOTE"],
                      remote_blobs=team.env["MEMOLAB_REMOTE_BLOBS"], lease_ttl=30.0, heartbeat=0.2)
    yield
    memolab.configure(store=old.store, remote=old.remote, remote_blobs=old.remote_blobs, lease_ttl=old.lease_ttl,
                      heartbeat=old.heartbeat)


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_call_interrupted_while_the_team_says_wait_keeps_no_local_lease(kind, team_store, monkeypatch):
    """Another machine holds the team lease; this call holds the local one and polls. Interrupted
    there (a cancelled task, Ctrl-C), it gives the local lease back; once the other machine is
    done, a later call of the key in this process computes instead of blocking on a lease that
    this process went on heart-beating (the leak)."""
    calls = Calls()
    f = memoized(kind, calls)
    store, key = f.store(), f.key(11)
    assert type(store).__name__ == "TeamStore"
    other = "other-box:1:1:machine:1"
    assert store.link.index.claim(key, other, 30.0) == ("owner", None)
    spy = Spy(store, monkeypatch)
    _interrupt_the_wait(kind, f, 11, spy)
    assert leases(store) == [], "the interrupted call kept its local lease"
    store.link.index.release(key, other)  # the other machine gave up
    later = Calls()
    result: list = []
    g = memoized("sync", calls)  # the same key, another caller in this process (another thread)
    t = threading.Thread(target=lambda: result.append(g(11)), daemon=True)
    t.start()
    t.join(JOIN)
    assert result == [110], "a later call of the key blocked on the interrupted call's lease"
    assert calls == [11] and later == [] and leases(store) == []


def test_store_acquire_interrupted_while_the_team_says_wait_keeps_no_local_lease(team_store, monkeypatch):
    """The blocking ``Store.acquire`` (an API of its own, beside memoized calls) gives back the
    local lease a team store holds while the team says "wait" when Ctrl-C cuts the wait short."""
    f = memoized("sync", Calls())
    store, key = f.store(), f.key(12)
    other = "other-box:1:1:machine:1"
    assert store.link.index.claim(key, other, 30.0) == ("owner", None)
    spy = Spy(store, monkeypatch)
    _sigint_raises()
    threading.Thread(target=lambda: spy.waiting.wait(JOIN) and _thread.interrupt_main(), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        store.acquire(key, store.owner_id())
    assert "wait" in spy.answers
    assert leases(store) == [], "the interrupted acquire kept its local lease"
    store.link.index.release(key, other)


def _wait_for(calls: Calls) -> bool:
    """Whether ``calls`` got something within JOIN s. The helper threads interrupt only then: an
    interrupt sent after the test gave up would land in whatever test runs next."""
    deadline = time.monotonic() + JOIN
    while not calls:
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.01)
    return True


def _sigint_raises() -> None:
    """``_thread.interrupt_main()`` raises ``KeyboardInterrupt`` only under Python's own SIGINT handler."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, \
        f"SIGINT's handler is {signal.getsignal(signal.SIGINT)!r}: Ctrl-C would not raise (left by an earlier test?)"


def _interrupt_the_wait(kind: str, f, x, spy: Spy) -> None:
    """Call ``f(x)``, which waits for another owner, and interrupt it there: Ctrl-C in the main
    thread (sync), a cancelled task (async)."""
    if kind == "sync":
        _sigint_raises()
        threading.Thread(target=lambda: spy.waiting.wait(JOIN) and _thread.interrupt_main(), daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            f(x)
    else:
        async def main():
            task = asyncio.ensure_future(f(x))
            deadline = time.monotonic() + JOIN
            while not spy.waiting.is_set():
                assert time.monotonic() < deadline, "the call never waited for the other owner"
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        asyncio.run(main())
    assert "wait" in spy.answers


# -- the loop's own bound (issue 56): a step that breaks its bound raises, never spins ---------------

class _Endless:
    """Steps whose store always finds a row that never loads and always says "look again"."""

    def __init__(self):
        self.store = self
        self.key = ("m:f", "c", "a", "s")
        self.force, self.expiry = False, None
        self.loads = self.lookups = 0
        self.released = []

    def lookup(self, key):
        self.lookups += 1
        return {"id": 1}

    def accepted(self, row):
        return row

    def reroute(self, row):
        return None

    def expired(self, row):
        return None

    def load(self, row):
        self.loads += 1
        return False, None

    def again(self):
        return True  # broken: the real ``Call.again`` stops after LOADS_PER_CALL

    def release(self, owner):
        self.released.append(owner)


def test_the_lifecycle_loop_is_bounded_by_itself():
    from memolab.calls.lifecycle import ROUNDS, State, drive_sync

    steps = _Endless()
    with pytest.raises(RuntimeError, match=f"m:f went round its lifecycle {ROUNDS} times"):
        drive_sync(lifecycle(steps, lambda: "owner-1"), lambda: 1, None)
    assert steps.loads == steps.lookups == ROUNDS and steps.released == []
    # the states are the store's own words: ``try_acquire`` answers 'hit', 'owner', 'wait'
    assert [s.value for s in State] == ["hit", "free", "owner", "wait", "unstored"]
    assert State.HIT == "hit" and State("wait") is State.WAIT
