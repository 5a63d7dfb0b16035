"""When a store's usage is written: hit counts, last use and blob stamps, off the hit path.

A hit must not cost a database write, so a ``Store`` keeps its usage in memory and a
thread writes it in batches: every ``HIT_FLUSH_SECONDS``, once the process has been hitting
for that long (a short script's counts are written at exit, with no thread started for
them). A process whose exit runs no ``atexit`` handlers would lose what is pending then: a
Ray worker is killed, never exits (``hooks.exits_without_atexit``). There the thread starts
with the first hit and writes within ``PROMPT_SECONDS`` of each one, so results only workers
read keep their last use (``gc --older-than``) (docs/team.md, "Ray").
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..errors import swallowed
from ..settings import hooks

__all__ = ["Flusher", "HIT_FLUSH_SECONDS", "PROMPT_SECONDS"]

HIT_FLUSH_SECONDS = 2.0
#: a worker's usage is written this long after a hit: a burst of hits costs one write
PROMPT_SECONDS = 0.05


#: a Flusher's ``_wake`` where it writes on a timer (not ``prompt``): never set, never waited on
_NO_WAKE = threading.Event()


class Flusher:
    """Runs ``flush`` (write what is pending) on a thread of its own, when due."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self.flush = flush
        self.thread: threading.Thread | None = None
        self.due = time.monotonic() + HIT_FLUSH_SECONDS
        #: written within PROMPT_SECONDS of each hit (a process that never runs its atexit handlers)
        self.prompt = hooks.exits_without_atexit()
        #: run after each prompt write (a team store sends the hits on to the team's rows)
        self.after: list[Callable[[], object]] = []  # (what each returns is ignored)
        # what wakes a prompt writer (``prompt`` never changes): made only for one, a store's opening
        # makes no Event (a Condition, its lock and its deque) that nothing would ever set or wait on
        self._wake = threading.Event() if self.prompt else _NO_WAKE
        self._lock = threading.Lock()

    def noted(self) -> None:
        """Usage is pending (called on the hit path: a check, rarely a thread start, a wake)."""
        if self.thread is None:
            if not self.prompt and time.monotonic() <= self.due:
                return
            self._start()
        if self.prompt:
            self._wake.set()

    def _start(self) -> None:
        with self._lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="memolab-usage", daemon=True)
                self.thread.start()

    def _loop(self) -> None:
        # Off the hit path: a busy index makes this thread wait, never a caller.
        while True:
            if self.prompt:
                self._wake.wait()
                time.sleep(PROMPT_SECONDS)
                self._wake.clear()  # (a hit after this wakes the next round: nothing waits past it)
            else:
                time.sleep(HIT_FLUSH_SECONDS)
            self.flush()
            if self.prompt:
                for after in self.after:
                    try:
                        after()
                    except Exception:  # a thread's loop; the callbacks forward to a team backend: never let the thread die
                        swallowed("store.usage: Flusher._loop")  # advisory: never let the thread die
