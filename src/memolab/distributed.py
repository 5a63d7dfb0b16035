"""Which memoized calls are collectives of a process group (the core side: imports no torch).

Inside an initialised ``torch.distributed`` group of more than one process, a
memoized call is a *collective*: every rank makes it, in the same order, and the
ranks agree on hit or miss (``memolab.torch.distributed`` drives it). A call
that one rank makes alone (inside ``if rank == 0:``) is marked rank-local, by
``@memo(collective=False)`` or by a ``with rank_local():`` block; it keeps the
single-process behaviour, and so does every memoized call inside its body.

A collective call may instead be computed **once per job**: by rank 0 while the
other ranks wait and then load it (``@memo(collective="main_first")`` or a ``with
main_first():`` block), or by one rank per store that ranks share, e.g. one per
node with node-local stores (``"local_main_first"``, ``main_first(local=True)``),
for a body that runs no collectives (data preparation).

This module only answers "collective or not, and how?": the driver is reached through
``hooks.LAZY_HOOKS["drivers"]`` once its module (``torch.distributed``) is
imported, so ``import memolab`` never imports torch. docs/distributed.md has
the rules.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .errors import MemolabError
from .settings import config, hooks

__all__ = ["rank_local", "is_rank_local", "main_first", "mode_of", "check_collective", "collective_driver",
           "in_group", "keying_collective", "keying", "configure", "settings", "DistributedError", "MODES"]

#: what ``@memo(collective=...)`` accepts besides True (every rank computes) and False (rank-local)
MODES = ("main_first", "local_main_first")


class DistributedError(MemolabError):
    """The ranks of a process group disagree about a collective memoized call (other
    arguments, another call at the same place in their sequence of calls)."""


_rank_local: contextvars.ContextVar[bool] = contextvars.ContextVar("memolab_rank_local", default=False)
_keying: contextvars.ContextVar[bool] = contextvars.ContextVar("memolab_collective_keying", default=False)
_main_first: contextvars.ContextVar[str | None] = contextvars.ContextVar("memolab_main_first", default=None)

#: ``timeout``: seconds a rank waits for the others to reach a collective call (None:
#: ``$MEMOLAB_DIST_TIMEOUT``, else 30 lease TTLs, 300 s by default, a tenth of torch's default);
#: a silent decider is given up after 3 lease TTLs
_SETTINGS: dict[str, float | None] = {"timeout": None}


def configure(*, timeout: float | None = None) -> dict[str, float | None]:
    """Set how long a rank waits for the other ranks to reach a collective call (seconds).

    Not ``memolab.configure``: that one holds the core's settings, which every call reads; this
    is read only by the process-group drivers (``memolab.torch``), which the core never imports
    (docs/settings.md, "Three configure()s"). The value is checked by the rule of
    ``MEMOLAB_DIST_TIMEOUT``, the same setting from the environment."""
    if timeout is not None:
        rule = config.ENV["MEMOLAB_DIST_TIMEOUT"].rule
        try:
            _SETTINGS["timeout"] = float(rule.check(timeout))
        except ValueError as e:
            raise ValueError(f"configure(timeout={timeout!r}): the value {e}; accepted: {rule.accepted()}") from None
    return dict(_SETTINGS)


def settings() -> dict[str, float | None]:
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


@contextlib.contextmanager
def main_first(local: bool = False) -> Iterator[None]:
    """Collective memoized calls made in this block are computed once per job: by rank 0 while
    the other ranks wait, then load its result (``local=True``: by the first rank of each set of
    ranks that share a store, e.g. one per node with node-local stores). For bodies that run no
    collectives (data preparation, tokenization); docs/distributed.md, "Computed once per job"."""
    token = _main_first.set("local_main_first" if local else "main_first")
    try:
        yield
    finally:
        _main_first.reset(token)


def check_collective(value: Any) -> Any:
    """``@memo(collective=...)``: True, False, "main_first" or "local_main_first" (a clear error else)."""
    if isinstance(value, bool) or value in MODES:
        return value
    raise ValueError(f"@memo(collective=...) must be True, False, 'main_first' or 'local_main_first', not {value!r}")


def mode_of(collective: Any) -> str:
    """How a collective call of a function declared ``collective`` runs here: "collective" (every
    rank computes), "main_first" or "local_main_first". A function's own main-first mode wins
    over a ``main_first()`` block, which wins over the default."""
    if collective in MODES:
        return collective
    return _main_first.get() or "collective"


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


_resolved: dict[str, Callable[[], Any]] = {}


def collective_driver() -> Callable[..., Any] | None:
    """The driver of a memoized call made here, or None: the call is rank-local, or no driver
    applies (no process group of more than one rank, and none that could come to exist during
    the call, e.g. by Lightning's launcher). A dict lookup per driver module until that module
    (``torch.distributed``) is imported. A driver is called as ``drive(prepare, fn, mode)``,
    ``prepare(collective)`` keying the call; its ``in_group`` says whether a group exists."""
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


def in_group() -> bool:
    """Is a memoized call made here a collective of an initialised process group? (A checkpoint
    restored in its body must then agree across ranks.)"""
    drive = collective_driver()
    return drive is not None and bool(getattr(drive, "in_group", False))
