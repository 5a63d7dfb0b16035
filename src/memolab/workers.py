"""Settings for Dask workers: ``client.register_plugin(memolab.workers.Configure(...))``.

A worker process is a fresh interpreter: it reads ``MEMOLAB_*`` from its own
environment, and knows nothing of a ``memolab.configure(...)`` made on the
client. ``Configure`` carries such a call to every worker, including the ones
that join (or are restarted by their nanny) later. String values may name the
worker, ``"{worker}"``, e.g. one local store per worker process:

    client.register_plugin(memolab.workers.Configure(store="/scratch/memo-{worker}",
                                                     remote="postgresql://db/memolab",
                                                     remote_blobs="s3://bucket/memolab"))

Importing this module imports ``distributed``; ``import memolab`` does not.
"""
from __future__ import annotations

import re
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["Configure"]


class Configure(WorkerPlugin):
    """Call ``memolab.configure(**changes)`` on every worker (``{worker}`` in a string: the worker's name)."""

    name = "memolab-configure"

    def __init__(self, **changes: Any) -> None:
        self.changes: dict[str, Any] = changes

    def setup(self, worker: Any) -> None:
        from .settings import config

        who = re.sub(r"[^A-Za-z0-9_.-]", "_", str(worker.name))  # a name fit for a path
        config.configure(**{k: v.replace("{worker}", who) if isinstance(v, str) else v
                            for k, v in self.changes.items()})
