"""``nn.Module``: class by code + state (``training``, parameters, all buffers, submodules,
attributes) + the hooks it runs.

Hooks change what a module computes without touching a parameter (a steering vector
added by a forward hook, a feature ablated by a pre-hook, an adapter, a quantization
stub), so a module with hooks counts by them: each hook dict by its name, its hooks in
the order they run, each hook by what it runs (a function by its code digest, closure
values and defaults; a bound method by its function and object; a hook object by its
class code and state) with the flags that change how it is called (``with_kwargs``,
``always_call``, a full backward hook). The handles' ids, global counters that differ
from process to process, are left out. A module without hooks keys byte for byte as it
did before hooks were keyed. The process-wide hooks of
``torch.nn.modules.module.register_module_forward_hook`` and its kin join every key as a
pseudo-argument while any is registered (``global_hooks``).

Its parameters and buffers come from the identity cache like any tensor: only while their
storage stays copy-on-write, which every write ends — BatchNorm's kernel updating its
running statistics, a fused optimizer step, ``p.data.add_()`` — although none of those
moves a version counter (``tensors._stamp``; docs/torch.md, "Identity caches").
Its Python-level state (attributes, submodules, ``training``, hooks) is walked on every call.

Two kinds of module pickle cannot save count by what they compute: a module with
``torch.nn.utils.parametrize`` parametrizations (its original class, by code, and its
attributes, the parametrization modules among them) and a TorchScript module or function
(``torch.jit.script``/``trace``): the archive ``torch.jit.save`` writes (its compiled code,
constants, attributes and tensors), less the per-save random id and the source positions.
"""
from __future__ import annotations

import io
import operator
import re
import zipfile
from typing import Any

import torch

from .. import hashing
from ..hashing import Encoder
from ..inputs import implicit

#: lead byte of an integration's own rule, then the kind's name (docs/hashing.md)
LEAD = b"\x1c"

#: (hook dict, the flag dicts keyed by the same handle ids), filled by ``register``
_TABLE: tuple[tuple[str, tuple[str, ...]], ...] = ()
#: the same for the process-wide hooks of ``torch.nn.modules.module``
_GLOBAL_TABLE: tuple[tuple[str, tuple[str, ...]], ...] = ()
_GLOBALS: dict[str, Any] = {}
_global_dicts: Any = tuple
_FLAG_SUFFIXES = ("_with_kwargs", "_always_called")


def _table(names: list[str], sample: dict[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    dicts = sorted(n for n in names if isinstance(sample.get(n), dict) and not n.endswith(_FLAG_SUFFIXES))
    return tuple((n, tuple(sorted(f for f in names if f.startswith(n) and f.endswith(_FLAG_SUFFIXES)
                                  and f[len(n):] in _FLAG_SUFFIXES))) for n in dicts)


def _hooks(d: dict[str, Any], table: tuple[tuple[str, tuple[str, ...]], ...],
           full_backward: str) -> list[tuple[str, list[tuple[Any, tuple[bool, ...]]]]] | None:
    """(hook dict name, [(hook, its flags), ...]) of every non-empty hook dict in ``d``; None if none."""
    out = None
    for name, flag_names in table:
        hooks = d.get(name)
        if not hooks:
            continue
        flags = [d.get(f) or {} for f in flag_names]
        entries = [(h, tuple(k in f for f in flags)) for k, h in list(hooks.items())]
        if out is None:
            out = []
        out.append((name, entries))
    if out is not None and any(n.startswith(("_backward", "_global_backward")) for n, _ in out):
        out.append((full_backward, [(d.get(full_backward), ())]))
    return out


def encode_module(enc: Encoder, m: Any, exclude: frozenset[str] = frozenset()) -> None:
    """A module by the generic rule (less ``exclude``, attributes an integration knows are derived)
    and its hooks; the handler of every ``nn.Module``, and what integrations call for theirs."""
    if type(m).__module__ == "torch.nn.utils.parametrize" and "parametrizations" in (m.__dict__.get("_modules") or ()):
        encode_parametrized(enc, m)
        return
    d = m.__dict__
    hooks = _hooks(d, _TABLE, "_is_full_backward_hook")
    if hooks is None or enc.seen(m):
        enc.encode_object(m, exclude)  # (a second visit: a back-reference, hooks and all)
        return
    enc.encode_object(m, exclude)
    enc.write(LEAD)
    enc.write_str("torch.nn.Module hooks")
    _encode_hooks(enc, hooks)


def _encode_hooks(enc: Encoder, hooks: list[tuple[str, list[tuple[Any, tuple[bool, ...]]]]]) -> None:
    enc.write_uint(len(hooks))
    for name, entries in hooks:
        enc.write_str(name)
        enc.write_uint(len(entries))
        for i, (hook, flags) in enumerate(entries):
            enc.encode_child(hook, f".{name}[{i}]")
            enc.write(bytes(flags))


def encode_parametrized(enc: Encoder, m: Any) -> None:
    """A module with parametrizations: pickle refuses it (its class is made on the fly); it counts
    as its original class (by code) and its attributes (the ``parametrizations`` modules, which
    hold the original tensors and the user's parametrization modules), hooks as any module's."""
    if enc.memoize(m):
        return
    t = type(m)
    original = t.__bases__[0] if t.__module__ == "torch.nn.utils.parametrize" and t.__bases__ else t
    enc.write(LEAD)
    enc.write_str("torch.nn.utils.parametrize")
    enc.encode_class(original)
    excluded = hashing.excluded_attributes(t)
    state = {k: v for k, v in m.__dict__.items() if k not in excluded}
    enc.encode_child(state, "")
    hooks = _hooks(m.__dict__, _TABLE, "_is_full_backward_hook")
    enc.write(b"-" if hooks is None else b"+")
    if hooks is not None:
        _encode_hooks(enc, hooks)


def _archive_digest_parts(buf: bytes) -> list[tuple[str, bytes]]:
    z = zipfile.ZipFile(io.BytesIO(buf))
    out = []
    for name in sorted(z.namelist()):
        # a random id per save (``.data/serialization_id``) and source positions (``.debug_pkl``)
        # are not what it computes
        if name.endswith(("/serialization_id", ".debug_pkl")):
            continue
        data = z.read(name)
        if name.endswith(".py") and "/code/" in name:
            data = _canonical_code(data)
        out.append((name.partition("/")[2], data))
    return out


_DECLARATION = re.compile(rb"^  [A-Za-z_]\w* : ")


def _canonical_code(code: bytes) -> bytes:
    """TorchScript's code text with each run of class-level declarations (``in_features :
    Final[int] = 3``) sorted: torch writes them in the order of a set, which Python salts per
    process; they declare, so their order means nothing (the methods keep theirs)."""
    lines = code.split(b"\n")
    out: list[bytes] = []
    run: list[bytes] = []
    for line in lines:
        if _DECLARATION.match(line):
            run.append(line)
            continue
        out.extend(sorted(run))
        run = []
        out.append(line)
    out.extend(sorted(run))
    return b"\n".join(out)


def encode_scripted(enc: Encoder, m: Any) -> None:
    """A TorchScript module or function: the archive ``torch.jit.save`` writes (compiled code,
    constants, attributes, parameters and buffers), less its random id and source positions."""
    if enc.memoize(m):
        return
    target = getattr(m, "_c", m)
    save = getattr(target, "save_to_buffer", None)
    if save is None:  # a ``torch.jit.ScriptModule`` subclass not compiled yet: a plain module
        encode_module(enc, m)
        return
    enc.write(LEAD)
    enc.write_str("torch.jit")
    for name, data in _archive_digest_parts(save()):
        enc.write_str(name)
        enc.write_uint(len(data))
        enc.write_buffer(memoryview(data))


def global_hooks() -> dict[str, Any] | None:
    """The process-wide module hooks (``register_module_forward_hook`` and its kin) while any is
    registered, as a pseudo-argument of every key; None (the common case) while none is."""
    g = _GLOBALS
    if not any(_global_dicts(g)):  # one C call for all of them: this runs on every key
        return None
    hooks = _hooks(g, _GLOBAL_TABLE, "_global_is_full_backward_hook")
    if hooks is None:
        return None
    return {name: [(h, flags) for h, flags in entries] for name, entries in hooks}


def register_switches() -> None:
    """Run once torch's module machinery is imported (``hooks.LAZY_HOOKS["switches"]``)."""
    _fill_tables()
    implicit.register_switches("torch.nn global hooks", global_hooks)


def _fill_tables() -> None:
    global _TABLE, _GLOBAL_TABLE, _GLOBALS, _global_dicts
    sample = torch.nn.Module().__dict__
    _TABLE = _table([k for k in sample if "hook" in k], sample)
    g = _GLOBALS = vars(torch.nn.modules.module)
    names = [k for k in g if k.startswith("_global_") and "hook" in k]
    _GLOBAL_TABLE = _table(names, g)
    # the hook dicts read by name on every call (torch mutates them in place; a rebinding is seen too)
    dict_names = [n for n, _ in _GLOBAL_TABLE]
    _global_dicts = operator.itemgetter(*dict_names) if len(dict_names) > 1 else lambda g: [g[n] for n in dict_names]


def register() -> None:
    _fill_tables()
    hashing.register_handler(torch.nn.Module, encode_module)
    hashing.register_handler(torch.jit.ScriptModule, encode_scripted)
    hashing.register_handler(torch.jit.ScriptFunction, encode_scripted)
    hooks = {k for k in torch.nn.Module().__dict__ if "hook" in k}
    hashing.register_policy(torch.nn.Module, exclude=hooks)


__all__ = ["encode_module", "global_hooks", "register", "register_switches"]
