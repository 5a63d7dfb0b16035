"""The tail of what a memoized computation prints, kept for its run in case it fails.

While at least one memoized computation runs, ``sys.stdout`` and ``sys.stderr`` are
wrapped in a ``Tee``: every write goes to the stream it wraps first, unchanged, and is
also appended to the bounded ``Tail`` of the run current in the writing context (a
``ContextVar`` lookup, so nested calls, asyncio tasks and threads keep theirs apart; a
thread started without copying the context is not captured). Only a failed or
interrupted run stores its tail; a successful one drops it.

Python-level only: output written by C code straight to file descriptors 1 and 2, and
by handlers that kept a reference to the original stream before the computation began
(a ``logging.StreamHandler`` made at import time), is not captured.

This module imports nothing of memolab's: ``runs`` hands it the function that finds the
current run's tail.
"""
from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import swallowed

LIMIT = 16_000  # characters of output kept per run (the last ones)


class Tail:
    """The last ``LIMIT`` characters written, in chunks (appending is O(1), trimming amortised)."""

    __slots__ = ("chunks", "size")

    def __init__(self) -> None:
        self.chunks: deque = deque()
        self.size = 0

    def add(self, s: str) -> None:
        if not s:
            return
        if len(s) > LIMIT:
            s = s[-LIMIT:]
        self.chunks.append(s)
        self.size += len(s)
        while self.size - len(self.chunks[0]) >= LIMIT:
            self.size -= len(self.chunks.popleft())

    def text(self) -> str | None:
        if not self.chunks:
            return None
        s = "".join(self.chunks)
        return s[-LIMIT:] if len(s) > LIMIT else s


class Tee:
    """A text stream that forwards everything to ``inner`` and copies writes to the current run's tail."""

    def __init__(self, inner: Any, tail_of: Callable[[], Tail | None]) -> None:
        self._inner = inner
        self._tail_of = tail_of

    def write(self, s: str) -> int:
        n = self._inner.write(s)
        try:
            t = self._tail_of()
            if t is not None and isinstance(s, str):
                t.add(s)
        except Exception:  # inside the user's print: capturing is best effort, it must never break the print
            swallowed("tracking.output: Tee.write")  # capturing is best effort: never break a print
        return n

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, flush, buffer, ...
        return getattr(self._inner, name)


_lock = threading.Lock()
_depth = 0
_saved: dict = {}


def start(tail_of: Callable[[], Tail | None]) -> None:
    """A computation begins: wrap the standard streams if no computation has yet."""
    global _depth
    with _lock:
        _depth += 1
        if _depth > 1:
            return
        for name in ("stdout", "stderr"):
            cur = getattr(sys, name)
            if cur is not None and not isinstance(cur, Tee):
                tee = Tee(cur, tail_of)
                _saved[name] = tee
                setattr(sys, name, tee)


def stop() -> None:
    """A computation ended: unwrap once none runs, unless someone replaced our wrapper meanwhile."""
    global _depth
    with _lock:
        _depth = max(0, _depth - 1)
        if _depth:
            return
        for name, tee in list(_saved.items()):
            if getattr(sys, name) is tee:
                setattr(sys, name, tee._inner)
        _saved.clear()


def after_fork() -> None:
    global _lock
    _lock = threading.Lock()
