"""A ``DataLoader``'s base seed: a draw from the global torch generator that reaches nothing
without workers, so it joins no key (``globalrng.neutral``).

Every ``iter(loader)`` runs ``_BaseDataLoaderIter.__init__``, which draws ``_base_seed``
from the loader's generator or, without one, from the global torch generator — even with
``num_workers=0`` and no shuffling. Only worker processes use the value (each worker's
torch, ``random`` and numpy seeds, ``worker_init_fn``'s ``get_worker_info().seed``); the
single-process iterator stores it and never reads it. Counted as a draw, it would key every
memoized function that iterates a loader by the global generator's state: a miss in every
process of an unseeded script.

So while a body is in progress the iterator classes carry two data descriptors, and a draw
is neutral only when all of this is proven at the moment it is stored:

* ``self._sampler_iter = ...`` and ``self._base_seed = ...`` were both set by torch's own
  ``_BaseDataLoaderIter.__init__`` (the caller's code object is that function's), on an
  instance of exactly ``_SingleProcessDataLoaderIter`` (a subclass may read the seed);
* between the two, the global generator moved exactly as one scalar ``int64`` ``random_``
  draw does and that draw's value is the one stored: the move is replayed on a scratch
  generator from the state read at the first store (a sampler's own eager draw, another
  thread's draw, a torch function or dispatch mode in between all break the proof);
* reading ``_base_seed`` of such an iterator while a body is in progress makes the draw
  the body's own again (``globalrng`` then keys the body by the generator's state).

A hit makes the same draw again, so the generator ends where the body would leave it.
Everything else stays a draw, and says why on a miss: a ``RandomSampler`` without its own
generator (the order of the batches), workers (their seeds).
"""
from __future__ import annotations

import sys
import weakref
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, dataloader as _dl

from ..inputs import globalrng

OP = "torch.loader_base_seed"
SHUFFLES = "the loader shuffles with the global torch generator: seed it, or give the DataLoader a generator"
WORKERS = ("the loader seeds its worker processes from the global torch generator: seed it, or give the "
           "DataLoader a generator")

_BASE = _dl._BaseDataLoaderIter
_SINGLE = _dl._SingleProcessDataLoaderIter
_INIT = _BASE.__init__
_INIT_CODE = getattr(_INIT, "__code__", None)
#: id(iterator) -> the generator's state when its ``_sampler_iter`` was set by ``__init__``
_pending: dict[int, Any] = {}
#: iterators whose base seed was a neutral draw: reading it makes it the body's
_neutral: weakref.WeakSet[Any] = weakref.WeakSet()


def _from_init() -> bool:
    return sys._getframe(2).f_code is _INIT_CODE and _BASE.__init__ is _INIT


class _SamplerIter:
    """``_sampler_iter``: no ``__get__`` (reads go to the instance at C speed, once per batch)."""

    def __set__(self, inst: Any, value: Any) -> None:
        inst.__dict__["_sampler_iter"] = value
        if not globalrng.in_progress() or not _from_init():
            return
        if type(inst) is _SINGLE:
            state = torch.get_rng_state()
            _pending[id(inst)] = (state, _token(state))
        else:
            _pending[id(inst)] = None
        sampler = inst.__dict__.get("_index_sampler")
        if type(sampler) is BatchSampler:
            sampler = sampler.sampler
        if isinstance(sampler, RandomSampler) and sampler.generator is None:
            globalrng.reason("torch", SHUFFLES)


class _BaseSeed:
    def __get__(self, inst: Any, owner: Any = None) -> Any:
        if inst is None:
            return self
        if inst in _neutral and globalrng.in_progress():
            _neutral.discard(inst)
            globalrng.drew("torch")
        try:
            return inst.__dict__["_base_seed"]
        except KeyError:
            raise AttributeError("_base_seed") from None

    def __set__(self, inst: Any, value: Any) -> None:
        inst.__dict__["_base_seed"] = value
        if not globalrng.in_progress() or not _from_init():
            return
        before = _pending.pop(id(inst), None)
        if before is None:
            if type(inst) is not _SINGLE and inst.__dict__.get("_num_workers", 0) > 0:
                globalrng.reason("torch", WORKERS)  # the seed reaches the workers: a draw, told
            return
        after = _token(torch.get_rng_state())
        if before[1] == after:
            return  # drawn from the loader's own generator
        if _proven(before[0], after, value):
            _neutral.add(inst)
            globalrng.neutral("torch", OP, before[1], after)


def _proven(before: Any, after: bytes, value: Any) -> bool:
    """Did exactly one scalar int64 ``random_`` draw of the default CPU generator, with
    ``value`` as its result, move it from ``before`` to ``after``?"""
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False  # a mode may have run anything in between
    scratch = torch.Generator()
    scratch.set_state(before)
    drawn = torch.empty((), dtype=torch.int64).random_(generator=scratch).item()
    return bool(drawn == value and _token(scratch.get_state()) == after)


def _token(state: Any) -> bytes:
    """The generator's state as ``rng``'s token has it (its bytes): a fresh copy of our own, so
    exporting it through numpy (8 µs faster than ``tensors.raw_bytes``) touches no one's storage."""
    return state.numpy().tobytes()  # type: ignore[no-any-return]


def _draw_again() -> None:
    torch.empty((), dtype=torch.int64, device="cpu").random_(generator=torch.default_generator)


_DESCRIPTORS = {"_sampler_iter": _SamplerIter(), "_base_seed": _BaseSeed()}


def _install(on: bool) -> None:
    for name, d in _DESCRIPTORS.items():
        now = _BASE.__dict__.get(name)
        if on and now is None:
            setattr(_BASE, name, d)
        elif not on and now is d:
            delattr(_BASE, name)
    if not on:
        _pending.clear()


def register() -> None:
    """Watch loaders' base seeds while bodies are in progress (``globalrng.on_swap``)."""
    if _INIT_CODE is None or any(n in _BASE.__dict__ for n in _DESCRIPTORS):
        return  # not the torch this was proven against: every base seed stays a draw
    globalrng.register_replay(OP, "torch", _draw_again)
    globalrng.on_swap(_install)
