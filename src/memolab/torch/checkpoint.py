"""``memolab.checkpoint``: resume a memoized training run after a crash.

Inside a memoized function::

    ck = memolab.checkpoint(model=model, optimizer=opt, scheduler=sched, loader=loader, every=100)
    state = ck.restore(epoch=0)          # the defaults, or what the last checkpoint saved
    for epoch in range(state["epoch"], epochs):
        for x, y in loader:              # a resumable loader continues mid-epoch
            ...
            ck.step(epoch=epoch)         # every 100th call saves a checkpoint

The checkpoint is filed under the running evaluation's key (function, code
digest, argument digest): the same call made again after a crash finds it,
and any edit to the code or the arguments does not. It holds each object's
``state_dict()``, the random-number states (torch, CUDA where initialised,
``random``, numpy), the step count, the extras passed to ``step``/``save`` and
how far the run's logs had got. ``restore`` loads them back (objects with
``load_state_dict``, then the random states) and gives the new run the logs
up to the checkpoint, so the result and the logged curves are those of an
uninterrupted run. When the result is stored the checkpoint is deleted,
unless ``keep=True``. ``fresh()`` starts over.

Outside a memoized computation a checkpoint does nothing (``restore`` returns
the defaults): the same function runs unmemoized, for a test, unchanged.
"""
from __future__ import annotations

import random
import sys
import time
import warnings
from typing import Any

from ..errors import MemolabWarning

_FORMAT = 1


def _capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # untested here: no GPU
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["random"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


class Checkpoint:
    """Periodic, explicit checkpoints of one memoized computation (see the module docstring)."""

    def __init__(self, objects: dict[str, Any], every: int | None, seconds: float | None, keep: bool) -> None:
        from ..calls.memo import running

        for name, obj in objects.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"memolab.checkpoint({name}=...): {type(obj).__qualname__} has no "
                                "state_dict()/load_state_dict(); pass plain values as extras to step()/save()")
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"memolab.checkpoint(every=...) must be a positive int, not {every!r}")
        if seconds is not None and not seconds > 0:
            raise ValueError(f"memolab.checkpoint(seconds=...) must be positive, not {seconds!r}")
        self.objects = objects
        self.every = every
        self.seconds = seconds
        self.keep = keep
        #: steps counted so far (restored with the checkpoint)
        self.steps = 0
        #: the step the computation resumed from, or None when it started afresh
        self.resumed_from: int | None = None
        self._ev = running()
        self._last = time.monotonic()
        self._restored = False
        self._warned = False
        if self._ev is not None and not keep:
            ev = self._ev
            ev.on_stored.append(lambda: self._drop(ev))

    @property
    def active(self) -> bool:
        """Inside a memoized computation (else every method is a no-op)."""
        return self._ev is not None

    def __repr__(self) -> str:
        where = "inactive (not inside a memoized call)" if self._ev is None else f"{self._ev.key[0]}"
        return f"<memolab.checkpoint {where}, step {self.steps}>"

    # -- resuming -----------------------------------------------------------------------------
    def restore(self, **defaults: Any) -> dict[str, Any]:
        """Load the last checkpoint of this computation, if any, and return its extras
        (over ``defaults``). Call it once, before training and before logging."""
        self._restored = True
        extras = dict(defaults)
        ev = self._ev
        if ev is None:
            return extras
        from ..store import checkpoints

        if ev.force:  # fresh(): start over
            self._drop(ev)
            return extras
        try:
            found = checkpoints.load(ev.store, ev.key)
        except Exception as e:  # damaged, tampered, code changed, or its classes' own unpickling code: start over
            warnings.warn(f"{ev.key[0]}: the checkpoint of this call cannot be used ({e}); starting from the beginning",
                          _warning(), stacklevel=2)
            _agree_across_ranks(ev, None)
            return extras
        _agree_across_ranks(ev, None if found is None else found[1]["steps"])
        if found is None:
            return extras
        _, saved = found
        step = saved["steps"]
        names = set(saved["objects"])
        if names != set(self.objects):
            raise ValueError(f"the checkpoint of this call holds {sorted(names)}, memolab.checkpoint was given "
                             f"{sorted(self.objects)}")
        for name, obj in self.objects.items():
            obj.load_state_dict(saved["objects"][name])
        _restore_rng(saved["rng"])
        from ..tracking import resume

        resume.continue_from(saved.get("logs"))
        self.steps = step
        self.resumed_from = step
        extras.update(saved["extras"])
        return extras

    # -- saving ---------------------------------------------------------------------------------
    def step(self, **extras: Any) -> bool:
        """Count one step; save a checkpoint when one is due. Returns whether it saved."""
        self.steps += 1
        due = (self.every is not None and self.steps % self.every == 0) or (
            self.seconds is not None and time.monotonic() - self._last >= self.seconds)
        if due:
            self.save(**extras)
        return due

    def save(self, **extras: Any) -> None:
        """Save a checkpoint now (objects, random states, step, ``extras``, log position)."""
        ev = self._ev
        self._last = time.monotonic()
        if ev is None or not ev.writes:  # (under DDP rank 0 saves, every rank restores)
            return
        from ..store import checkpoints
        from ..tracking import resume

        value = {
            "format": _FORMAT,
            "objects": {name: obj.state_dict() for name, obj in self.objects.items()},
            "rng": _capture_rng(),
            "steps": self.steps,  # in the payload, which is signed and verified (the row's column is a label)
            "extras": extras,
            "logs": resume.mark(),
        }
        try:
            checkpoints.save(ev.store, ev.key, self.steps, value)
        except Exception as e:  # pickling runs the extras' own code; the store may be of any backend
            # A checkpoint is insurance: a full disk, a locked index or an
            # unstorable extra must not stop the training it protects.
            if not self._warned:
                self._warned = True
                warnings.warn(f"{ev.key[0]}: checkpoint not saved ({type(e).__name__}: {e}); training goes on, "
                              "but a crash now restarts from the last checkpoint that was saved", _warning(), stacklevel=3)

    def _drop(self, ev: Any) -> None:
        from ..store import checkpoints

        checkpoints.drop(ev.store, ev.key)


def _agree_across_ranks(ev: Any, step: int | None) -> None:
    """In a collective call of a process group, every rank must resume from the same step
    (docs/distributed.md): they compare before any of them loads it."""
    if "torch.distributed" not in sys.modules:
        return
    from ..distributed import in_group

    if not in_group():  # no group, or a rank-local computation
        return
    from . import distributed

    distributed.agree_on_checkpoint(ev.key[0], step)


def _warning() -> type:
    return MemolabWarning


def checkpoint(every: int | None = None, *, seconds: float | None = None, keep: bool = False,
               **objects: Any) -> Checkpoint:
    """Checkpoint the memoized computation running here every ``every`` steps and/or ``seconds``.

    ``objects``: things with ``state_dict()``/``load_state_dict()`` (modules,
    optimizers, schedulers, ``memolab.torch.resumable`` loaders,
    StatefulDataLoader, torchdata.nodes Loader). Plain values go to
    ``step(**extras)``/``save(**extras)`` and come back from ``restore()``.
    ``keep=True`` keeps the last checkpoint after the result is stored.
    """
    return Checkpoint(objects, every, seconds, keep)
