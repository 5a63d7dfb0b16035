"""Putting torch objects back as a memoized body left them (``memolab.inputs.mutations``): the caller's
own tensors, parameters, modules and generators take the stored state in place.

A tensor is copied into (``copy_``, bitwise; its identity, its views, an optimizer's reference to a
parameter and ``requires_grad`` survive); one whose shape or dtype the body changed takes the stored
tensor as its ``.data``. A module goes back attribute by attribute (``training``, submodules,
parameters and buffers in place), not through ``load_state_dict``, which leaves non-persistent
buffers and plain attributes behind. An optimizer goes back attribute by attribute too
(``put_optimizer``: its state keyed by the caller's parameters), an LR scheduler through its
``state_dict``/``load_state_dict`` (the generic rule).
"""
from __future__ import annotations

from typing import Any

import torch

from ..inputs import mutations


def put_tensor(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    with torch.no_grad():
        if (live.layout == torch.strided and stored.layout == torch.strided and live.shape == stored.shape
                and live.dtype == stored.dtype and live.device == stored.device):
            live.copy_(stored)
        else:
            live.data = stored.detach()
    if live.is_leaf and live.requires_grad != stored.requires_grad:
        live.requires_grad_(stored.requires_grad)
    if stored.__dict__ or live.__dict__:
        ld, sd = live.__dict__, stored.__dict__
        for k in [k for k in ld if k not in sd]:
            del ld[k]
        for k, sv in sd.items():
            ld[k] = mutations.put_back(ld[k], sv, memo, f"{path}.{k}") if k in ld else memo.get(id(sv), sv)
    return live


def put_generator(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    live.set_state(stored.get_state())
    return live


def put_optimizer(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    """Attribute by attribute, as a key sees an optimizer (``optim.encode_optimizer``): ``param_groups``
    first, which maps the stored parameters to the caller's, so that ``state`` (keyed by parameter)
    lands on them; the objects the groups share with ``defaults`` (``betas``) stay shared, as the
    key's back-references see them (``load_state_dict`` makes new groups: another key)."""
    return mutations.put_object(live, stored, memo, path, first=("defaults", "param_groups"))


def _grad_token(t: Any) -> Any:
    g = t.grad if t.is_leaf and t.requires_grad else None
    # the gradient itself is held (its id cannot be reused meanwhile); a write in place moves its
    # version (``backward``'s accumulation, ``zero_grad(set_to_none=False)``: both autograd-visible)
    return None if g is None else (g, g._version)


def _same_grad(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return a[0] is b[0] and a[1] == b[1]


def _read_grad(t: Any) -> Any:
    return t.grad if t.is_leaf and t.requires_grad else None


def _write_grad(t: Any, g: Any) -> None:
    if t.is_leaf and t.requires_grad:
        t.grad = g


def register() -> None:
    reg = mutations.register_restorer
    reg(torch.Tensor, put_tensor, leaf=True)
    reg(torch.Generator, put_generator, leaf=True)
    # a module has state_dict/load_state_dict, but they leave plain attributes and non-persistent
    # buffers behind: attribute by attribute instead
    reg(torch.nn.Module, mutations.put_object)
    reg(torch.optim.Optimizer, put_optimizer)
    # ``.grad``: no part of a tensor's key nor of its pickle, yet what a training step leaves (and
    # a gradient-accumulating body makes): stored with a changed argument, set back by a hit
    grad = mutations.Side(_grad_token, _same_grad, _read_grad, _write_grad)
    mutations.register_side(torch.Tensor, grad)
    mutations.register_side(torch.nn.Parameter, grad)
    for t in (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size):
        reg(t, mutations.put_replace, leaf=True)
