"""What registers when: called by ``memolab.hashing`` the first time a torch type is hashed.

Only what ``import torch`` has already imported is touched here. Families that
live in modules torch does not import by itself, or that are costly to set
up, register on their own first use through ``hashing.register_lazy`` with a
dotted prefix: optimizers (``torch.optim``), torchdata's loaders, Accelerate's.
"""
from __future__ import annotations

from .. import hashing


def register() -> None:
    from . import data, modules, rng, tensors

    tensors.register()
    modules.register()
    rng.register()
    data.register()
    hashing.register_lazy("torch.optim", _optim)
    hashing.register_lazy("torchdata.stateful_dataloader", data.register_torchdata)
    hashing.register_lazy("accelerate.data_loader", data.register_accelerate)


def _optim() -> None:
    from . import optim

    optim.register()
