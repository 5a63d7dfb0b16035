"""A process group that comes to exist inside a memoized call: Lightning's launcher.

``Trainer(strategy="ddp", devices=N).fit`` run from a plain ``python script.py`` starts
the other ranks itself, from inside ``fit``: it runs the script again in N-1 children
(``LOCAL_RANK=1..``, ``NODE_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``) and
initialises the group afterwards. A memoized function around that ``fit`` is entered
before any group exists, on rank 0 and then on each child; before this, the child found
rank 0's lease on the call and waited for it, while rank 0 waited for the child in ``fit``:
a deadlock (docs/lightning.md, "Under DDP").

Here, outside a group, in a process that imported Lightning or that Lightning's launcher
started (``watch``):

* a computation marks itself in this process's environment for its duration
  (``MEMOLAB_COMPUTING=pid:key-digest,...``), so the children Lightning starts inside it
  inherit the mark; a child's call with a marked key is its parent's computation: the child
  runs the body with it (joining the DDP group), without a lease, storing nothing;
* a computation during which a group of 2+ ranks came to exist agrees afterwards, as a
  collective call does: every rank posts its key's and its result's digests, rank 0 stores
  only if all are equal (other keys: ``DistributedError`` on every rank; other results: not
  stored), the other ranks never store.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ..calls.lifecycle import drive_sync, lifecycle
from ..distributed import DistributedError
from ..settings.config import environ_bytes
from .exchange import GatedSteps, exchange, key_digest, result_digest, warn_once

__all__ = ["driver", "watch", "lightning_child"]

#: the environment variable a computation marks itself in (inherited by processes it starts)
MARK = "MEMOLAB_COMPUTING"

_LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")

_marks: dict[int, list[str]] = {}  # thread -> key digests it is computing, outermost first
_marks_lock = threading.Lock()


def lightning_child() -> bool:
    """Was this process started by Lightning's launcher (``_SubprocessScriptLauncher``), its group
    not initialised yet? It sets ``LOCAL_RANK`` (1..), ``NODE_RANK`` and ``WORLD_SIZE``; torchrun
    sets ``TORCHELASTIC_RUN_ID`` instead of ``NODE_RANK``."""
    local = environ_bytes(b"LOCAL_RANK")  # (asked on every call outside a group: a dict lookup, no more)
    if not local or local == b"0":
        return False
    world = environ_bytes(b"WORLD_SIZE") or b""
    return (local.isdigit() and world.isdigit() and int(world) >= 2 and environ_bytes(b"NODE_RANK") is not None
            and environ_bytes(b"TORCHELASTIC_RUN_ID") is None and bool(environ_bytes(b"MASTER_PORT")))


def driver() -> Callable[..., Any] | None:
    """``watch`` where a group may come to exist inside a memoized call (Lightning is imported, or
    Lightning's launcher started this process), else None."""
    for name in _LIGHTNING:
        if name in sys.modules:
            return watch
    return watch if lightning_child() else None


def watch(prepare: Callable[[bool], Any], fn: Callable[..., Any], mode: str = "collective") -> Any:
    """A memoized call outside any group (``mode`` does not apply: no group, no ranks yet)."""
    call, value = prepare(False)
    if call is None:
        return value  # this process's memory
    digest = key_digest(call.key0)
    if lightning_child() and _parent_computes(digest):
        return _with_parent(call, fn, digest)
    steps = GatedSteps(call)

    def body(*args: Any, **kwargs: Any) -> Any:
        before = dist.is_initialized()
        with _marked(digest):
            value = fn(*args, **kwargs)
        if not before and _grouped():
            steps.agreed = _agree(call, value)
        return value

    return drive_sync(lifecycle(steps, call.store.owner_id), body, call.bound)


watch.in_group = False  # type: ignore[attr-defined]


def _grouped() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def _parent_computes(digest: str) -> bool:
    mark = os.environ.get(MARK, "")
    pid, _, digests = mark.partition(":")
    return pid == str(os.getppid()) and digest in digests.split(",")


def _with_parent(call: Any, fn: Callable[..., Any], digest: str) -> Any:
    """This child was started inside its parent's computation of this very call: run the body
    with it (DDP needs every rank), without a lease (the parent holds it and waits for us),
    storing nothing and saving no checkpoint (rank 0 does)."""
    ev, token = call.enter(None)
    ev.writes = False
    before = dist.is_initialized()
    c0 = time.perf_counter()
    try:
        with _marked(digest):
            value = fn(*call.bound.args, **call.bound.kwargs)
    finally:
        call.leave(token, time.perf_counter() - c0)
    if not before and _grouped():
        _agree(call, value)
    return value


class _marked:
    """This thread computes ``digest`` while the block runs: in ``MEMOLAB_COMPUTING``, which the
    processes it starts inherit."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def __enter__(self) -> None:
        with _marks_lock:
            _marks.setdefault(threading.get_ident(), []).append(self.digest)
            _write_marks()

    def __exit__(self, *exc: Any) -> None:
        with _marks_lock:
            mine = _marks.get(threading.get_ident(), [])
            if self.digest in mine:
                mine.remove(self.digest)
            if not mine:
                _marks.pop(threading.get_ident(), None)
            _write_marks()


def _write_marks() -> None:
    digests = [d for ds in _marks.values() for d in ds]
    if digests:
        os.environ[MARK] = f"{os.getpid()}:{','.join(digests)}"
    else:
        os.environ.pop(MARK, None)


def _agree(call: Any, value: Any) -> bool:
    """After a computation during which the group came to exist: may rank 0 store its result?
    Every rank posts its key's and result's digests; rank 0 compares and posts the verdict.
    Unequal keys raise ``DistributedError`` on every rank; other ranks never store."""
    symbol = call.key[0]
    ex = exchange()
    if ex is None:
        return dist.get_rank() == 0
    ex.launches += 1
    name = f"launch/{ex.launches}"
    ex.set(f"{name}/{ex.rank}", json.dumps({"key": key_digest(call.key0), "res": result_digest(value)}))
    if ex.rank != 0:
        if not ex.wait([f"{name}/verdict"], ex.arrival_timeout()):
            return False
        error = json.loads(ex.get(f"{name}/verdict"))["error"]
        if error:
            raise DistributedError(error)
        return False
    others = [f"{name}/{r}" for r in range(1, ex.world)]
    verdict: dict[str, Any] = {"store": False, "error": ""}
    if not ex.wait(others, ex.arrival_timeout()):
        warn_once(f"late {symbol}", f"{symbol}: the ranks started inside this call did not finish it within "
                  f"{ex.arrival_timeout():.0f} s of rank 0; the result is returned but not stored")
    else:
        mine = json.loads(ex.get(f"{name}/0"))
        theirs = {r: json.loads(ex.get(f"{name}/{r}")) for r in range(1, ex.world)}
        keyed = sorted(r for r, t in theirs.items() if t["key"] != mine["key"])
        differ = sorted(r for r, t in theirs.items() if t["res"] != mine["res"])
        if keyed:
            verdict["error"] = (f"{symbol}: rank(s) {keyed} made another memoized call than rank 0 around the "
                                "training that started them (other arguments or code: a seed or a time read when "
                                "the script starts?); the result is not stored. The ranks Lightning starts run the "
                                "script again: its memoized calls must be keyed alike in every process")
        elif differ:
            warn_once(f"differ {symbol}", f"{symbol}: the ranks' results differ (rank(s) {differ} vs rank 0): not "
                      "stored, each rank keeps its own. Return what the ranks agree on (the model's state_dict)")
        else:
            verdict["store"] = True
    ex.set(f"{name}/verdict", json.dumps(verdict))
    if verdict["error"]:
        raise DistributedError(verdict["error"])
    return bool(verdict["store"])
