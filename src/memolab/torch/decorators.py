"""torch's decorators, by their arguments: what ``codegraph.decorators`` counts of the objects a
``@torch.autocast(...)``, ``@torch.no_grad()``/``inference_mode()``/``enable_grad()`` or
``@torch.compile(...)`` wrapper keeps in its closure. Only the configuration: each of these
objects also records state per call (``autocast.__enter__`` stores what ``__exit__`` restores;
a compiled function's callback keeps its compiled frames), which would split keys by what ran
before the graph was built."""
from __future__ import annotations

from typing import Any

import torch

from ..codegraph import decorators
from ..codegraph.where import is_immutable, symbol_of


def _autocast(a: Any) -> Any:
    dtype = getattr(a, "fast_dtype", None)
    return (getattr(a, "device", None), None if dtype is None else str(dtype), getattr(a, "_enabled", None),
            getattr(a, "_cache_enabled", None))


def _grad_mode(cm: Any) -> Any:
    # ``prev`` is the mode when the object was made (``set_grad_enabled``): not what the wrapper enters
    return sorted((k, v) for k, v in vars(cm).items() if k != "prev" and is_immutable(v))


def register() -> None:
    decorators.register(torch.amp.autocast, _autocast)
    decorators.register(torch.utils._contextlib._DecoratorContextManager, _grad_mode)


# -- torch.compile (``torch._dynamo``, imported by the first ``torch.compile``) ----------------------

_CONTEXT = ("fullgraph", "error_on_graph_break", "export", "_dynamic", "compiler_config")
_BACKEND = ("config", "dynamic", "compiler_name", "name", "kwargs", "mode", "options")


def _context(ctx: Any) -> Any:
    d = vars(ctx)
    return [(k, _plain(d[k])) for k in _CONTEXT if k in d]


def _callback(cb: Any) -> Any:
    """The compiler a compiled function calls and its options (``mode``, ``options``, ``dynamic``,
    ``fullgraph``): the chain of ``_torchdynamo_orig_backend`` wrappers down to the backend."""
    out: list[Any] = []
    seen = 0
    while cb is not None and seen < 16:
        seen += 1
        d = getattr(cb, "__dict__", {})
        out.append((f"{type(cb).__module__}.{type(cb).__qualname__}",
                    [(k, _plain(v)) for k, v in sorted(d.items()) if k in _BACKEND or k in ("_one_graph", "_export")]))
        nxt = d.get("_torchdynamo_orig_backend")
        if nxt is None or nxt is cb:
            if callable(cb) and not d:
                out.append(symbol_of(cb))  # a backend function (``backend="eager"``)
            break
        cb = nxt
    return out


def _plain(v: Any) -> Any:
    """A configuration value as something stable to hash: plain values, dicts and lists of them;
    anything else by its type's name."""
    if is_immutable(v) or isinstance(v, torch.dtype):
        return v if not isinstance(v, torch.dtype) else str(v)
    if type(v) is dict:
        return sorted((str(k), _plain(x)) for k, x in v.items())
    if type(v) in (list, tuple):
        return [_plain(x) for x in v]
    if callable(v):
        return symbol_of(v)
    return f"<{type(v).__module__}.{type(v).__qualname__}>"


def register_dynamo() -> None:
    from torch._dynamo import convert_frame, eval_frame

    decorators.register(eval_frame._TorchDynamoContext, _context)
    decorators.register(convert_frame.CatchErrorsWrapper, _callback)
