"""THE short, typed text of a value, for every text face: ``tensor(float32, 3×224×224)``.

A computation's arguments are shown in the miss line, ``ls``, ``runs``, ``show``, ``why``,
notebooks and the dashboard; all of them show the text ``text`` made when the call was keyed
(``rows.arg_snapshot``, a run's hyperparameters). A repr was useless there: a dict holding a
tensor printed its values (``{'Xtr': tensor([[-1.1258, …``) and pushed the arguments that tell
a sweep's calls apart (lr, seed) out of the line. Results are shown by ``summarize``: the same
text with the bytes it holds (``state_dict(4 tensors, 4.9 KB)``).

**Dispatch by type.** A summarizer is registered for a class (``register(dict, fn)``) or, for a
library's class, by its qualified name (``register("torch.Tensor", fn)``), so nothing here
imports numpy, torch or pandas: such an object cannot exist unless its library is imported. The
class's MRO is walked once per type (``_lookup`` caches it), so a subclass (a ``Parameter``, a
user's ``nn.Module``) finds its base's summarizer. A type without one shows its bounded
``short_repr`` (secrets masked, no addresses).

**Elision.** Containers show at most ``ITEMS`` items, then ``… N more``; nesting deeper than
``DEPTH`` shows ``[…]``/``{…}``; a string longer than ``STRING`` characters is cut. Every
summarizer is cheap: no iteration over a dataset's items or a tensor's values.
"""
from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

from ..errors import swallowed
from ..settings.text import MASKED, human_bytes, is_secret_name, short_repr

__all__ = ["register", "text", "summarize", "count", "fit", "split", "shared_line", "Summarizer", "ITEMS", "DEPTH", "STRING"]

#: ``fn(obj, depth) -> text`` (None: this summarizer does not know this object after all)
Summarizer = Callable[[Any, int], "str | None"]

#: items a container shows before ``… N more``
ITEMS = 4
#: containers nested deeper than this show ``[…]``
DEPTH = 2
#: a string longer than this is cut
STRING = 40

_BY_TYPE: dict[type, Summarizer] = {}
_BY_NAME: dict[str, Summarizer] = {}
_resolved: dict[type, Summarizer | None] = {}


def register(cls: type | str, fn: Summarizer) -> Summarizer:
    """Summarize instances of ``cls`` (and of its subclasses) with ``fn``; ``cls`` may be a
    qualified class name (``"torch.nn.modules.module.Module"``) for a library not imported here."""
    if isinstance(cls, str):
        _BY_NAME[cls] = fn
    else:
        _BY_TYPE[cls] = fn
    _resolved.clear()
    return fn


def _lookup(t: type) -> Summarizer | None:
    try:
        return _resolved[t]
    except KeyError:
        pass
    found: Summarizer | None = None
    for base in getattr(t, "__mro__", (t,))[:-1]:  # (object: no summarizer; its repr)
        found = _BY_TYPE.get(base) or _BY_NAME.get(f"{base.__module__}.{base.__qualname__}")
        if found is not None:
            break
    _resolved[t] = found
    return found


def text(obj: Any, depth: int = 0) -> str:
    """THE text of ``obj`` in every face: its type's summarizer, else its bounded repr."""
    fn = _lookup(type(obj))
    if fn is not None:
        try:
            s = fn(obj, depth)
        except Exception:  # a summarizer reads a user's object (a len() that raises): its repr instead
            swallowed("summary: text")
            s = None
        if s is not None:
            return s
    return short_repr(obj)


def count(n: float) -> str:
    """8000 -> ``8,000``."""
    return f"{int(n):,}"


def _params(n: int) -> str:
    """1234567 params -> ``1.2 M``."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def _plural(n: int, word: str) -> str:
    return f"{count(n)} {word}{'' if n == 1 else 's'}"


# -- plain values ---------------------------------------------------------------------------------
def _repr(x: Any, depth: int) -> str:
    return repr(x)


def _str(x: str, depth: int) -> str:
    return repr(x) if len(x) <= STRING else repr(x[:STRING]) + "…"


def _bytes(x: bytes, depth: int) -> str:
    return f"{type(x).__name__}({human_bytes(len(x))})"


for _t in (type(None), bool, int, float, complex):
    register(_t, _repr)
register(str, _str)
register(bytes, _bytes)
register(bytearray, _bytes)


# -- containers: items summarized in turn, elided consistently --------------------------------------
def _items(parts: list[str], total: int) -> str:
    more = total - len(parts)
    return ", ".join(parts + ([f"… {more} more"] if more > 0 else []))


_BRACKETS = {list: "[]", tuple: "()", set: "{}", frozenset: "{}"}


def _sequence(x: Any, depth: int) -> str | None:
    if hasattr(x, "_fields"):  # a namedtuple: its repr names its fields
        return None
    base = next(b for b in type(x).__mro__ if b in _BRACKETS)  # (registered for these four)
    opened, closed = _BRACKETS[base][0], _BRACKETS[base][1]
    if depth >= DEPTH:
        return f"{opened}…{closed}" if len(x) else f"{opened}{closed}"
    # (never a copy of a long one; a small set sorted: its order differs between processes)
    items = sorted(x, key=repr)[:ITEMS] if base in (set, frozenset) and len(x) <= 64 else list(islice(x, ITEMS))
    inner = _items([text(v, depth + 1) for v in items], len(x))
    if base is tuple and len(x) == 1:
        inner += ","
    shown = f"{opened}{inner}{closed}"
    return shown if type(x) in (list, tuple, set) else f"{type(x).__name__}({shown})"


def _tensor_bytes(x: Any) -> int | None:
    try:
        nb = getattr(x, "nbytes", None)  # (a sparse tensor's raises RuntimeError: its parts have sizes)
        if isinstance(nb, int):
            return nb
        return int(x.element_size() * x.numel())  # torch
    except (AttributeError, TypeError, RuntimeError, NotImplementedError):
        return None


def _is_array(v: Any) -> bool:
    fn = _lookup(type(v))
    return fn is _tensor or fn is _ndarray


def _mapping(x: Any, depth: int) -> str:
    name = "" if type(x) is dict else type(x).__name__
    if (name == "OrderedDict" or len(x) > ITEMS) and x and all(isinstance(k, str) for k in x) \
            and all(_is_array(v) for v in x.values()):
        # a model's state_dict (torch returns an OrderedDict), or more named arrays than a line
        # shows: how many and how big (a few named arrays show each one's shape)
        sizes = [_tensor_bytes(v) or 0 for v in x.values()]
        return f"state_dict({_plural(len(x), 'tensor')}, {human_bytes(sum(sizes))})"
    if depth >= DEPTH:
        return f"{name}{{…}}" if x else f"{name}{{}}"
    parts = [f"{k!r}: {repr(MASKED) if is_secret_name(k) else text(v, depth + 1)}"
             for k, v in islice(x.items(), ITEMS)]
    shown = "{" + _items(parts, len(x)) + "}"
    return f"{name}({shown})" if name else shown


register(list, _sequence)
register(tuple, _sequence)
register(set, _sequence)
register(frozenset, _sequence)
register(dict, _mapping)


# -- arrays and tensors: dtype and shape, never values ---------------------------------------------
def _shape(x: Any) -> str:
    return "×".join(str(int(d)) for d in tuple(x.shape))


def _values(x: Any) -> str | None:
    """A tensor's or an array's values when it has at most ``ITEMS`` of them (``[0.1, 0.2]``: they
    tell two calls apart where a shape would not), else None."""
    n = 1
    for d in tuple(x.shape):
        n *= int(d)
    if n > ITEMS:
        return None
    vals = x.tolist() if len(tuple(x.shape)) == 1 or not x.shape else x.reshape(-1).tolist()
    if not isinstance(vals, list):
        return f"{vals:.4g}" if isinstance(vals, float) else repr(vals)
    return "[" + ", ".join(f"{v:.4g}" if isinstance(v, float) else repr(v) for v in vals) + "]"


def _tensor(x: Any, depth: int) -> str:
    dtype = str(x.dtype).replace("torch.", "")
    dev = str(getattr(x, "device", "cpu"))
    on = "" if dev == "cpu" else ", " + dev
    if x.device.type != "meta" and x.numel() <= ITEMS:
        return f"tensor({_values(x.detach())}, {dtype}{on})"
    return f"tensor({dtype}, {_shape(x)}{on})"


def _ndarray(x: Any, depth: int) -> str:
    vals = _values(x) if x.dtype.kind in "biufc" else None
    if vals is not None:
        return f"ndarray({vals}, {x.dtype})"
    return f"ndarray({x.dtype}, {_shape(x)})"


register("torch.Tensor", _tensor)
register("numpy.ndarray", _ndarray)


# -- models, datasets, loaders, optimizers, frames: what they are, not their repr -------------------
def _module(x: Any, depth: int) -> str:
    return f"{type(x).__name__}({_params(sum(int(p.numel()) for p in x.parameters()))} params)"


def _torch_dataset(x: Any, depth: int) -> str:
    tensors = getattr(x, "tensors", None)  # a TensorDataset
    if isinstance(tensors, tuple) and tensors and hasattr(tensors[0], "shape"):
        more = f", {len(tensors)} tensors" if len(tensors) > 1 else ""
        return f"{type(x).__name__}({'×'.join(count(d) for d in tuple(tensors[0].shape))}{more})"
    try:
        return f"{type(x).__name__}({_plural(len(x), 'item')})"
    except TypeError:  # an iterable dataset: no len
        return f"{type(x).__name__}()"


def _loader(x: Any, depth: int) -> str:
    try:
        return f"{type(x).__name__}({count(len(x))} batches of {x.batch_size})"
    except TypeError:  # over an iterable dataset
        return f"{type(x).__name__}(batches of {x.batch_size})"


def _optimizer(x: Any, depth: int) -> str:
    groups = x.param_groups
    lr = groups[0].get("lr") if groups else None
    parts = ([_plural(len(groups), "param group")] if len(groups) != 1 else []) + (
        [f"lr={lr:g}"] if isinstance(lr, (int, float)) else [])
    return f"{type(x).__name__}({', '.join(parts)})"


def _frame(x: Any, depth: int) -> str:
    rows, cols = x.shape
    return f"{type(x).__name__}({count(rows)}×{count(cols)})"


def _series(x: Any, depth: int) -> str:
    return f"{type(x).__name__}({count(len(x))}, {x.dtype})"


def _hf_dataset(x: Any, depth: int) -> str:
    cols = list(x.column_names)
    shown = ", ".join(cols[:ITEMS]) + (", …" if len(cols) > ITEMS else "")
    return f"{type(x).__name__}({count(x.num_rows)} rows: {shown})"


register("torch.nn.modules.module.Module", _module)
register("torch.utils.data.dataset.Dataset", _torch_dataset)
register("torch.utils.data.dataloader.DataLoader", _loader)
register("torch.optim.optimizer.Optimizer", _optimizer)
for _name in ("pandas.DataFrame", "pandas.core.frame.DataFrame", "polars.DataFrame", "polars.dataframe.frame.DataFrame"):
    register(_name, _frame)
for _name in ("pandas.Series", "pandas.core.series.Series", "polars.Series", "polars.series.series.Series"):
    register(_name, _series)
register("datasets.arrow_dataset.Dataset", _hf_dataset)


def summarize(obj: Any) -> str:
    """A result's summary for the tables (the dashboard, ``runs``): its ``text``, with the bytes an
    array, a tensor or a blob holds (``tensor(float32, 100×3), 1.2 KB``)."""
    shown = text(obj)
    try:
        nb = _tensor_bytes(obj) if _is_array(obj) else None
    except Exception:  # a user's array-like object's own properties: the summary goes without its size
        swallowed("summary: summarize")
        nb = None
    if nb is not None:
        return f"{shown}, {human_bytes(nb)}"
    return shown[:120]


def fit(pairs: list[tuple[str, str]], width: int) -> str:
    """``name=text`` pairs joined in at most ``width`` characters: the longest texts are cut first
    (to ``…`` if need be), so a sweep's short arguments (``lr=0.1, seed=3``) stay in the line beside
    a long one (``ds={'Xtr': tensor(float32, 3000×20), 'y…``); only then is the line cut."""
    texts = dict(pairs)

    def joined() -> str:
        return ", ".join(f"{n}={texts[n]}" for n, _ in pairs)

    line = joined()
    while len(line) > width:
        longest = max(texts, key=lambda n: len(texts[n]))
        long = texts[longest]
        if len(long) <= 12:
            break
        keep = len(long) - (len(line) - width) - 1
        texts[longest] = long[:keep] + "…" if keep >= 12 else "…"
        line = joined()
    return line if len(line) <= width else line[: width - 1] + "…"


# -- a table's arguments: those that vary between its rows first, those all share said once --------
def split(rows: list[dict[str, str]]) -> tuple[list[str], dict[str, str]]:
    """(names whose text differs between ``rows``, or that some rows lack: in first-seen order;
    {name: text} of those all rows share). One row's names are all given as varying: its own cell
    says it all, with no line above a one-row table."""
    names: list[str] = []
    for r in rows:
        names.extend(n for n in r if n not in names)
    if len(rows) < 2:
        return names, {}
    varying = [n for n in names if len({r.get(n) for r in rows}) > 1]
    shared = {n: rows[0][n] for n in names if n not in varying}
    return varying, shared


def shared_line(shared: dict[str, str], rows: int, width: int | None) -> str | None:
    """``same in all 24: epochs=30, ds={'Xtr': tensor(float32, 3000×20), …}``, fitted to ``width``."""
    if not shared:
        return None
    head = f"same in all {rows}: "
    return head + fit(list(shared.items()), (width or 10**6) - len(head))
