"""Where memolab's third-party integrations register: one table, by dotted path.

The core (``hashing``, ``pickling``) never imports an integration. Each entry
names, as ``"module:function"``, what to run the first time a type from a
third-party module is hashed or pickled; only then is the integration imported
(the way ``dask.tokenize`` registers pandas and numpy lazily). So ``import
memolab`` imports neither numpy nor torch, and the integrations depend on the
core, never the other way round.

Keys are the third-party module: a top-level package (``"numpy"``) or, for
hashing, a dotted prefix (``"torch.optim"``). Hashing hooks are called with no
arguments; pickling hooks with ``register_reducer``. An integration may add
further hooks of its own when it runs (torch adds ``torch.optim``).
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Dict

LAZY_HOOKS: Dict[str, Dict[str, str]] = {
    # run before the first type with a class from the module in its MRO is hashed
    "hashing": {
        "numpy": "memolab.hashing.arrays:register",
        "torch": "memolab.torch.registry:register",
        "torchdata": "memolab.torch.iteration:register_hashing",  # torchdata.nodes loaders and nodes
        "pyarrow": "memolab.arrow:register_arrow",  # tables, batches and arrays by content
        "datasets": "memolab.arrow:register_datasets",  # Hugging Face datasets' tables by content
    },
    # run the first time an object of a type from the top-level module is pickled
    "pickling": {
        "numpy": "memolab.pickling.arrays:register",
        # dataclasses compares its sentinels by identity: copies made by unpickling would drop fields
        "dataclasses": "memolab.pickling:register_dataclasses",
        "torch": "memolab.torch.pickling:register",
        # a StatefulDataLoader or torchdata.nodes loader stopped mid-epoch keeps its position
        "torchdata": "memolab.torch.iteration:register_pickling",
        # an Accelerate-prepared loader stopped mid-epoch (its GradientState is process-wide)
        "accelerate": "memolab.torch.iteration:register_accelerate_pickling",
    },
}


def run(target: str, *args: Any) -> None:
    """Import ``target`` (``"package.module:function"``) and call it with ``args``."""
    module, _, name = target.partition(":")
    getattr(importlib.import_module(module), name)(*args)


def hook(target: str, *args: Any) -> Callable[[], None]:
    """A registration to run later: ``run(target, *args)`` when called."""
    return functools.partial(run, target, *args)
