"""Computed once per job: a collective call that one rank computes while the others wait.

``@memo(collective="main_first")`` (or a ``with memolab.distributed.main_first():`` block):
data preparation that every rank calls, computed by rank 0 alone on the first job, the
way Hugging Face users write ``with accelerator.main_process_first():``, and loaded by
every rank afterwards (docs/distributed.md, "Computed once per job"):

1. every rank keys the call and posts its key's digest (and, for ``"local_main_first"``,
   which store it uses); rank 0 compares them (unequal keys: ``DistributedError`` on every
   rank, as for any collective call) and names the *leaders*: rank 0 (``"main_first"``), or
   the first rank of each set of ranks sharing a store (``"local_main_first"``: one per node
   with node-local stores);
2. each leader runs the single-process call (lookup, lease, compute, store) and beats
   while it does; the others wait as long as their leader beats (3 lease TTLs of silence:
   they give up and compute it themselves), then load the result from their own store, or
   get the leader's bytes when their store lacks it;
3. a leader's body must run no collective: the other ranks are waiting here, not in it, so
   it could never complete. A leader whose body thread sits in ``torch.distributed`` for
   ``_STUCK`` seconds is taken to be in one: the others raise ``DistributedError`` at once,
   naming the call and where it entered, and the leader's result is never stored.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..distributed import DistributedError
from ..errors import swallowed
from ..inputs.threadframes import thread_frames
from .exchange import Exchange, beat_of, compute_local, key_digest, receive, serve, warn_once

__all__ = ["drive"]

#: seconds a leader's body thread may sit at one place inside ``torch.distributed`` before it is
#: taken to be inside a collective (a collective the waiting ranks are not in never completes)
_STUCK = 2.0

_TORCH_DIST = os.path.dirname(dist.__file__) + os.sep
_TORCH = os.path.dirname(os.path.dirname(dist.__file__)) + os.sep


def drive(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any], mode: str) -> Any:
    """One main-first call on this rank (the call keyed; ``mode``: "main_first" or "local_main_first")."""
    where = _store_of(call) if mode == "local_main_first" else ""
    if ex.rank == 0:
        return _lead(ex, seq, call, fn, mode, where)
    return _follow(ex, seq, call, fn, mode, where)


def _store_of(call: Any) -> str:
    """Which store this rank uses, as the ranks compare it: its host and its directory."""
    root = getattr(call.store, "root", "")
    return f"{socket.gethostname()}:{os.path.realpath(str(root)) if root else ''}"


def _decide(ex: Exchange, seq: int, what: str, call: Any, **more: Any) -> None:
    ex.set(f"{seq}/d", json.dumps({"d": what, "key": key_digest(call.key0), "symbol": call.key[0], **more}))


def _lead(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any], mode: str, where: str) -> Any:
    mine, symbol = key_digest(call.key0), call.key[0]
    beat = beat_of(ex).start(f"{seq}/alive/0")
    decided = False
    try:
        others = [f"{seq}/k/{r}" for r in range(1, ex.world)]
        if not ex.wait(others, ex.arrival_timeout()):
            missing = [r for r in range(1, ex.world) if not ex.store.check([f"{seq}/k/{r}"])]
            _decide(ex, seq, "solo", call)
            decided = True
            warn_once(f"solo {symbol}", f"{symbol}: rank(s) {missing} did not make this main-first memoized call "
                      f"within {ex.arrival_timeout():.0f} s; rank 0 computes it alone. A call made by one rank only "
                      "needs @memo(collective=False) or memolab.distributed.rank_local()")
            return _as_leader(ex, seq, call, fn, [], beat)
        if seq > 2:
            ex.forget(seq - 2)
        posted = {r: ex.get(f"{seq}/k/{r}").decode() for r in range(1, ex.world)}
        failed = {r: p[1:] for r, p in posted.items() if p.startswith("!")}
        if failed:
            text = f"{symbol}: rank(s) {sorted(failed)} could not key this main-first call: " + "; ".join(
                f"rank {r}: {why}" for r, why in sorted(failed.items()))
            _decide(ex, seq, "mismatch", call, error=text)
            decided = True
            raise DistributedError(text)
        keys = {r: p.partition("|")[0] for r, p in posted.items()}
        unequal = sorted(r for r, k in keys.items() if k != mine)
        if unequal:
            text = (f"{symbol}: a main-first memoized call keyed differently on rank(s) {unequal} than on rank 0 "
                    "(other arguments, other code, or another call at the same place in their sequence of "
                    "memoized calls). A call whose arguments depend on the rank is each rank's own: mark it "
                    "@memo(collective=False) or call it inside memolab.distributed.rank_local()")
            _decide(ex, seq, "mismatch", call, error=text)
            decided = True
            raise DistributedError(text)
        leaders = [0] * ex.world
        if mode == "local_main_first":
            first: dict[str, int] = {where: 0}
            for r in range(1, ex.world):
                leaders[r] = first.setdefault(posted[r].partition("|")[2], r)
        ex.extra[seq] = [f"{x}/{r}" for r in sorted(set(leaders)) for x in ("alive", "mf", "v")]
        _decide(ex, seq, "go", call, leaders=leaders)
        decided = True
        return _as_leader(ex, seq, call, fn, [r for r in range(1, ex.world) if leaders[r] == 0], beat)
    except BaseException as e:
        if not decided:
            _decide(ex, seq, "error", call, error=f"{type(e).__name__}: {e}")
        raise
    finally:
        beat.stop()


def _follow(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any], mode: str, where: str) -> Any:
    mine, symbol = key_digest(call.key0), call.key[0]
    ex.set(f"{seq}/k/{ex.rank}", f"{mine}|{where}")
    if not ex.wait([f"{seq}/d"], ex.arrival_timeout(), alive=f"{seq}/alive/0"):
        warn_once(f"alone {symbol}", f"{symbol}: rank 0 did not reach this main-first memoized call; rank "
                  f"{ex.rank} computes it alone. A call made by some ranks only needs @memo(collective=False) or "
                  "memolab.distributed.rank_local()")
        return compute_local(call, fn)
    d = json.loads(ex.get(f"{seq}/d"))
    if d["d"] == "mismatch":
        raise DistributedError(d["error"])
    if d["d"] == "error" and not d["key"]:
        raise DistributedError(f"{symbol}: rank 0 could not key this main-first call ({d['error']})")
    if d["key"] != mine:
        raise DistributedError(
            f"{symbol}: rank 0 made another collective memoized call ({d['symbol']}) at this place in the sequence "
            "of calls: the ranks' memoized calls are out of step. A call made by some ranks only needs "
            "@memo(collective=False) or memolab.distributed.rank_local()")
    if d["d"] == "error":
        raise DistributedError(f"{symbol}: rank 0 failed before this main-first call was computed ({d['error']})")
    if d["d"] == "solo":
        return compute_local(call, fn)
    leaders: list[int] = d["leaders"]
    leader = leaders[ex.rank]
    if leader == ex.rank:  # the first rank on its store: compute (or load) it for the others there
        beat = beat_of(ex).start(f"{seq}/alive/{ex.rank}")
        try:
            return _as_leader(ex, seq, call, fn, [r for r in range(ex.world) if leaders[r] == ex.rank != r], beat)
        finally:
            beat.stop()
    if not ex.wait([f"{seq}/mf/{leader}"], ex.arrival_timeout(), alive=f"{seq}/alive/{leader}"):
        warn_once(f"silent {symbol}", f"{symbol}: rank {leader}, computing this main-first call for rank {ex.rank}, "
                  f"went silent (no beat for {3 * _ttl():.0f} s); rank {ex.rank} computes it itself")
        return compute_local(call, fn)
    outcome = ex.get(f"{seq}/mf/{leader}").decode()
    if outcome != "done":
        kind, _, why = outcome.partition(" ")
        if kind == "collective":
            raise DistributedError(why)
        raise DistributedError(f"{symbol}: rank {leader} raised computing this main-first call ({why})")
    if call.force:  # fresh(): this rank's in-memory copy is the result the leader replaced
        call.store.forget_key(call.key)
    found, value = receive(ex, seq, call, name=f"v/{leader}", sender=leader)
    if found:
        return value
    warn_once(f"unshared {symbol}", f"{symbol}: rank {leader} computed this main-first call, but this rank's store "
              f"lacks the result and {value}; rank {ex.rank} computes it itself")
    return compute_local(call, fn)


def _ttl() -> float:
    from ..settings import config

    return config.settings().lease_ttl


def _as_leader(ex: Exchange, seq: int, call: Any, fn: Callable[..., Any], followers: list[int], beat: Any) -> Any:
    """Run the single-process call here for ``followers`` (beating while it runs, its body watched
    for collectives), post how it went, and send the value to a follower whose store lacks it."""
    symbol = call.key[0]
    guard = _Guard(ex, seq, symbol)
    beat.start(f"{seq}/alive/{ex.rank}", watch=guard.check)

    def body(*args: Any, **kwargs: Any) -> Any:
        guard.thread = threading.get_ident()
        try:
            value = fn(*args, **kwargs)
        except BaseException as e:
            if guard.tripped:
                raise DistributedError(guard.text) from e
            raise
        finally:
            guard.thread = None
        if guard.tripped:  # it came out of the collective after all (another rank entered one): not stored
            raise DistributedError(guard.text)
        return value

    try:
        value = compute_local(call, body)
    except BaseException as e:
        beat.stop()
        if not guard.tripped:
            ex.set(f"{seq}/mf/{ex.rank}", f"raised {type(e).__name__}: {e}"[:4000])
        raise
    beat.stop()
    ex.set(f"{seq}/mf/{ex.rank}", "done")
    serve(ex, seq, value, followers, name=f"v/{ex.rank}")
    return value


class _Guard:
    """Watches a leader's body thread (from the beat thread): sitting at one place inside
    ``torch.distributed`` for ``_STUCK`` seconds means a collective that cannot complete; the
    waiting ranks are told at once."""

    def __init__(self, ex: Exchange, seq: int, symbol: str) -> None:
        self.ex, self.seq, self.symbol = ex, seq, symbol
        self.thread: int | None = None
        self.tripped = False
        self.text = ""
        self._at: Any = None
        self._since = 0.0

    def check(self) -> None:
        ident = self.thread
        frames = thread_frames() if ident is not None and not self.tripped else None  # None: not now
        frame = frames.get(ident) if frames is not None and ident is not None else None
        if frame is None or not frame.f_code.co_filename.startswith(_TORCH_DIST):
            self._at = None
            return
        at = (id(frame), frame.f_code, frame.f_lasti)
        now = time.monotonic()
        if at != self._at:
            self._at, self._since = at, now
            return
        if now - self._since < _STUCK:
            return
        caller: types.FrameType | None = frame
        while caller is not None and caller.f_code.co_filename.startswith(_TORCH):
            caller = caller.f_back
        called_from = f", called from {caller.f_code.co_filename}:{caller.f_lineno}" if caller is not None else ""
        self.text = (f"{self.symbol}: its body entered a torch.distributed collective (torch.distributed "
                     f"{frame.f_code.co_name}{called_from}) on rank {self.ex.rank}, inside a main-first call: the "
                     "other ranks wait for its result outside any collective, so it can never complete. A body "
                     "that runs collectives (DDP, FSDP, a barrier) must be computed by every rank: use "
                     "@memo (collective=True), not main-first")
        self.tripped = True
        try:
            self.ex.set(f"{self.seq}/mf/{self.ex.rank}", "collective " + self.text)
        except Exception:  # torch's store: errors of many kinds
            swallowed("torch.main_first: _Guard.check")
