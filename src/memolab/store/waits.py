"""The one wait loop for a key's lease: ``claim`` polls ``try_acquire`` with a bounded
back-off, yielding a ``Pause`` between polls.

The store waits with it (``Store.acquire``, driven here by ``wait``), and so does a
memoized call (``lifecycle.lifecycle`` yields its pauses to a driver that sleeps or
awaits): the wait belongs to the leases, below both.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

__all__ = ["Pause", "claim", "wait"]

Row = dict[str, Any]


class Pause(NamedTuple):
    """Wait this long, then go on (another owner computes the key)."""

    seconds: float


#: the back-off of a wait: first poll after ``_FIRST_PAUSE``, growing by half up to ``_LONGEST_PAUSE``
_FIRST_PAUSE = 0.01
_LONGEST_PAUSE = 0.25


def claim(store: Any, key: Any, owner: str, force: bool = False,
          on_owner: Callable[[Any], None] | None = None) -> Generator[Pause, None, tuple[str, Row | None]]:
    """Poll ``store.try_acquire`` until the key is stored ('hit', row) or its lease is
    ours ('owner', None), pausing with a bounded back-off in between: the one wait loop."""
    delay = _FIRST_PAUSE
    while True:
        state, row = store.try_acquire(key, owner, force, on_owner)
        if state != "wait":
            return state, row
        yield Pause(delay)
        delay = min(delay * 1.5, _LONGEST_PAUSE)


def wait(gen: Generator[Pause, None, Any]) -> Any:
    """Run a ``claim`` in this thread: sleep for each ``Pause``; return what it returns.
    What the sleep raises (``KeyboardInterrupt``) leaves here: ``claim`` holds nothing."""
    try:
        request = next(gen)
        while True:
            time.sleep(request.seconds)
            request = next(gen)
    except StopIteration as stop:
        return stop.value
