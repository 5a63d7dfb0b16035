"""torch's global switches that change results, as a pseudo-argument of every key.

``torch.set_default_dtype(torch.float64)`` makes ``torch.randn(3)`` float64;
``torch.use_deterministic_algorithms(True)``, TF32 and the fp32 matmul precision,
reduced-precision reductions pick other kernels with other bits. None of them is
an argument, so each joins the key (``memolab.implicit``) — but only while it
differs from torch's default: a process that never imported torch, or left every
switch alone, keys exactly as before. The defaults are torch's own for a plain
process (read from the registers below); an environment that changes one
(``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``) keys its calls apart from processes
without it, which is what it should do.

Cost: one C call per switch on every key once torch is imported (about 1 µs for
all of them, ``benchmarks/hit_overhead.py``): torch has no notification when a
switch is set, and a stale switch would be a wrong result.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .. import implicit

_C = torch._C


def _fp32(backend: str, op: str) -> Callable[[], Any]:
    return functools.partial(_C._get_fp32_precision_getter, backend, op)


#: (name, reader, default). An fp32 precision of "none" defers to the legacy switches
#: (``allow_tf32``), which are read too; "ieee" is what "none" means by default, and
#: ``set_float32_matmul_precision("highest")`` writes it: both count as the default.
_SWITCHES: list[tuple[str, Callable[[], Any], Any]] = [
    ("default_dtype", torch.get_default_dtype, torch.float32),
    ("deterministic_algorithms", _C._get_deterministic_algorithms, False),
    ("cudnn.deterministic", _C._get_cudnn_deterministic, False),
    ("mkldnn.deterministic", getattr(_C, "_get_mkldnn_deterministic", None), False),  # type: ignore[list-item]  # None: this torch build lacks it (skipped)
    ("cuda.matmul.allow_tf32", _C._get_cublas_allow_tf32, False),
    ("cudnn.allow_tf32", _C._get_cudnn_allow_tf32, True),
    ("cuda.matmul.allow_fp16_reduced_precision_reduction",  # type: ignore[list-item]  # None: this torch build lacks it (skipped)
     getattr(_C, "_get_cublas_allow_fp16_reduced_precision_reduction", None), (True, True)),
    ("cuda.matmul.allow_bf16_reduced_precision_reduction",  # type: ignore[list-item]  # None: this torch build lacks it (skipped)
     getattr(_C, "_get_cublas_allow_bf16_reduced_precision_reduction", None), (True, True)),
    ("cpu.allow_fp16_reduced_precision_reduction",  # type: ignore[list-item]  # None: this torch build lacks it (skipped)
     getattr(_C, "_get_cpu_allow_fp16_reduced_precision_reduction", None), False),
]
#: (name, backend, op, default): cuDNN's convolutions and RNNs default to TF32, as ``cudnn.allow_tf32`` does
_FP32 = [("fp32_precision", "generic", "all", "none"), ("cuda.matmul.fp32_precision", "cuda", "matmul", "none"),
         ("cuda.conv.fp32_precision", "cuda", "conv", "tf32"), ("cuda.rnn.fp32_precision", "cuda", "rnn", "tf32"),
         ("mkldnn.matmul.fp32_precision", "mkldnn", "matmul", "none"),
         ("mkldnn.conv.fp32_precision", "mkldnn", "conv", "none"),
         ("mkldnn.rnn.fp32_precision", "mkldnn", "rnn", "none")]

_names: tuple[str, ...] = ()
_readers: tuple[Callable[[], Any], ...] = ()
_defaults: tuple[Any, ...] = ()
#: every reader called in one tuple display: 1.3 µs where a comprehension takes 2.8
_read_all: Callable[[], tuple[Any, ...]] = tuple
#: values that mean the same as the default ("none" and "ieee" of an fp32 precision)
_SAME = {"none": "ieee"}


def switches() -> dict[str, Any] | None:
    """The switches that differ from their default, or None (the common case)."""
    try:
        values = _read_all()
    except Exception:  # a getter refusing in this state (torch raises for mixed precision APIs)
        values = tuple(_safe(read) for read in _readers)
    if values == _defaults:
        return None
    out = {}
    for name, v, d in zip(_names, values, _defaults, strict=False):
        if _same(v) != _same(d):
            out[name] = str(v) if isinstance(v, torch.dtype) else v
    return out or None


def _same(v: Any) -> Any:
    return _SAME.get(v, v) if type(v) is str else v


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception as e:
        return f"<{type(e).__name__}>"


def register() -> None:
    global _names, _readers, _defaults, _read_all
    names, readers, defaults = [], [], []
    table = _SWITCHES + [(n, _fp32(b, o), d) for n, b, o, d in _FP32]
    for name, read, default in table:
        if read is None:
            continue
        try:
            read()
        except Exception:  # not in this torch
            continue
        names.append(name)
        readers.append(read)
        defaults.append(default)
    _names, _readers, _defaults = tuple(names), tuple(readers), tuple(defaults)
    calls = ", ".join(f"r{i}()" for i in range(len(readers)))
    _read_all = eval(f"lambda: ({calls},)", {f"r{i}": r for i, r in enumerate(readers)})
    implicit.register_switches("torch", switches)
