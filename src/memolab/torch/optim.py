"""Optimizers: class by code + hyperparameters + per-parameter state keyed by *position*.

``opt.state`` is a dict keyed by the parameter tensors themselves. Hashing it
as a dict would order its keys by hashing every parameter in full a second time
(they are already in ``param_groups``); ``state_dict()`` numbers parameters by
their position across the param groups instead, and so do we (issue 14: 32
tensor hashes for a 4-layer Adam instead of 40).

Registered lazily on the first optimizer hashed (``register_lazy("torch.optim")``),
never by building one: constructing an optimizer imports ``torch._dynamo``
(about a second and 800 modules) that hashing a tensor must not pay.

An optimizer's state tensors are updated by fused and foreach kernels, which move
no version counter: they come from the identity cache only while their storage
stays copy-on-write, which those writes end (``tensors._stamp``).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import hashing
from ..hashing import Encoder

#: bookkeeping, not state: profiler names, warning flags, the scheduler's step counter
_EXCLUDE = frozenset({"_zero_grad_profile_name", "_warned_capturable_if_run_uncaptured", "_opt_called"})


def _positional_state(opt: Any) -> tuple[list[tuple[int, Any]], dict[Any, Any]]:
    """(state by parameter position, state of tensors not in any group)."""
    index: dict[int, int] = {}
    for g in opt.param_groups:
        for p in g["params"]:
            index.setdefault(id(p), len(index))
    by_pos: list[tuple[int, Any]] = []
    other: dict[Any, Any] = {}
    for k, v in opt.state.items():
        i = index.get(id(k))
        if i is None:
            other[k] = v
        else:
            by_pos.append((i, v))
    by_pos.sort(key=lambda kv: kv[0])
    return by_pos, other


def _attributes(opt: Any) -> dict[str, Any]:
    """The optimizer's own attributes, not ``__getstate__``'s three: a subclass's
    extra attributes (which its ``step`` may read) count too."""
    out = {}
    for k, v in vars(opt).items():
        if k in _EXCLUDE or k == "state" or "hook" in k:
            continue
        if k == "step" and getattr(v, "_wrapped_by_lr_sched", False):
            continue  # an LR scheduler's counting wrapper around the class's own step
        out[k] = v
    return out


def encode_optimizer(enc: Encoder, opt: Any) -> None:
    if enc.memoize(opt):
        return
    enc.write(b"\x10O")
    enc.encode_class(type(opt))
    enc.encode_child(_attributes(opt), "")
    by_pos, other = _positional_state(opt)
    enc.write(b"\x10o")
    enc.encode_child(by_pos, ".state")
    if other:  # state of tensors in no param group (rare): keyed by the tensors
        enc.write(b"+")
        enc.encode_child(dict(other), ".state")
    else:
        enc.write(b"-")


def register() -> None:
    hashing.register_handler(torch.optim.Optimizer, encode_optimizer)
