"""Leases this process holds: their heartbeat, and each store's exit hook.

A lease (``store/leases.py``) is heart-beaten while its computation runs, by a thread
of its store (``memolab-heartbeat``) that ends once the store holds nothing. Most
computations hold their lease for less than one heartbeat interval: starting a thread
for them is waste. So where a thread of memolab's already makes rounds about once a
second (the log flusher, which sets ``ticker``), a lease only notes when it will need
a beat, and that round starts the heartbeat of a store whose lease has been held a
whole interval (``beat_due``), which then beats at once. Without such a thread (no
``ticker``), a lease starts its store's heartbeat as it is taken.

Every store of the process is kept weakly in ``live`` (one the program let go of, and its
index's open files, is freed); one ``atexit`` hook, registered with the first store (never
by ``import memolab``), writes their hit counts at exit.
"""
from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import swallowed
from ..settings import config
from .sqlite import Index, Key

#: every Store of this process still referenced: weakly, so that one the program let go of
#: (and its index's open files) is freed, as ``atexit.register(store.flush_hits)`` never allowed
live: weakref.WeakSet[Any] = weakref.WeakSet()

#: a thread of memolab's that calls ``beat_due`` about once a second, started on demand (the
#: log flusher sets it: ``tracking.sink.ensure_ticking``), or None: a lease then starts its
#: store's heartbeat thread at once. With it, a lease given back within a heartbeat interval
#: (a quick computation) starts no thread of its own.
ticker: Callable[[], bool] | None = None
_exit_hooked = False


def track(st: Any) -> None:
    """``st`` is one of this process's stores: its hit counts are written at exit."""
    global _exit_hooked
    live.add(st)
    if not _exit_hooked:
        _exit_hooked = True
        atexit.register(flush_live)


def flush_live() -> None:
    for s in list(live):
        s.flush_hits()


def beat_due() -> None:
    """Start the heartbeat of each store that has held a lease for a heartbeat interval."""
    for st in list(live):
        st.start_beat_if_due()


def _ticking() -> bool:
    try:
        return ticker is not None and ticker()
    except RuntimeError:  # no thread to tick (none can start: at shutdown): the lease starts its own heartbeat
        swallowed("starting the log flusher to tick the heartbeats")
        return False


class Heartbeats:
    """The heartbeat part of ``Store`` (its ``_held``, ``held_lock``, ``_beat``, ``_beat_stop``,
    ``_beat_due``, ``beat_with`` and ``index``, set by ``Store.__init__``)."""

    _held: dict[tuple[Key, str], int]
    held_lock: threading.Lock
    _beat: threading.Thread | None
    _beat_stop: threading.Event
    _beat_due: float | None
    beat_with: list[Callable[[], Callable[[], None] | None]]
    index: Index

    def hold(self, key: Key, owner: str) -> None:
        """Count a lease of ``key`` taken for ``owner`` as held: heart-beaten until released or saved."""
        with self.held_lock:
            self._held[(key, owner)] = self._held.get((key, owner), 0) + 1
            if self._beat is None or not self._beat.is_alive():
                if self._beat_due is None:
                    self._beat_due = time.monotonic() + config.settings().heartbeat
                if not _ticking():
                    self._start_beat()

    def start_beat_if_due(self) -> None:
        """Start the heartbeat if a lease has been held for a heartbeat interval (``beat_due``)."""
        due = self._beat_due
        if due is None or time.monotonic() < due:
            return
        with self.held_lock:
            if self._beat_due is not None and (self._beat is None or not self._beat.is_alive()):
                if self._held or any(f() is not None for f in self.beat_with):
                    self._start_beat(at_once=True)
                else:
                    self._beat_due = None  # given back before it needed one

    def _start_beat(self, at_once: bool = False) -> None:
        """(under ``held_lock``) ``at_once``: a lease held a whole interval already beats now."""
        # (a new Event a thread, not one made by every store's opening: a store that only hits never
        # beats; the thread before this one has ended, so nothing waits on the Event it had)
        self._beat_stop = threading.Event()
        self._beat_due = None
        self._beat = threading.Thread(target=self._heartbeat_loop, args=(at_once,), name="memolab-heartbeat",
                                      daemon=True)
        self._beat.start()

    _hold = hold  # (the name ``try_acquire`` uses)

    def _unhold(self, key: Key, owner: str) -> None:
        with self.held_lock:
            n = self._held.get((key, owner), 0) - 1
            if n <= 0:
                self._held.pop((key, owner), None)
            else:
                self._held[(key, owner)] = n

    def _heartbeat_loop(self, at_once: bool = False) -> None:
        while at_once or not self._beat_stop.wait(config.settings().heartbeat):
            at_once = False
            with self.held_lock:
                held = list(self._held)
                more = [b for b in (f() for f in self.beat_with) if b is not None]
                if not held and not more:
                    self._beat = None
                    return
            if held:
                try:
                    self.index.heartbeat(held)
                except Exception:  # a thread's loop: a busy database, or anything else, must not kill the heartbeat
                    swallowed("a heartbeat of the leases held")
            for beat in more:
                try:
                    beat()
                except Exception:  # a thread's loop; a layered store's beat talks to its team backend (PostgreSQL)
                    swallowed("a heartbeat of a layered store's leases")

