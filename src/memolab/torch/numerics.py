"""torch's global switches that change results, as a pseudo-argument of every key.

``torch.set_default_dtype(torch.float64)`` makes ``torch.randn(3)`` float64;
``torch.use_deterministic_algorithms(True)``, TF32 and the fp32 matmul precision,
reduced-precision reductions pick other kernels with other bits. The state a call
runs under counts the same way: ``with torch.autocast("cpu")`` makes a matmul
bfloat16 (which device types are enabled, the dtype of each — a bare
``torch.autocast(dt)`` entered in the body takes it — and the weight-cast cache);
``torch.no_grad()``/``inference_mode()`` change ``requires_grad``, ``grad_fn``,
inference tensors and the fast paths some modules take (``nn.MultiheadAttention``);
``torch.set_default_device("meta")``/``with torch.device(...)`` move every factory
call. None of them is an argument, so each joins the key (``memolab.inputs.implicit``) — but only while it
differs from torch's default: a process that never imported torch, or left every
switch alone, keys exactly as before. The defaults are torch's own for a plain
process (read from the registers below); an environment that changes one
(``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``) keys its calls apart from processes
without it, which is what it should do.

Cost: one C call per switch on every key once torch is imported (about 1.5 µs for
all of them, ``benchmarks/hit_overhead.py``; the call state adds about 0.5): torch
has no notification when a switch is set, and a stale switch would be a wrong result.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..errors import swallowed
from ..inputs import implicit

_C = torch._C


def _fp32(backend: str, op: str) -> Callable[[], Any]:
    return functools.partial(_C._get_fp32_precision_getter, backend, op)


def _autocast_enabled() -> tuple[tuple[str, str], ...]:
    """(device type, dtype) of each device type autocast is enabled for (one C call when none is:
    the common case)."""
    if not _C._is_any_autocast_enabled():
        return ()
    return tuple((dt, str(torch.get_autocast_dtype(dt))) for dt in _AUTOCAST_DEVICES if torch.is_autocast_enabled(dt))


def _default_device() -> str:
    """``torch.get_default_device()`` (5 µs) only when a torch function mode is active: a default
    device other than the CPU is a ``DeviceContext`` mode (``set_default_device``, ``with
    torch.device(...)``); the default tensor type's device (``set_default_tensor_type``) is C's."""
    if not _C._len_torch_function_stack():
        return str(_C._get_default_device())
    return str(torch.get_default_device())


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
#: autocast's device types, and the dtype each defaults to in a plain process
_AUTOCAST_DTYPES = {"cpu": torch.bfloat16, "cuda": torch.float16, "xpu": torch.float16, "mps": torch.float16,
                    "hpu": torch.bfloat16, "xla": torch.bfloat16, "ipu": torch.float16, "mtia": torch.float16,
                    "maia": torch.bfloat16, "privateuseone": torch.float16}
_AUTOCAST_DEVICES: tuple[str, ...] = ()
#: the state a call runs under (grad mode, autocast, default device): read like the switches above
_MODES: list[tuple[str, Callable[[], Any], Any]] = [
    ("grad_enabled", torch.is_grad_enabled, True),
    ("inference_mode", torch.is_inference_mode_enabled, False),
    ("autocast", _autocast_enabled, ()),
    ("autocast.cache_enabled", torch.is_autocast_cache_enabled, True),
    ("default_device", _default_device, "cpu"),
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
        swallowed("reading torch's numerics switches")
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
    except Exception as e:  # torch's getters raise many kinds: the kind goes into the key
        return f"<{type(e).__name__}>"


def _accelerator() -> str | None:
    try:
        acc = torch.accelerator.current_accelerator()
    except (AttributeError, RuntimeError):  # an older torch (no torch.accelerator): CUDA's, if any
        return "cuda" if torch.cuda.is_available() else None
    return None if acc is None else str(acc.type)


def _autocast_dtype(device: str) -> Callable[[], Any]:
    return functools.partial(torch.get_autocast_dtype, device)


def _call(i: int, read: Callable[[], Any]) -> str:
    """``read()`` as source: a partial of string arguments as a direct call (no partial to go through)."""
    if isinstance(read, functools.partial) and not read.keywords and all(type(a) is str for a in read.args):
        return f"r{i}({', '.join(map(repr, read.args))})"
    return f"r{i}()"


def register() -> None:
    global _names, _readers, _defaults, _read_all, _AUTOCAST_DEVICES
    names, readers, defaults = [], [], []
    supported = getattr(_C, "_autocast_supported_devices", None)
    _AUTOCAST_DEVICES = tuple(supported() if supported is not None else ("cpu", "cuda"))
    # The dtype a bare ``torch.autocast(dt)`` entered in the body takes, read (0.2 µs each) for
    # the device types whose tensors can exist here: the CPU and this process's accelerator. A
    # device type this table does not know (a newer torch): its dtype now is its default.
    acc = _accelerator()
    dtypes = [(f"autocast.{dt}.dtype", _autocast_dtype(dt), _AUTOCAST_DTYPES.get(dt) or _safe(_autocast_dtype(dt)))
              for dt in _AUTOCAST_DEVICES if dt == "cpu" or dt == acc]
    table = _SWITCHES + [(n, _fp32(b, o), d) for n, b, o, d in _FP32] + _MODES + dtypes
    for name, read, default in table:
        if read is None:
            continue
        try:
            read()
        except Exception:  # torch's getters, of any version: a missing one raises AttributeError, others RuntimeError
            swallowed(f"torch.numerics: the switch {name} (not in this torch)")
            continue
        names.append(name)
        readers.append(read)
        defaults.append(default)
    _names, _readers, _defaults = tuple(names), tuple(readers), tuple(defaults)
    calls = ", ".join(_call(i, r) for i, r in enumerate(readers))
    _read_all = eval(f"lambda: ({calls},)", {f"r{i}": getattr(r, "func", r) for i, r in enumerate(readers)})
    implicit.register_switches("torch", switches)
