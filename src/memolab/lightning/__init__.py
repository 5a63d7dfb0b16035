"""PyTorch Lightning, first class (docs/lightning.md).

* ``MemolabLogger``: a Lightning ``Logger`` that files ``self.log(...)`` metrics and
  ``save_hyperparameters()`` with the memoized evaluation being computed (else the
  process run). Importing it imports Lightning, so it is loaded on first use:
  ``from memolab.lightning import MemolabLogger``.
* ``keys``: how Lightning objects are keyed (registered through ``memolab/settings/hooks.py``
  the first time a Lightning type is hashed; importing it imports no Lightning module).
"""
from __future__ import annotations

from typing import Any

__all__ = ["MemolabLogger"]


def __getattr__(name: str) -> Any:
    # the hashing hook imports ``memolab.lightning.keys``, hence this package: it must not import Lightning
    if name == "MemolabLogger":
        from .logger import MemolabLogger

        return MemolabLogger
    raise AttributeError(f"module 'memolab.lightning' has no attribute {name!r}")
