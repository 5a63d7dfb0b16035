"""``nn.Module``: class by code + state (``training``, parameters, all buffers, submodules, attributes).

Hook dicts are left out: they are keyed by global handle counters (a module
built later gets other keys for the same hooks). Its parameters and buffers come
from the identity cache like any tensor: only while their storage stays
copy-on-write, which every write ends — BatchNorm's kernel updating its running
statistics, a fused optimizer step, ``p.data.add_()`` — although none of those
moves a version counter (``tensors._stamp``; docs/torch.md, "Identity caches").
Its Python-level state (attributes, submodules, ``training``) is walked on every call.
"""
from __future__ import annotations

from typing import Any

import torch

from .. import hashing
from ..hashing import Encoder


def encode_module(enc: Encoder, m: Any) -> None:
    enc.encode_object(m)


def register() -> None:
    hashing.register_handler(torch.nn.Module, encode_module)
    hooks = {k for k in torch.nn.Module().__dict__ if "hook" in k}
    hashing.register_policy(torch.nn.Module, exclude=hooks)
