"""``nn.Module``: class by code + state (``training``, parameters, all buffers, submodules, attributes).

Hook dicts are left out: they are keyed by global handle counters (a module
built later gets other keys for the same hooks). Nothing under a module comes
from the identity cache: BatchNorm updates its running statistics in the kernel
without bumping their version counter, and parameters are written through
``p.data`` — no cheap stamp proves a module unchanged, so it is rehashed, at
memory speed, on every call (docs/torch.md, "Identity caches").
"""
from __future__ import annotations

from typing import Any

import torch

from .. import hashing
from ..hashing import Encoder


def encode_module(enc: Encoder, m: Any) -> None:
    enc.untrusted += 1
    try:
        enc.encode_object(m)
    finally:
        enc.untrusted -= 1


def register() -> None:
    hashing.register_handler(torch.nn.Module, encode_module)
    hooks = {k for k in torch.nn.Module().__dict__ if "hook" in k}
    hashing.register_policy(torch.nn.Module, exclude=hooks)
