"""Tensorboard-like logging stored with each evaluation.

``memolab.log.scalar(...)`` and ``memolab.SummaryWriter`` append to an
in-memory queue on the caller's thread; a background thread writes the queue
into the store's SQLite index. Each memoized computation gets a *run* (see
``runs.py``) so its logs are tied to the evaluation it produces and survive as
long as the result does. The submodules are imported on first use so that
``import memolab`` does not pay for any of this.
"""
from __future__ import annotations
