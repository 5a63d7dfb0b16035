"""Memoized functions the Dask tests run on worker processes.

A module of its own (not the test file) so worker processes import it cheaply:
a memo whose module exposes it is pickled by reference (``MemoFunction.__reduce__``),
so every worker calls the same memo, with the same key, as the client.

Computations are counted with files in ``marks`` (not in-memory counters: the
computing processes are the workers, and one of them may be killed):
``start-K-PID-NONCE`` when a computation begins, ``done-K-PID-NONCE`` when it returns
(``sleeping-…`` when it has logged and flushed, and sleeps if asked to).
"""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import memolab
from memolab import memo


@memo(ignore=["marks", "sleep"])
def square(k: int, marks: str, sleep: float = 0.0) -> dict:
    tag = f"{k}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    Path(marks, f"start-{tag}").touch()
    for step in range(3):
        memolab.log.scalar("loss", 1.0 / (k + 1 + step), step=step)
    memolab.log.text("worker", f"pid {os.getpid()}", step=0)
    if sleep:
        memolab.log.flush()  # what was logged before a SIGKILL survives it
        Path(marks, f"sleeping-{tag}").touch()  # the test kills a process once this is there
        time.sleep(sleep)
    Path(marks, f"done-{tag}").touch()
    return {"k": k, "square": k * k, "pid": os.getpid()}


def marks_of(marks: str, kind: str) -> dict:
    """{k: [pid, ...]} of the ``kind`` ('start', 'sleeping' or 'done') files in ``marks``."""
    out: dict = {}
    for p in Path(marks).glob(f"{kind}-*"):
        _, k, pid, _ = p.name.split("-")
        out.setdefault(int(k), []).append(int(pid))
    return out


try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:  # the tests that need it are skipped
    WorkerPlugin = object  # type: ignore[assignment,misc]


class Environ(WorkerPlugin):  # type: ignore[misc,valid-type]
    """Set environment variables in every worker process (the S3 server's endpoint and
    dummy credentials, which exist only once the test's fixtures ran)."""

    name = "test-environ"

    def __init__(self, env: dict) -> None:
        self.env = dict(env)

    def setup(self, worker) -> None:
        os.environ.update(self.env)
