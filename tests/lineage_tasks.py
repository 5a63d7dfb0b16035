"""Memoized pipeline steps the Dask lineage tests run on worker processes (a module of its own:
workers import it, so every worker calls the same memo, with the same key, as the client)."""
from __future__ import annotations

import numpy as np

from memolab import memo


@memo
def prepare(n: int) -> dict:
    x = np.arange(n, dtype=np.float64)
    return {"X": x, "y": x % 2}


@memo
def train(ds: dict, lr: float = 0.1) -> dict:
    return {"w": np.full(4, float((ds["X"] * ds["y"]).sum()) * lr)}
