"""``torch.Generator``: by running state, or by seed inside a data object.

A generator passed on its own counts by its running state (``get_state()``): a
function drawing from it sees different numbers once it has advanced, so the
key must change. A generator held by a data object (loader, sampler, dataset:
``Encoder.config_only``) counts by device + ``initial_seed()`` under the default
policy, because that object's key is its configuration (docs/torch.md);
``memolab.torch.configure(rng="exact")`` hashes the running state there too.
"""
from __future__ import annotations

import struct
from typing import Any

import torch
import xxhash

from .. import hashing
from ..errors import swallowed
from ..hashing import Encoder
from ..inputs import globalrng, rngwrap
from .policy import SETTINGS

_pack_Q = struct.Struct("<Q").pack


def encode_generator(enc: Encoder, g: Any) -> None:
    if enc.config_only and SETTINGS["rng"] == "seed":
        # one write, same bytes as write(b"\x10g"), write_str(device), write_uint(seed)
        dev = str(g.device).encode()
        enc.write(b"\x10g" + _pack_Q(len(dev)) + dev + _pack_Q(g.initial_seed()))
        return
    enc.write(b"\x10G")
    enc.write_str(str(g.device))
    state = g.get_state()
    enc.write_uint(state.numel())
    enc.write(state.numpy().tobytes())


def register() -> None:
    hashing.register_handler(torch.Generator, encode_generator)


# -- the process-wide generators (``memolab.inputs.globalrng``) ---------------------------------------


def _state_token(state: Any) -> bytes:
    from .tensors import raw_bytes

    return bytes(raw_bytes(state.contiguous()))


def _state_digest(state: Any) -> str:
    return xxhash.xxh3_128_hexdigest(_state_token(state))


def _cuda_state() -> Any:
    cuda = torch.cuda
    get_all = rngwrap.original(cuda.get_rng_state_all)
    if not cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch's stubs lag its API
        # Not initialised yet: the states CUDA will start from are the seeds queued for
        # it (``torch.manual_seed`` queues its seed), else torch's default seed.
        tracker = getattr(cuda, "_lazy_seed_tracker", None)
        calls = tracker.get_calls() if tracker is not None and hasattr(tracker, "get_calls") else None
        return ("uninitialised", torch.initial_seed(), repr(calls))
    return get_all()


def _cuda_token(state: Any) -> Any:
    return state if isinstance(state, tuple) else tuple(_state_token(s) for s in state)


def _cuda_digest(state: Any) -> str:
    return xxhash.xxh3_128_hexdigest(repr(_cuda_token(state)).encode())


def _cuda_set(state: Any) -> None:
    if not isinstance(state, tuple):
        rngwrap.original(torch.cuda.set_rng_state_all)(state)


# -- was torch seeded before memolab wrapped its seed functions? ---------------------------
#
# ``import memolab`` wraps nothing; a torch imported between it and the first memoized
# computation may have been seeded there, by a function memolab had not wrapped yet. torch
# keeps a record of its own: ``torch.manual_seed`` and ``torch.seed`` queue their seed for
# CUDA's generators in ``torch.cuda._lazy_seed_tracker`` (the latest ``manual_seed_all``
# and ``manual_seed``, each with the stack that made it) until CUDA is initialised, also in
# a build without CUDA. The CPU generator's state comes from the OS when torch was imported
# after memolab, CUDA was not initialised, and that queue is empty, or holds only the
# seed of a ``torch.seed()`` (from the OS) that is still the CPU generator's seed. Two ways
# around the queue remain, both seen by the seed itself: ``torch.default_generator
# .manual_seed(s)`` and ``torch.set_rng_state(st)`` make the generator's seed ``s`` (the
# one inside ``st``); the OS's seeds have 64 bits, so a seed below 2**32 counts as the
# program's. These are torch internals: ``_queue_works`` tests them at first use.

#: the smallest seed taken for one the OS drew (below: one a program chose)
_OS_SEED_FLOOR = 2 ** 32
_queue_checked: bool | None = None


def _cuda_initialised() -> bool:
    return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]  # torch's stubs lag its API


def _queue() -> Any:
    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    return getattr(tracker, "call_order", None)


def _queue_works() -> bool:
    """Self-test (once): ``torch.manual_seed`` and ``torch.seed`` queue their seed with their
    stack as ``_os_seeded`` reads it. Run on a queue of its own, the generator's state put
    back after (CUDA is not initialised, no other device is there: nothing else is seeded). It
    runs once, when torch's generator is registered; a seed another thread queues in those
    microseconds would go to the test's queue."""
    global _queue_checked
    if _queue_checked is None:
        _queue_checked = _run_queue_test()
    return _queue_checked


def seed_queue_works() -> bool:
    """``_queue_works``'s self-test, run afresh (``make selftest``)."""
    return _run_queue_test()


def _run_queue_test() -> bool:
    import torch.cuda

    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    if tracker is None or _cuda_initialised() or not isinstance(getattr(tracker, "call_order", None), list):
        return False
    if _other_devices():  # their generators would be seeded for good: no test, no proof
        return False
    cpu = torch.default_generator
    state, fresh = cpu.get_state(), type(tracker)()
    torch.cuda._lazy_seed_tracker = fresh
    try:
        seed_fn = rngwrap.original(torch.random.seed)
        rngwrap.original(torch.random.manual_seed)(12345)
        after_manual = _seed_call(fresh.call_order)
        got = seed_fn()
        after_seed = _seed_call(fresh.call_order)
        return after_manual == ("other", 12345) and after_seed == ("seed", got)
    finally:
        torch.cuda._lazy_seed_tracker = tracker
        cpu.set_state(state)


def _other_devices() -> bool:
    """Would ``torch.manual_seed`` seed a generator other than the CPU's and CUDA's queue (MPS,
    XPU, a custom backend)?"""
    try:
        mps = torch.backends.mps.is_available()
        xpu = hasattr(torch, "xpu") and torch.xpu.is_available()
        custom = torch._C._get_privateuse1_backend_name() != "privateuseone"
        return bool(mps or xpu or custom)
    except Exception:  # torch's backends and private _C API, of any version
        swallowed("torch.rng: _other_devices")
        return True


def _seed_call(order: Any) -> tuple[str, Any] | None:
    """The queue's only call, a ``manual_seed_all``, as ("seed", its seed) if ``torch.seed()``
    made it, else ("other", its seed); None if the queue holds anything else."""
    calls = [c for c in order if c is not None]
    if len(calls) != 1:
        return None
    cb, stack = calls[0]
    cells = dict(zip(cb.__code__.co_freevars, (c.cell_contents for c in cb.__closure__ or ()), strict=True))
    heads = [entry.lstrip().splitlines()[0] if entry.strip() else "" for entry in stack]
    for i, head in enumerate(heads):
        if head.endswith("in manual_seed_all") and i > 0:
            caller = heads[i - 1].replace("\\", "/")
            by_seed = caller.endswith("in seed") and "torch/random.py" in caller
            return ("seed" if by_seed else "other"), cells.get("seed")
    return None


def _os_seeded() -> bool:
    """Does the CPU generator's state provably come from the OS (see above)?"""
    from ..settings import hooks

    if not hooks.imported_after_memolab("torch") or _cuda_initialised():
        return False
    order = _queue()
    if order is None or not _queue_works():
        return False
    seed = torch.initial_seed()
    if seed < _OS_SEED_FLOOR:
        return False
    if not any(c is not None for c in order):
        return True
    call = _seed_call(order)
    return call is not None and call == ("seed", seed)


def _evidence() -> tuple[Any, ...] | None:
    """What any seed or set of torch's generators changes (``Generator.evidence``)."""
    order = _queue()
    if order is None or _cuda_initialised():
        return None
    return (torch.initial_seed(), *order)


def register_global() -> None:
    """torch's default CPU generator, and CUDA's (by its queued seeds until it is
    initialised), watched by ``memolab.inputs.globalrng``; the seed functions users call wrapped
    (``memolab.inputs.rngwrap``)."""
    globalrng.register(globalrng.Generator("torch", rngwrap.original(torch.get_rng_state),
                                           rngwrap.original(torch.set_rng_state), _state_token, _state_digest,
                                           "torch", proof=_os_seeded, evidence=_evidence))
    from . import loaderseed

    loaderseed.register()  # a loader's base seed without workers: no draw
    seeds_all = ("torch", "torch.cuda")  # ``torch.manual_seed`` and ``torch.seed`` seed every device
    for module in (torch, torch.random):
        rngwrap.patch(module, ["manual_seed"], *seeds_all)
        rngwrap.patch(module, ["seed"], *seeds_all, entropy=rngwrap.always)
        rngwrap.patch(module, ["set_rng_state"], "torch")
    if torch.cuda.is_available():
        globalrng.register(globalrng.Generator("torch.cuda", _cuda_state, _cuda_set, _cuda_token, _cuda_digest,
                                               "torch", proof=_os_seeded, evidence=_evidence))
        for module in (torch.cuda, torch.cuda.random):
            rngwrap.patch(module, ["manual_seed", "manual_seed_all", "set_rng_state", "set_rng_state_all"],
                          "torch.cuda")
            rngwrap.patch(module, ["seed", "seed_all"], "torch.cuda", entropy=rngwrap.always)
