"""Memoized functions and Ray tasks the Ray tests run on worker processes.

A module of its own (not the test file) so workers import it cheaply: a memo its module
exposes travels by reference (``MemoFunction.__reduce__``), so every worker calls the same
memo, with the same key, as the driver. Computations are counted with files in ``marks``
(the computing processes are the workers): ``done-K-PID-NONCE`` per computation.
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import ray

from memolab import memo


@memo(ignore=["marks"])
def square(k: int, marks: str) -> dict:
    # longer than MEMOLAB_LEASE_FREE_BELOW (1 ms): every miss takes the key's lease (a quicker
    # function may be computed by two workers at once, by design: docs/cache-rules.md)
    time.sleep(0.02)
    Path(marks, f"done-{k}-{os.getpid()}-{uuid.uuid4().hex[:8]}").touch()
    return {"k": k, "square": k * k}


@ray.remote
def task(k: int, marks: str) -> dict:
    return {**square(k, marks), "pid": os.getpid()}


def computed(marks: str) -> dict:
    """{k: [pid, ...]} of the computations counted in ``marks``."""
    out: dict = {}
    for p in Path(marks).glob("done-*"):
        _, k, pid, _ = p.name.split("-")
        out.setdefault(int(k), []).append(int(pid))
    return out
