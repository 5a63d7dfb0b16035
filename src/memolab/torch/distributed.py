"""The distributed driver: the ranks of a ``torch.distributed`` group agree on hit or miss.

A collective memoized call (docs/distributed.md) runs the same lifecycle as any
call, on rank 0 only; the other ranks follow its decision:

1. every rank keys the call; ranks 1.. post their key's digest under the call's
   sequence number, rank 0 waits for them (bounded) and compares: unequal keys
   raise ``DistributedError`` on every rank;
2. rank 0 drives ``lifecycle.lifecycle`` (lookup, lease, wait for another owner)
   and posts the decision the moment it is known: ``miss`` when the lifecycle asks
   to compute, ``hit`` when it returns a loaded value;
3. miss: every rank runs the body (DDP needs all of them); each posts its result's
   digest, and rank 0 stores its result only if they are all equal; the others
   store nothing, open no run and save no checkpoint;
4. hit: every rank loads the result itself (a shared store); a rank whose store
   lacks it (node-local stores on several machines) gets rank 0's bytes through
   the exchange.

The exchange is the job's rendezvous key-value store (``MASTER_ADDR``/
``MASTER_PORT``, a ``TCPStore`` client; else the default group's store) under a
``memolab/`` prefix, polled with ``check`` so every wait is bounded whatever the
store's own timeout: ranks wait ``memolab.distributed.configure(timeout=)`` (30
lease TTLs, 300 s by default) for each other to arrive, and rank 0 beats while it
decides, so followers wait as long as it lives and give up after 3 TTLs of silence.
No torch collective is used: a rank that never arrives costs a warning, not a hang.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
import time
import warnings
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch.distributed as dist
from torch.utils.data import get_worker_info

from .. import config, hashing
from ..call import UNSTORED
from ..distributed import DistributedError, rank_local
from ..distributed import settings as distributed_settings
from ..errors import MemolabWarning
from ..lifecycle import STORE_TROUBLE, drive_sync, lifecycle
from ..tracking import runs

__all__ = ["active_driver", "drive", "register_hashing", "Exchange", "agree_on_checkpoint"]

#: stored rows of the key a follower may find unusable before it asks rank 0 for the value
_LOADS = 4


_AVAILABLE = dist.is_available()


def active_driver() -> Optional[Callable[[Any, Callable[..., Any]], Any]]:
    """``drive`` inside an initialised group of two or more ranks, else None (asked on every
    call of a process that imported torch: two cheap calls outside a group). A DataLoader
    worker forked from a rank inherits its group's state but is no rank: its calls are its own."""
    if not _AVAILABLE or not dist.is_initialized() or dist.get_world_size() <= 1:
        return None
    if get_worker_info() is not None:
        return None
    return drive


# -- the exchange ---------------------------------------------------------------------------------
class Exchange:
    """This process's view of the group's key-value store: bounded polls, a per-call sequence."""

    def __init__(self, store: Any, rank: int, world: int) -> None:
        self.store = store
        self.rank = rank
        self.world = world
        self.seq = 0
        self.beat: Optional[_Beat] = None

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

    def wait(self, keys: List[str], timeout: float, alive: Optional[str] = None) -> bool:
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
                if time.monotonic() - now < piece / 2:  # then never spin on it
                    time.sleep(piece)

    def forget(self, seq: int) -> None:
        """Delete an old call's keys (every rank has moved past it)."""
        names = ["d", "alive", "v", "ckd"] + [f"{x}/{r}" for r in range(self.world) for x in ("k", "res", "ack", "ck")]
        for n in names:
            try:
                self.store.delete_key(f"{seq}/{n}")
            except Exception:
                pass


_exchanges: Dict[Tuple[int, int, int, int], Optional[Exchange]] = {}
_warned: set = set()


def _warn_once(what: str, text: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(text, MemolabWarning, stacklevel=4)


def exchange() -> Optional[Exchange]:
    """The exchange of the current default group (made on its first collective call), or None
    when no key-value store can be reached."""
    rank, world = dist.get_rank(), dist.get_world_size()
    k = (os.getpid(), id(dist.group.WORLD), rank, world)
    if k not in _exchanges:
        _exchanges[k] = _connect(rank, world)
    return _exchanges[k]


def _connect(rank: int, world: int) -> Optional[Exchange]:
    base: Any = None
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        try:
            base = dist.TCPStore(addr, int(port), is_master=False, wait_for_workers=False,
                                 timeout=timedelta(seconds=3 * config.settings().lease_ttl))
        except Exception:
            base = None
    if base is None:
        try:
            base = dist.distributed_c10d._get_default_store()  # init_method tcp:// or file://
        except Exception:
            base = None
    if base is None:
        _warn_once("store", "memolab: no key-value store of the process group can be reached (MASTER_ADDR/"
                   "MASTER_PORT): memoized calls are each rank's own, and a DDP body memoized this way can hang")
        return None
    # a group initialised again in the same job (or a restarted worker group) starts afresh
    gen = base.add(f"memolab/gen/{rank}", 1)
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return Exchange(dist.PrefixStore(f"memolab/{run}/{restart}/{gen}", base), rank, world)


class _Beat:
    """Rank 0 bumps a counter while it decides: followers wait as long as it is alive. One
    thread per process, started on the first collective call, beating whichever call decides."""

    def __init__(self, ex: Exchange) -> None:
        self.key: Optional[str] = None
        interval = min(1.0, config.settings().lease_ttl / 10)

        def beat() -> None:
            while True:
                time.sleep(interval)
                key = self.key
                if key is not None:
                    try:
                        ex.store.add(key, 1)
                    except Exception:
                        return

        threading.Thread(target=beat, name="memolab-distributed-beat", daemon=True).start()

    def start(self, key: str) -> "_Beat":
        self.key = key
        return self

    def stop(self) -> None:
        self.key = None


def _key_digest(key: Any) -> str:
    return hashlib.sha256(repr(tuple(key)).encode()).hexdigest()[:32]


def _result_digest(value: Any) -> str:
    try:
        return hashing.hash_arguments([("result", value)])[0]
    except Exception as e:  # cannot be compared: stored only if every rank says the same
        return f"unhashable: {type(e).__name__}"


# -- the driver -----------------------------------------------------------------------------------
def drive(prepare: Callable[[], Any], fn: Callable[..., Any]) -> Any:
    """Run one collective call; ``prepare()`` keys it on this rank (a ``memolab.call.Call``).
    A rank that cannot key it tells the others at once, so nobody waits for it."""
    ex = exchange()
    if ex is None:
        return _local(prepare(), fn)
    seq = ex.next_call()
    try:
        call = prepare()
    except BaseException as e:
        why = f"{type(e).__name__}: {e}"[:2000]
        if ex.rank == 0:
            ex.set(f"{seq}/d", json.dumps({"d": "error", "key": "", "symbol": "?", "error": why}))
        else:
            ex.set(f"{seq}/k/{ex.rank}", "!" + why)
        raise
    if ex.rank == 0:
        return _lead(ex, seq, call, fn)
    return _follow(ex, seq, call, fn)


def _decision(ex: Exchange, seq: int, what: str, call: Any, **more: Any) -> None:
    # the key every rank made (a row rank 0 found may route its lookup elsewhere: ``Call.reroute``)
    ex.set(f"{seq}/d", json.dumps({"d": what, "key": _key_digest(call.key0), "symbol": call.key[0], **more}))


def _local(call: Any, fn: Callable[..., Any]) -> Any:
    with rank_local():  # and what its body calls: the group is not in step
        return drive_sync(lifecycle(call, call.store.owner_id), fn, call.bound)


class _LeadSteps:
    """Rank 0's steps: the call's own, except that a result the ranks disagree on is not stored."""

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


def _lead(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any]) -> Any:
    mine = _key_digest(call.key)
    if ex.beat is None:
        ex.beat = _Beat(ex)
    beat = ex.beat.start(f"{seq}/alive")
    decided = False
    try:
        others = [f"{seq}/k/{r}" for r in range(1, ex.world)]
        if not ex.wait(others, ex.arrival_timeout()):
            missing = [r for r in range(1, ex.world) if not ex.store.check([f"{seq}/k/{r}"])]
            _decision(ex, seq, "solo", call)
            decided = True
            beat.stop()
            _warn_once(f"solo {call.key[0]}", f"{call.key[0]}: rank(s) {missing} did not make this collective "
                       f"memoized call within {ex.arrival_timeout():.0f} s; rank 0 computes it alone. A call made "
                       "by one rank only needs @memo(collective=False) or memolab.distributed.rank_local()")
            return _local(call, fn)
        if seq > 2:
            ex.forget(seq - 2)  # every rank has reached this call: the one before last is read by all
        keys = {r: ex.get(f"{seq}/k/{r}").decode() for r in range(1, ex.world)}
        failed = {r: d[1:] for r, d in keys.items() if d.startswith("!")}
        if failed:
            text = f"{call.key[0]}: rank(s) {sorted(failed)} could not key this collective call: " + "; ".join(
                f"rank {r}: {why}" for r, why in sorted(failed.items()))
            _decision(ex, seq, "mismatch", call, error=text)
            decided = True
            raise DistributedError(text)
        unequal = {r: d for r, d in keys.items() if d != mine}
        if unequal:
            text = (f"{call.key[0]}: a collective memoized call keyed differently on rank(s) {sorted(unequal)} than "
                    "on rank 0 (other arguments, other code, or another call at the same place in their sequence "
                    "of memoized calls). A call whose arguments depend on the rank is each rank's own: mark it "
                    "@memo(collective=False) or call it inside memolab.distributed.rank_local()")
            _decision(ex, seq, "mismatch", call, error=text)
            decided = True
            raise DistributedError(text)
        if not call.force:
            found, value = call.from_memory()
            if found:
                _decision(ex, seq, "hit", call)
                decided = True
                beat.stop()
                return _serve(ex, seq, value)
        steps = _LeadSteps(call)

        def compute(*args: Any, **kwargs: Any) -> Any:
            nonlocal decided
            _decision(ex, seq, "miss", call)
            decided = True
            beat.stop()
            try:
                value = fn(*args, **kwargs)
            except BaseException:
                ex.set(f"{seq}/res/0", "raised")
                raise
            steps.agreed = _agree(ex, seq, call, value)
            return value

        value = drive_sync(lifecycle(steps, call.store.owner_id), compute, call.bound)
        if decided:
            return value
        _decision(ex, seq, "hit", call)
        decided = True
        beat.stop()
        return _serve(ex, seq, value)
    except BaseException as e:
        if not decided:
            _decision(ex, seq, "error", call, error=f"{type(e).__name__}: {e}")
        raise
    finally:
        beat.stop()


def _agree(ex: Exchange, seq: int, call: Any, value: Any) -> bool:
    """Do all ranks' results have rank 0's digest? Only then is it stored."""
    mine = _result_digest(value)
    ex.set(f"{seq}/res/0", mine)
    others = [f"{seq}/res/{r}" for r in range(1, ex.world)]
    if not ex.wait(others, ex.arrival_timeout()):
        _warn_once(f"late {call.key[0]}", f"{call.key[0]}: other ranks did not finish this collective call within "
                   f"{ex.arrival_timeout():.0f} s of rank 0; the result is returned but not stored")
        return False
    theirs = {r: ex.get(f"{seq}/res/{r}").decode() for r in range(1, ex.world)}
    differ = sorted(r for r, d in theirs.items() if d != mine)
    if differ:
        _warn_once(f"differ {call.key[0]}", f"{call.key[0]}: the ranks' results differ (rank(s) {differ} vs rank 0; "
                   "or a rank raised): not stored, each rank keeps its own. A result that depends on the rank "
                   "cannot be shared by the group: make the call rank-local (@memo(collective=False)) with the rank "
                   "among its arguments, or return what the ranks agree on")
        return False
    return True


def _serve(ex: Exchange, seq: int, value: Any) -> Any:
    """A hit: wait for every rank to load it; send the bytes to those whose store lacks it."""
    acks = [f"{seq}/ack/{r}" for r in range(1, ex.world)]
    if ex.wait(acks, ex.arrival_timeout()):
        if any(ex.get(a) == b"need" for a in acks):
            try:
                ex.set(f"{seq}/v", b"P" + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as e:
                ex.set(f"{seq}/v", f"E{type(e).__name__}: {e}".encode())
    return value


def _follow(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any]) -> Any:
    mine = _key_digest(call.key)
    ex.set(f"{seq}/k/{ex.rank}", mine)
    if not ex.wait([f"{seq}/d"], ex.arrival_timeout(), alive=f"{seq}/alive"):
        _warn_once(f"alone {call.key[0]}", f"{call.key[0]}: rank 0 did not reach this collective memoized call; "
                   f"rank {ex.rank} computes it alone. A call made by some ranks only needs "
                   "@memo(collective=False) or memolab.distributed.rank_local()")
        return _local(call, fn)
    d = json.loads(ex.get(f"{seq}/d"))
    if d["d"] == "mismatch":
        raise DistributedError(d["error"])
    if d["d"] == "error" and not d["key"]:
        raise DistributedError(f"{call.key[0]}: rank 0 could not key this collective call ({d['error']})")
    if d["key"] != mine:
        raise DistributedError(
            f"{call.key[0]}: rank 0 made another collective memoized call ({d['symbol']}) at this place in the "
            "sequence of calls: the ranks' memoized calls are out of step. A call made by some ranks only needs "
            "@memo(collective=False) or memolab.distributed.rank_local()")
    if d["d"] == "error":
        raise DistributedError(f"{call.key[0]}: rank 0 failed before deciding hit or miss ({d['error']})")
    if d["d"] == "solo":
        return _local(call, fn)
    if d["d"] == "miss":
        return _compute(ex, seq, call, fn)
    found, value = _load(call)
    ex.set(f"{seq}/ack/{ex.rank}", "ok" if found else "need")
    if found:
        return value
    if not ex.wait([f"{seq}/v"], ex.arrival_timeout()):
        raise DistributedError(f"{call.key[0]}: a hit on rank 0 that this rank's store lacks, and rank 0 sent no value")
    data = ex.get(f"{seq}/v")
    if data[:1] != b"P":
        raise DistributedError(f"{call.key[0]}: a hit on rank 0 that this rank's store lacks, and rank 0 could not "
                               f"send it ({data[1:].decode(errors='replace')})")
    return pickle.loads(data[1:])


def _compute(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any]) -> Any:
    """A follower's miss: run the body (checkpoints restored, never saved here), store nothing."""
    ev, token = call.enter(None)
    ev.writes = False
    c0 = time.perf_counter()
    try:
        value = fn(*call.bound.args, **call.bound.kwargs)
    except BaseException:
        ex.set(f"{seq}/res/{ex.rank}", "raised")
        raise
    finally:
        call.leave(token, time.perf_counter() - c0)
    ex.set(f"{seq}/res/{ex.rank}", _result_digest(value))
    return value


def _load(call: Any) -> Tuple[bool, Any]:
    """This rank's copy of a hit: from memory, else from its store (False: not there)."""
    store = call.store
    try:
        found, value = call.from_memory()
        if found:
            return True, value
        for _ in range(_LOADS):
            row = store.lookup(call.key)
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


def agree_on_checkpoint(symbol: str, step: Optional[int]) -> None:
    """Inside a collective computation: every rank found the same checkpoint step (or none), or
    every rank raises ``DistributedError`` (node-local stores: one rank would resume, another
    start over, and DDP would hang or train on mismatched weights). Called by
    ``Checkpoint.restore`` once per computation, before any step: the call's sequence number
    names the exchange."""
    ex = exchange()
    if ex is None:
        return
    seq = ex.seq
    ex.set(f"{seq}/ck/{ex.rank}", "none" if step is None else str(step))
    if ex.rank == 0:
        others = [f"{seq}/ck/{r}" for r in range(1, ex.world)]
        if not ex.wait(others, ex.arrival_timeout()):
            ex.set(f"{seq}/ckd", "the other ranks did not restore within the timeout")
            raise DistributedError(f"{symbol}: the other ranks did not restore this call's checkpoint within "
                                   f"{ex.arrival_timeout():.0f} s")
        found = {r: ex.get(f"{seq}/ck/{r}").decode() for r in range(ex.world)}
        verdict = "" if len(set(found.values())) == 1 else (
            "ranks found different checkpoints of this call (" + ", ".join(f"rank {r}: step {v}" for r, v in
                                                                            found.items())
            + "); node-local stores? Use a store every rank reads, or start over with fresh()")
        ex.set(f"{seq}/ckd", verdict)
    else:
        if not ex.wait([f"{seq}/ckd"], ex.arrival_timeout()):
            raise DistributedError(f"{symbol}: rank 0 did not restore this call's checkpoint within "
                                   f"{ex.arrival_timeout():.0f} s")
        verdict = ex.get(f"{seq}/ckd").decode()
    if verdict:
        raise DistributedError(f"{symbol}: {verdict}")


# -- keys -----------------------------------------------------------------------------------------
def encode_ddp(enc: Any, m: Any) -> None:
    """A ``DistributedDataParallel`` module: what it wraps and how it syncs, not its process group."""
    if enc.memoize(m):
        return
    enc.write(b"\x10ddp")
    enc.write_type(type(m))
    pg = getattr(m, "process_group", None)
    try:
        size = pg.size() if pg is not None else dist.get_world_size()
    except Exception:
        size = -1
    enc.write_ints([size, int(bool(getattr(m, "broadcast_buffers", True))),
                    int(bool(getattr(m, "find_unused_parameters", False))),
                    int(bool(getattr(m, "gradient_as_bucket_view", False))),
                    int(bool(getattr(m, "static_graph", False)))])
    enc.encode_child(m.module, ".module")


def register_hashing() -> None:
    from torch.nn.parallel import DistributedDataParallel

    hashing.register_handler(DistributedDataParallel, encode_ddp)
