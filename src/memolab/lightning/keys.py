"""How Lightning objects are keyed: by configuration and content, never by the run around them.

A ``Trainer`` fit with a module and a datamodule links itself into both
(``LightningModule._trainer``, ``LightningDataModule.trainer``), and a Trainer is
run-time state through and through: timers (``_last_val_time``), progress
counters, loops, callbacks' state, loggers. Reached from a key, it made a
datamodule a Trainer had used key apart in every process. So:

* a ``LightningModule`` is keyed as any ``nn.Module`` (class by code, parameters,
  buffers, submodules, attributes, ``hparams``) minus its links to a run
  (``MODULE_RUNTIME``); its device by type, as tensors are, so ranks on
  ``cuda:0`` and ``cuda:1`` agree;
* a ``LightningDataModule`` by its class, ``hparams`` and attributes (datasets by
  content) minus ``trainer``;
* a ``Trainer`` or a ``Fabric`` is refused with a ``HashError`` naming its path: a
  key made from part of its settings could serve a result computed under other
  callbacks, plugins or precision, and one made from all of its state would never
  hit. Build it inside the memoized function, from plain settings that are keyed.
* a Lightning ``Logger`` is left out of keys (it cannot change a result), as
  ``memolab.SummaryWriter`` is.

Registered for ``lightning`` (``lightning.pytorch``, ``lightning.fabric``) and for the
standalone ``pytorch_lightning`` / ``lightning_fabric`` packages: each family the
first time one of its types is hashed, so registering never imports Lightning.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from .. import hashing
from ..errors import HashError
from ..hashing import Encoder
from ..torch.modules import encode_module

#: a LightningModule's links to the Trainer/Fabric running it and state kept only while one runs
#: (the hook being run, an optimizer's toggled ``requires_grad``, ``id()``s of its metrics, the
#: compile context, the device mesh); ``_device`` is written by its type instead (with the index, the
#: ranks of one job would key apart)
MODULE_RUNTIME = frozenset({
    "_trainer", "_fabric", "_fabric_optimizers", "_current_fx_name", "_param_requires_grad_state",
    "_metric_attributes", "_compiler_ctx", "_device_mesh", "_device",
})

#: a LightningDataModule's link to the Trainer that last used it
DATAMODULE_RUNTIME = frozenset({"trainer"})

#: HyperparametersMixin (modules and datamodules): whether the hparams go to the loggers
HPARAMS_RUNTIME = frozenset({"_log_hyperparams"})

_done: set[str] = set()


def encode_lightning_module(enc: Encoder, m: Any) -> None:
    encode_module(enc, m)
    device = getattr(m, "_device", None)
    enc.write_str(getattr(device, "type", "") or "")


def refuse(what: str) -> Callable[[Encoder, Any], None]:
    def handler(enc: Encoder, obj: Any) -> None:
        raise HashError(
            f"a Lightning {what} is not part of a key: it carries run-time state (timers, progress "
            f"counters, callbacks' state, loggers) and settings no key could list in full; build the "
            f"{what} inside the memoized function from plain settings (they are keyed), or leave the "
            f"argument out with @memo(ignore=[...]) (docs/lightning.md)", "", obj)
    return handler


def _pytorch(name: str) -> None:
    pl = sys.modules.get(name)
    if pl is None or name in _done:
        return
    _done.add(name)
    hashing.register_handler(pl.LightningModule, encode_lightning_module)
    hashing.register_policy(pl.LightningModule, exclude=MODULE_RUNTIME)
    hashing.register_policy(pl.LightningDataModule, exclude=DATAMODULE_RUNTIME)
    hashing.register_policy(sys.modules[f"{name}.core.mixins.hparams_mixin"].HyperparametersMixin,
                            exclude=HPARAMS_RUNTIME)
    hashing.register_handler(pl.Trainer, refuse("Trainer"))
    hashing.register_opaque(sys.modules[f"{name}.loggers.logger"].Logger)


def _fabric(name: str) -> None:
    lf = sys.modules.get(name)
    if lf is None or name in _done:
        return
    _done.add(name)
    hashing.register_handler(lf.Fabric, refuse("Fabric"))
    hashing.register_opaque(sys.modules[f"{name}.loggers.logger"].Logger)


_FAMILIES: dict[str, dict[str, Callable[[str], None]]] = {
    "lightning": {"lightning.fabric": _fabric, "lightning.pytorch": _pytorch},
    "pytorch_lightning": {"pytorch_lightning": _pytorch},
    "lightning_fabric": {"lightning_fabric": _fabric},
}


def _register(top: str) -> None:
    for name, fn in _FAMILIES[top].items():
        if name in sys.modules:
            fn(name)
        else:  # not imported yet: register when one of its types is first hashed
            hashing.register_lazy(name, partial(fn, name))


def register() -> None:
    """The ``lightning`` hashing hook (``memolab/settings/hooks.py``)."""
    _register("lightning")


def register_pytorch_lightning() -> None:
    _register("pytorch_lightning")


def register_lightning_fabric() -> None:
    _register("lightning_fabric")
