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

from .. import hashing
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
