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

from .. import globalrng, hashing
from ..hashing import Encoder
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


# -- the process-wide generators (``memolab.globalrng``) ---------------------------------------


def _state_token(state: Any) -> bytes:
    from .tensors import raw_bytes

    return bytes(raw_bytes(state.contiguous()))


def _state_digest(state: Any) -> str:
    return xxhash.xxh3_128_hexdigest(_state_token(state))


def _cuda_state() -> Any:
    cuda = torch.cuda
    get_all = globalrng.original(cuda.get_rng_state_all)
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
        globalrng.original(torch.cuda.set_rng_state_all)(state)


def register_global() -> None:
    """torch's default CPU generator, and CUDA's (by its queued seeds until it is
    initialised), watched by ``memolab.globalrng``; the seed functions users call wrapped."""
    globalrng.register(globalrng.Generator("torch", globalrng.original(torch.get_rng_state),
                                           globalrng.original(torch.set_rng_state), _state_token, _state_digest,
                                           "torch"))
    from . import loaderseed

    loaderseed.register()  # a loader's base seed without workers: no draw
    seeds_all = ("torch", "torch.cuda")  # ``torch.manual_seed`` and ``torch.seed`` seed every device
    for module in (torch, torch.random):
        globalrng.patch(module, ["manual_seed"], *seeds_all)
        globalrng.patch(module, ["seed"], *seeds_all, entropy=globalrng.always)
        globalrng.patch(module, ["set_rng_state"], "torch")
    if torch.cuda.is_available():
        globalrng.register(globalrng.Generator("torch.cuda", _cuda_state, _cuda_set, _cuda_token, _cuda_digest,
                                               "torch"))
        for module in (torch.cuda, torch.cuda.random):
            globalrng.patch(module, ["manual_seed", "manual_seed_all", "set_rng_state", "set_rng_state_all"],
                            "torch.cuda")
            globalrng.patch(module, ["seed", "seed_all"], "torch.cuda", entropy=globalrng.always)
