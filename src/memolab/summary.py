"""A short, typed summary of a result for tables: ``state_dict: 6 tensors, 1.2 MB``.

The dashboard's runs table showed ``short_repr`` of a result, which for a model's
state dict is a useless ``OrderedDict([('fc1.weight', tens…``. Summaries are made
once, when the result is stored, by the first rule of ``RULES`` that applies;
other modules add rules with ``register``. No rule imports numpy or torch: arrays
and tensors are recognised by their ``shape``/``dtype`` attributes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .text import short_repr

Rule = Callable[[Any], str | None]
RULES: list[Rule] = []


def register(rule: Rule) -> Rule:
    """Add a rule (first match wins; rules registered later are tried first)."""
    RULES.insert(0, rule)
    return rule


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _tensor_bytes(x: Any) -> int | None:
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return None
    nb = getattr(x, "nbytes", None)
    if isinstance(nb, int):
        return nb
    try:
        return int(x.element_size() * x.numel())  # torch
    except Exception:
        return None


def _dtype(x: Any) -> str:
    return str(x.dtype).replace("torch.", "")


def _array(x: Any) -> str | None:
    nb = _tensor_bytes(x)
    if nb is None:
        return None
    shape = "×".join(str(int(d)) for d in tuple(x.shape)) or "scalar"
    return f"{type(x).__name__} {_dtype(x)}[{shape}], {_size(nb)}"


def _mapping(x: Any) -> str | None:
    if not isinstance(x, dict) or not x:
        return None
    sizes = [_tensor_bytes(v) for v in x.values()]
    if all(s is not None for s in sizes) and all(isinstance(k, str) for k in x):
        return f"state_dict: {len(x)} tensor{'s' if len(x) != 1 else ''}, {_size(sum(sizes))}"  # type: ignore[arg-type]
    return f"{type(x).__name__}: {len(x)} item{'s' if len(x) != 1 else ''}"


def _sequence(x: Any) -> str | None:
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return f"{type(x).__name__}: {len(x)} item{'s' if len(x) != 1 else ''}"
    return None


def _plain(x: Any) -> str | None:
    if x is None or isinstance(x, (bool, int, float, complex)):
        return repr(x)
    if isinstance(x, str):
        return repr(x) if len(x) <= 60 else f"str: {len(x)} chars"
    if isinstance(x, (bytes, bytearray)):
        return f"{type(x).__name__}: {_size(len(x))}"
    return None


for _rule in (_sequence, _mapping, _array, _plain):
    register(_rule)


def summarize(obj: Any) -> str:
    for rule in RULES:
        try:
            s = rule(obj)
        except Exception:
            s = None
        if s:
            return s
    return f"{type(obj).__name__}: {short_repr(obj)}"[:120]
