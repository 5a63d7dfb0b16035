"""Which memoized calls are collectives of a process group (the core side: imports no torch).

Inside an initialised ``torch.distributed`` group of more than one process, a
memoized call is a *collective*: every rank makes it, in the same order, and the
ranks agree on hit or miss (``memolab.torch.distributed`` drives it). A call
that one rank makes alone (inside ``if rank == 0:``) is marked rank-local, by
``@memo(collective=False)`` or by a ``with rank_local():`` block; it keeps the
single-process behaviour, and so does every memoized call inside its body.

This module only answers "collective or not?": the driver is reached through
``hooks.LAZY_HOOKS["drivers"]`` once its module (``torch.distributed``) is
imported, so ``import memolab`` never imports torch. docs/distributed.md has
the rules.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
from typing import Any, Callable, Dict, Iterator, Optional

from . import hooks
from .errors import MemolabError

__all__ = ["rank_local", "is_rank_local", "collective_driver", "keying_collective", "keying", "configure",
           "settings", "DistributedError"]


class DistributedError(MemolabError):
    """The ranks of a process group disagree about a collective memoized call (other
    arguments, another call at the same place in their sequence of calls)."""


_rank_local: "contextvars.ContextVar[bool]" = contextvars.ContextVar("memolab_rank_local", default=False)
_keying: "contextvars.ContextVar[bool]" = contextvars.ContextVar("memolab_collective_keying", default=False)

#: ``timeout``: seconds a rank waits for the others to reach a collective call (None:
#: ``$MEMOLAB_DIST_TIMEOUT``, else 30 lease TTLs, 300 s by default, a tenth of torch's default);
#: a silent decider is given up after 3 lease TTLs
_SETTINGS: Dict[str, Optional[float]] = {"timeout": None}


def configure(*, timeout: Optional[float] = None) -> Dict[str, Optional[float]]:
    """Set how long a rank waits for the other ranks to reach a collective call (seconds)."""
    if timeout is not None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        _SETTINGS["timeout"] = float(timeout)
    return dict(_SETTINGS)


def settings() -> Dict[str, Optional[float]]:
    return dict(_SETTINGS)


@contextlib.contextmanager
def rank_local() -> Iterator[None]:
    """Memoized calls made in this block are this rank's own (single-process behaviour)."""
    token = _rank_local.set(True)
    try:
        yield
    finally:
        _rank_local.reset(token)


def is_rank_local() -> bool:
    return _rank_local.get()


def keying_collective() -> bool:
    """Is the call being keyed a collective one? (A ``DistributedSampler`` of this very rank then
    keys alike on every rank.)"""
    return _keying.get()


@contextlib.contextmanager
def keying() -> Iterator[None]:
    token = _keying.set(True)
    try:
        yield
    finally:
        _keying.reset(token)


_resolved: Dict[str, Callable[[], Any]] = {}


def collective_driver() -> Optional[Callable[[Any, Callable[..., Any]], Any]]:
    """The driver of a collective call made here, or None: no process group of more than
    one rank is initialised, or the call is rank-local. A dict lookup per driver module
    until that module (``torch.distributed``) is imported."""
    if _rank_local.get():
        return None
    for module, target in hooks.LAZY_HOOKS["drivers"].items():
        if module in sys.modules:
            active = _resolved.get(target)
            if active is None:
                active = _resolved[target] = hooks.resolve(target)
            drive = active()
            if drive is not None:
                return drive
    return None
