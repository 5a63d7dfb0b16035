"""PyTorch support, imported only once torch itself has been imported.

Nothing outside this subpackage imports torch: ``hashing`` and ``pickling``
register lazy hooks keyed on the ``torch`` top-level module name, and those
hooks import the modules of this subpackage.
"""
# One module per concept: ``registry`` (what registers when: torch, torch.optim,
# torchdata, accelerate), ``tensors`` (tensors, dtypes, devices, sizes; the
# identity-cache stamp), ``modules`` (nn.Module), ``optim`` (optimizers, state by
# parameter position), ``rng`` (torch.Generator and the RNG policy below),
# ``data`` (datasets, samplers, loaders: their key is their configuration),
# ``pickling`` (storing tensors and storages). This module imports nothing from
# torch, so ``configure`` can be called before torch is imported. The rule for
# every object is in docs/torch.md.
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["configure", "settings", "resumable", "Resumable"]

from .policy import SETTINGS as _settings

_RNG_MODES = ("seed", "exact")


def configure(*, rng: str | None = None) -> dict[str, Any]:
    """Set the torch hashing policy; returns the settings now in force.

    ``rng="seed"`` (default): a data loader's, sampler's or dataset's key is its
    configuration, so a seeded generator inside it counts by its seed
    (``initial_seed()``) and the key stays the same from one epoch to the next.
    ``rng="exact"``: such a generator counts by its running state, so the key
    changes whenever it has advanced (after every epoch of a shuffling loader).
    A generator passed on its own always counts by its running state.

    Not ``memolab.configure``: torch's hashing policy lives with torch's handlers, which the
    core never imports (docs/settings.md, "Three configure()s").
    """
    if rng is not None:
        if rng not in _RNG_MODES:
            raise ValueError(f"rng must be one of {_RNG_MODES}, not {rng!r}")
        _settings["rng"] = rng
    return dict(_settings)


def settings() -> dict[str, Any]:
    return dict(_settings)


if TYPE_CHECKING:  # loaded on first use by __getattr__
    from .iteration import Resumable as Resumable, resumable as resumable


def __getattr__(name: str) -> Any:
    # ``memolab.torch.resumable``: imported on first use, like the rest of this package
    if name in ("resumable", "Resumable"):
        from . import iteration

        return getattr(iteration, name)
    raise AttributeError(f"module 'memolab.torch' has no attribute {name!r}")
