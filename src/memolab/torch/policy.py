"""The torch hashing policy in force (``memolab.torch.configure``), in a module of its own:
the handlers read it, and the package's ``__init__`` sets it, without importing each other."""
from typing import Any

#: ``rng``: "seed" (default) — a generator held by a data object (loader,
#: sampler, dataset) counts by its seed; "exact" — by its running state.
SETTINGS: dict[str, Any] = {"rng": "seed"}
