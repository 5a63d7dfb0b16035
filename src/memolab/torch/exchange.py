"""How the ranks of a process group talk about memoized calls: the job's key-value store.

Every driver of ``memolab.torch`` (the collective call, the main-first call, a computation
in which Lightning's launcher starts the group) talks through the job's rendezvous store
(``MASTER_ADDR``/``MASTER_PORT``, a ``TCPStore`` client; else the default group's store)
under a ``memolab/`` prefix, never through a torch collective, and polls it with bounded
waits: a rank that never arrives costs a warning, not a hang (docs/distributed.md,
"Bounded waits: the exchange"). Here: the exchange, the beat that tells waiting ranks the
decider is alive, and the steps the drivers share (digests, a rank-local computation,
sending a value to the ranks whose store lacks it).
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from .. import errors, hashing
from ..calls.call import UNSTORED
from ..calls.lifecycle import STORE_TROUBLE, drive_sync, lifecycle
from ..distributed import rank_local, settings as distributed_settings
from ..errors import swallowed
from ..settings import config
from ..tracking import runs

__all__ = ["Exchange", "exchange", "connect", "Beat", "beat_of", "warn_once", "key_digest", "result_digest", "compute_local",
           "serve", "load_copy", "receive", "GatedSteps"]

#: stored rows of the key a follower may find unusable before it asks for the value
_LOADS = 4


class Exchange:
    """This process's view of the group's key-value store: bounded polls, a per-call sequence."""

    def __init__(self, store: Any, rank: int, world: int) -> None:
        self.store = store
        self.rank = rank
        self.world = world
        self.seq = 0
        self.beat: Beat | None = None
        #: names each call set beyond the collective call's own (a main-first call's), deleted with it
        self.extra: dict[int, list[str]] = {}
        #: computations during which this group came to exist (``launched``), numbered
        self.launches = 0

    def next_call(self) -> int:
        self.seq += 1
        return self.seq

    def arrival_timeout(self) -> float:
        # the program's own configure() outranks the environment, which outranks the default
        t = distributed_settings()["timeout"]
        if t is None:
            t = config.env_setting("MEMOLAB_DIST_TIMEOUT")
        return float(t) if t is not None else 30 * config.settings().lease_ttl

    def set(self, key: str, value: str | bytes) -> None:
        self.store.set(key, value)

    def get(self, key: str) -> bytes:
        return self.store.get(key)

    def wait(self, keys: list[str], timeout: float, alive: str | None = None) -> bool:
        """Wait until every key is set: False after ``timeout`` seconds, or, once ``alive``
        (a counter the decider bumps) has moved, after 3 lease TTLs without it moving. The
        store's own blocking wait, in slices of at most 0.25 s: answered the moment a key is
        set, whatever the store's timeout."""
        start, beat = time.monotonic(), None
        silence = 3 * config.settings().lease_ttl
        limit = timeout
        while True:
            now = time.monotonic()
            if alive is not None:
                b = self.store.add(alive, 0)
                if b != beat:
                    if beat is not None or b:
                        limit = silence
                    beat, start = b, now
            left = limit - (now - start)
            if left <= 0:
                return self.store.check(keys)
            piece = min(0.25, left)
            try:
                self.store.wait(keys, timedelta(seconds=piece))
                return True
            except Exception:  # that slice timed out (DistStoreError), or the store is unreachable:
                swallowed("a slice of a wait on torch's store")  # (torch's store raises errors of many kinds)
                if time.monotonic() - now < piece / 2:  # then never spin on it
                    time.sleep(piece)

    def forget(self, seq: int) -> None:
        """Delete an old call's keys (every rank has moved past it)."""
        names = ["d", "alive", "v", "ckd"] + [f"{x}/{r}" for r in range(self.world) for x in ("k", "res", "ack", "ck")]
        for n in names + self.extra.pop(seq, []):
            try:
                self.store.delete_key(f"{seq}/{n}")
            except Exception:  # torch's store: errors of many kinds
                swallowed("torch.exchange: Exchange.forget")


_exchanges: dict[tuple[int, int, int, int], Exchange | None] = {}
#: ``errors.warn_once`` for the ranks' exchanges (the default stacklevel: the user's call)
warn_once = functools.partial(errors.warn_once, scope="torch.exchange")


def exchange() -> Exchange | None:
    """The exchange of the current default group (made on its first collective call), or None
    when no key-value store can be reached."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k = (os.getpid(), id(dist.group.WORLD), rank, world)
    if k not in _exchanges:
        _exchanges[k] = connect(rank, world)
    return _exchanges[k]


def connect(rank: int, world: int) -> Exchange | None:
    base: Any = None
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        try:
            base = dist.TCPStore(addr, int(port), is_master=False, wait_for_workers=False,  # type: ignore[attr-defined]  # re-exported by torch.distributed from its C module
                                 timeout=timedelta(seconds=3 * config.settings().lease_ttl))
        except Exception:  # torch's TCPStore: errors of many kinds (DistStoreError, RuntimeError, ValueError)
            swallowed("torch.exchange: connect")
            base = None
    if base is None:
        try:
            base = dist.distributed_c10d._get_default_store()  # init_method tcp:// or file://
        except Exception:  # torch's private default store: errors of many kinds, or none in this torch
            swallowed("torch.exchange: connect")
            base = None
    if base is None:
        warn_once("store", "memolab: no key-value store of the process group can be reached (MASTER_ADDR/"
                  "MASTER_PORT): memoized calls are each rank's own, and a DDP body memoized this way can hang")
        return None
    # a group initialised again in the same job (or a restarted worker group) starts afresh
    gen = base.add(f"memolab/gen/{rank}", 1)
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return Exchange(dist.PrefixStore(f"memolab/{run}/{restart}/{gen}", base), rank, world)  # type: ignore[attr-defined]  # re-exported by torch.distributed from its C module


class Beat:
    """A rank bumps a counter while it decides or computes for others: they wait as long as it
    is alive. One thread per process, started on the first call that needs it, beating
    whichever call decides; ``watch`` (optional) is called on every beat too (a main-first
    body's collective detector)."""

    def __init__(self, ex: Exchange) -> None:
        self.key: str | None = None
        self.watch: Callable[[], None] | None = None
        interval = min(1.0, config.settings().lease_ttl / 10)

        def beat() -> None:
            while True:
                time.sleep(interval)
                key, watch = self.key, self.watch
                if watch is not None:
                    try:
                        watch()
                    except Exception:  # the heartbeat thread's loop: a watcher reading torch's state must never kill it
                        swallowed("torch.exchange: Beat.__init__.beat")
                if key is not None:
                    try:
                        ex.store.add(key, 1)
                    except Exception:  # the heartbeat thread's loop: torch's store, errors of many kinds
                        swallowed("torch.exchange: Beat.__init__.beat")
                        return

        threading.Thread(target=beat, name="memolab-distributed-beat", daemon=True).start()

    def start(self, key: str, watch: Callable[[], None] | None = None) -> Beat:
        self.key, self.watch = key, watch
        return self

    def stop(self) -> None:
        self.key = self.watch = None


def beat_of(ex: Exchange) -> Beat:
    if ex.beat is None:
        ex.beat = Beat(ex)
    return ex.beat


def key_digest(key: Any) -> str:
    return hashlib.sha256(repr(tuple(key)).encode()).hexdigest()[:32]


def result_digest(value: Any) -> str:
    try:
        return hashing.hash_arguments([("result", value)])[0]
    except Exception as e:  # hashing runs the value's own code: cannot be compared, stored only if every rank says the same
        swallowed("torch.exchange: result_digest")
        return f"unhashable: {type(e).__name__}"


def compute_local(call: Any, fn: Callable[..., Any]) -> Any:
    """The single-process call, on this rank alone (lookup, lease, compute, store)."""
    with rank_local():  # and what its body calls: the group is not in step
        return drive_sync(lifecycle(call, call.store.owner_id), fn, call.bound)


def serve(ex: Exchange, seq: int, value: Any, ranks: Iterable[int], name: str = "v") -> None:
    """The value is this rank's (a hit, or computed for others): wait for ``ranks`` to load it
    from their own store (bounded), and send the bytes to those whose store lacks it."""
    acks = [f"{seq}/ack/{r}" for r in ranks]
    if acks and ex.wait(acks, ex.arrival_timeout()):
        if any(ex.get(a) == b"need" for a in acks):
            try:
                ex.set(f"{seq}/{name}", b"P" + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as e:  # pickling runs the value's own code: told to the other ranks
                ex.set(f"{seq}/{name}", f"E{type(e).__name__}: {e}".encode())


def receive(ex: Exchange, seq: int, call: Any, name: str = "v", sender: int = 0) -> tuple[bool, Any]:
    """This rank's copy of a value another rank has: from its own store, else the bytes the
    sender posts. (False, why) when neither comes."""
    found, value = load_copy(call)
    ex.set(f"{seq}/ack/{ex.rank}", "ok" if found else "need")
    if found:
        return True, value
    if not ex.wait([f"{seq}/{name}"], ex.arrival_timeout()):
        return False, f"rank {sender} sent no value"
    data = ex.get(f"{seq}/{name}")
    if data[:1] != b"P":
        return False, f"rank {sender} could not send it ({data[1:].decode(errors='replace')})"
    return True, pickle.loads(data[1:])


def load_copy(call: Any) -> tuple[bool, Any]:
    """This rank's copy of a hit: from memory, else from its store (False: not there)."""
    store = call.store
    try:
        found, value = call.from_memory()
        if found:
            return True, value
        for _ in range(_LOADS):
            row = call.accepted(store.lookup(call.key))  # (or one of code the user accepted as this)
            if row is None:
                return False, None
            where = call.reroute(row)  # made from other global generator states: where ours are
            if where is not None:
                if where == UNSTORED:
                    return False, None
                continue
            found, value = call.load(row)
            if found:
                return True, value
    except STORE_TROUBLE:
        pass
    return False, None


class GatedSteps:
    """A call's own steps, except that a result the ranks disagree on (``agreed`` set False
    after the body) is returned but not stored."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.store, self.key, self.force = call.store, call.key, call.force
        self.agreed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.call, name)

    def done(self, owner: str, value: Any, t0: float, run: Any, ev: Any) -> None:
        if self.agreed:
            self.call.done(owner, value, t0, run, ev)
            return
        self.call.release(owner)
        runs.end(run, "done", None)
