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

from .errors import swallowed
from .text import short_repr

Rule = Callable[[Any], str | None]
RULES: list[Rule] = []


def register(rule: Rule) -> Rule:
    """Add a rule (first match wins; rules registered later are tried first)."""
    RULES.insert(0, rule)
    return rule


def _size(n: float) -> str:
    from .text import human_bytes  # one unit system in every face

    return human_bytes(n)


def _tensor_bytes(x: Any) -> int | None:
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return None
    nb = getattr(x, "nbytes", None)
    if isinstance(nb, int):
        return nb
    try:
        return int(x.element_size() * x.numel())  # torch
    except Exception:  # the user's tensor-like object's own methods
        swallowed("summary: _tensor_bytes")
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


# -- typed summaries of arguments: what a model, a dataset, a loader is, not its repr ----------------
# ``Net: 3 layers, 1.2 K params``, ``TensorDataset: 8,000 × 16``, ``DataLoader: 250 batches of 32``.
# Shown for a computation's arguments (its run's hyperparameters, its evaluation's arguments) in
# place of a repr that is either an address (``<TensorDataset object>``) or a page of text (a
# module's). No rule imports a library: a class is recognised once its library is imported, which
# it must be for such an object to exist. Each rule is cheap (no iteration over a dataset's items).
TYPED: list[Rule] = []


def register_typed(rule: Rule) -> Rule:
    TYPED.insert(0, rule)
    return rule


def count(n: float) -> str:
    """8000 -> ``8,000``; 1234567 params -> ``1.2 M`` (see ``_params``)."""
    return f"{int(n):,}"


def _params(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def _isinstance_of(x: Any, module: str, path: str) -> bool:
    import sys

    mod = sys.modules.get(module)
    if mod is None:
        return False
    obj: Any = mod
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return isinstance(obj, type) and isinstance(x, obj)


def _module(x: Any) -> str | None:
    if not _isinstance_of(x, "torch", "nn.Module"):
        return None
    leaves = sum(1 for m in x.modules() if next(iter(m.children()), None) is None)
    params = sum(int(p.numel()) for p in x.parameters())
    return f"{type(x).__name__}: {leaves} layer{'s' if leaves != 1 else ''}, {_params(params)} params"


def _torch_dataset(x: Any) -> str | None:
    if not _isinstance_of(x, "torch", "utils.data.Dataset"):
        return None
    tensors = getattr(x, "tensors", None)  # a TensorDataset
    if isinstance(tensors, tuple) and tensors and hasattr(tensors[0], "shape"):
        shape = " × ".join([count(d) for d in tuple(tensors[0].shape)])
        more = f" ({len(tensors)} tensors)" if len(tensors) > 1 else ""
        return f"{type(x).__name__}: {shape}{more}"
    try:
        return f"{type(x).__name__}: {count(len(x))} items"
    except Exception:  # the user's dataset's own __len__
        swallowed("summary: _torch_dataset")
        return None


def _loader(x: Any) -> str | None:
    if not _isinstance_of(x, "torch", "utils.data.DataLoader"):
        return None
    try:
        n = len(x)
    except Exception:  # the user's dataset's own __len__ (an IterableDataset raises TypeError, others anything)
        swallowed("summary: _loader")
        return f"{type(x).__name__} (batches of {x.batch_size})"
    return f"{type(x).__name__}: {count(n)} batches of {x.batch_size}"


def _optimizer(x: Any) -> str | None:
    if not _isinstance_of(x, "torch", "optim.Optimizer"):
        return None
    groups = x.param_groups
    lr = groups[0].get("lr") if groups else None
    return f"{type(x).__name__}: {len(groups)} param group{'s' if len(groups) != 1 else ''}" + (
        f", lr={lr:g}" if isinstance(lr, (int, float)) else "")


def _frame(x: Any) -> str | None:
    if not (_isinstance_of(x, "pandas", "DataFrame") or _isinstance_of(x, "polars", "DataFrame")):
        return None
    rows, cols = x.shape
    return f"{type(x).__name__}: {count(rows)} × {count(cols)}"


def _hf_dataset(x: Any) -> str | None:
    if not _isinstance_of(x, "datasets", "Dataset"):
        return None
    cols = list(x.column_names)
    shown = ", ".join(cols[:4]) + (", …" if len(cols) > 4 else "")
    return f"{type(x).__name__}: {count(x.num_rows)} rows × {len(cols)} columns ({shown})"


def _big_array(x: Any) -> str | None:
    # an array or tensor of more than 16 values: its type, shape and size (a short one's repr shows its values)
    shape = getattr(x, "shape", None)
    if not isinstance(shape, tuple) and type(shape).__name__ != "Size":
        return None
    n = 1
    for d in tuple(shape):  # type: ignore[arg-type]  # a tuple or a torch.Size
        n *= int(d)
    return _array(x) if n > 16 else None


for _rule in (_big_array, _hf_dataset, _frame, _optimizer, _loader, _torch_dataset, _module):
    register_typed(_rule)


def typed(obj: Any) -> str | None:
    """A typed summary of an argument when a rule knows its type (a model, a dataset, a loader, a
    frame, a big array), else None (its repr says it better: a number, a string, a small config)."""
    return _first(TYPED, obj)


def _first(rules: list[Rule], obj: Any) -> str | None:
    """What the first rule that knows ``obj`` says (a rule that fails knows nothing), or None."""
    for rule in rules:
        try:
            s = rule(obj)
        except Exception:  # a summary rule reads the user's object (its attributes, its methods)
            swallowed("summary: _first")
            s = None
        if s:
            return s
    return None


def summarize(obj: Any) -> str:
    t = typed(obj)
    if t is not None and not _tensor_bytes(obj):
        return t  # a model, a dataset (arrays keep their rule below: their size in bytes)
    return _first(RULES, obj) or f"{type(obj).__name__}: {short_repr(obj)}"[:120]
