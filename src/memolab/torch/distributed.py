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

import json
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from torch.utils.data import get_worker_info

from .. import hashing
from ..calls.lifecycle import drive_sync, lifecycle
from ..distributed import DistributedError
from ..errors import swallowed
from . import launched, main_first
from .exchange import (
    Exchange,
    GatedSteps,
    beat_of,
    compute_local,
    exchange,
    key_digest,
    receive,
    result_digest,
    serve,
    warn_once,
)

__all__ = ["active_driver", "drive", "register_hashing", "Exchange", "agree_on_checkpoint"]

_AVAILABLE = dist.is_available()


def active_driver() -> Callable[..., Any] | None:
    """``drive`` inside an initialised group of two or more ranks; outside one, the driver of a
    process where a group may come to exist inside a memoized call (Lightning's launcher,
    ``launched.watch``), else None (asked on every call of a process that imported torch: a few
    cheap checks outside a group). A DataLoader worker forked from a rank inherits its group's
    state but is no rank: its calls are its own."""
    if not _AVAILABLE:
        return None
    if not dist.is_initialized():
        return launched.driver()
    if dist.get_world_size() <= 1 or get_worker_info() is not None:
        return None
    return drive


# -- the driver -----------------------------------------------------------------------------------
def drive(prepare: Callable[[bool], Any], fn: Callable[..., Any], mode: str = "collective") -> Any:
    """Run one collective call; ``prepare(True)`` keys it on this rank (a ``memolab.calls.call.Call``).
    A rank that cannot key it tells the others at once, so nobody waits for it. ``mode``:
    "collective" (every rank computes), or a main-first mode (``main_first.drive``)."""
    ex = exchange()
    if ex is None:
        return compute_local(prepare(True)[0], fn)
    seq = ex.next_call()
    try:
        call = prepare(True)[0]
    except BaseException as e:
        why = f"{type(e).__name__}: {e}"[:2000]
        if ex.rank == 0:
            ex.set(f"{seq}/d", json.dumps({"d": "error", "key": "", "symbol": "?", "error": why}))
        else:
            ex.set(f"{seq}/k/{ex.rank}", "!" + why)
        raise
    if mode != "collective":
        return main_first.drive(ex, seq, call, fn, mode)
    if ex.rank == 0:
        return _lead(ex, seq, call, fn)
    return _follow(ex, seq, call, fn)


drive.in_group = True  # type: ignore[attr-defined]


def _decision(ex: Exchange, seq: int, what: str, call: Any, **more: Any) -> None:
    ex.set(f"{seq}/d", json.dumps({"d": what, "key": key_digest(call.key0), "symbol": call.key[0], **more}))


def _lead(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any]) -> Any:
    mine = key_digest(call.key0)
    beat = beat_of(ex).start(f"{seq}/alive")
    decided = False
    try:
        others = [f"{seq}/k/{r}" for r in range(1, ex.world)]
        if not ex.wait(others, ex.arrival_timeout()):
            missing = [r for r in range(1, ex.world) if not ex.store.check([f"{seq}/k/{r}"])]
            _decision(ex, seq, "solo", call)
            decided = True
            beat.stop()
            warn_once(f"solo {call.key[0]}", f"{call.key[0]}: rank(s) {missing} did not make this collective "
                      f"memoized call within {ex.arrival_timeout():.0f} s; rank 0 computes it alone. A call made "
                      "by one rank only needs @memo(collective=False) or memolab.distributed.rank_local()")
            return compute_local(call, fn)
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
                serve(ex, seq, value, range(1, ex.world))
                return value
        steps = GatedSteps(call)

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
        serve(ex, seq, value, range(1, ex.world))
        return value
    except BaseException as e:
        if not decided:
            _decision(ex, seq, "error", call, error=f"{type(e).__name__}: {e}")
        raise
    finally:
        beat.stop()


def _agree(ex: Exchange, seq: int, call: Any, value: Any) -> bool:
    """Do all ranks' results have rank 0's digest? Only then is it stored."""
    mine = result_digest(value)
    ex.set(f"{seq}/res/0", mine)
    others = [f"{seq}/res/{r}" for r in range(1, ex.world)]
    if not ex.wait(others, ex.arrival_timeout()):
        warn_once(f"late {call.key[0]}", f"{call.key[0]}: other ranks did not finish this collective call within "
                  f"{ex.arrival_timeout():.0f} s of rank 0; the result is returned but not stored")
        return False
    theirs = {r: ex.get(f"{seq}/res/{r}").decode() for r in range(1, ex.world)}
    differ = sorted(r for r, d in theirs.items() if d != mine)
    if differ:
        warn_once(f"differ {call.key[0]}", f"{call.key[0]}: the ranks' results differ (rank(s) {differ} vs rank 0; "
                  "or a rank raised): not stored, each rank keeps its own. A result that depends on the rank "
                  "cannot be shared by the group: make the call rank-local (@memo(collective=False)) with the rank "
                  "among its arguments, or return what the ranks agree on")
        return False
    return True


def _follow(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any]) -> Any:
    mine = key_digest(call.key0)
    ex.set(f"{seq}/k/{ex.rank}", mine)
    if not ex.wait([f"{seq}/d"], ex.arrival_timeout(), alive=f"{seq}/alive"):
        warn_once(f"alone {call.key[0]}", f"{call.key[0]}: rank 0 did not reach this collective memoized call; "
                  f"rank {ex.rank} computes it alone. A call made by some ranks only needs "
                  "@memo(collective=False) or memolab.distributed.rank_local()")
        return compute_local(call, fn)
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
        return compute_local(call, fn)
    if d["d"] == "miss":
        return _compute(ex, seq, call, fn)
    found, value = receive(ex, seq, call)
    if not found:
        raise DistributedError(f"{call.key[0]}: a hit on rank 0 that this rank's store lacks, and {value}")
    return value


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
    ex.set(f"{seq}/res/{ex.rank}", result_digest(value))
    return value


def agree_on_checkpoint(symbol: str, step: int | None) -> None:
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
    except Exception:  # torch.distributed's process group: errors of many kinds
        swallowed("torch.distributed: encode_ddp")
        size = -1
    enc.write_ints([size, int(bool(getattr(m, "broadcast_buffers", True))),
                    int(bool(getattr(m, "find_unused_parameters", False))),
                    int(bool(getattr(m, "gradient_as_bucket_view", False))),
                    int(bool(getattr(m, "static_graph", False)))])
    enc.encode_child(m.module, ".module")


def register_hashing() -> None:
    from torch.nn.parallel import DistributedDataParallel

    hashing.register_handler(DistributedDataParallel, encode_ddp)
