"""Memoized functions and Ray tasks the Ray tests run on worker processes.

A module of its own (not the test file) so workers import it cheaply: a memo its module
exposes travels by reference (``MemoFunction.__reduce__``), so every worker calls the same
memo, with the same key, as the driver. Computations are counted with files in ``marks``
(the computing processes are the workers): ``done-K-PID-NONCE`` per computation.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import ray

from memolab import memo


@memo(ignore=["marks"])
def square(k: int, marks: str) -> dict:
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
