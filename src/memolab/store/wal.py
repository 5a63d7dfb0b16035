"""Checkpointing the index's write-ahead log off the caller's thread.

SQLite copies the WAL back into the database file itself, inside the COMMIT
that takes the log past ``wal_autocheckpoint`` frames (1000 by default). With
``synchronous=NORMAL`` that checkpoint syncs the WAL and then the database file:
two fsyncs in the middle of a user's call. One small miss in about 80 took
5–10 ms instead of 0.3 ms, and the mean miss a third more than the median.

Here a commit only looks at the WAL-index header (one ``pread`` of the ``-shm``
file, whose layout is part of SQLite's documented file format) and, once the
log holds ``CHECKPOINT_FRAMES`` frames not yet copied back, wakes a daemon
thread that runs ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection.
PASSIVE waits for nobody, and SQLite releases the GIL while it works. SQLite's
own automatic checkpoint stays on at ``BACKSTOP_FRAMES``, in case this thread
falls behind or the header cannot be read.

Durability is unchanged: a checkpoint copies frames that are already committed,
and one cut short (the process exits: the thread is a daemon) is redone by the
next.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from .. import config

#: Frames not yet copied back into the database file at which the thread checkpoints
#: (SQLite's default automatic checkpoint threshold).
CHECKPOINT_FRAMES = 1000
#: SQLite's automatic checkpoint, in the committing call, only past this many frames.
BACKSTOP_FRAMES = 4000
#: Seconds between two checkpoints: a reader holding an old snapshot can keep the
#: log from being copied back, and every commit would wake the thread again.
MIN_INTERVAL = 0.05

# The WAL-index header (https://www.sqlite.org/walformat.html): two copies of a
# 48-byte header, then the checkpoint information. Native byte order.
_VERSION = 3007000  # iVersion, at offset 0
_MX_FRAME = slice(16, 20)  # frames in the log (first header copy)
_N_BACKFILL = slice(96, 100)  # of which copied back into the database file
_HEADER_BYTES = 100


def pending_frames(fd: int) -> Optional[int]:
    """Frames of the log not yet copied back, read from the ``-shm`` file; None if unreadable.

    Read without SQLite's locks: a torn read gives a wrong count, which only
    moves one checkpoint earlier or later.
    """
    b = os.pread(fd, _HEADER_BYTES, 0)
    if len(b) < _HEADER_BYTES or int.from_bytes(b[0:4], sys.byteorder) != _VERSION:
        return None
    return max(0, int.from_bytes(b[_MX_FRAME], sys.byteorder) - int.from_bytes(b[_N_BACKFILL], sys.byteorder))


class Checkpointer:
    """One per index and process: ``after_commit`` on every commit, the checkpoints on a thread."""

    def __init__(self, index: Any) -> None:
        self._index = index  # its ``conn()`` gives the thread its own connection
        self._shm = Path(str(index.path) + "-shm")
        self._pid = -1
        self._fd: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self.checkpoints = 0  # how many the thread ran in this process (for tests)

    def after_commit(self) -> None:
        """A commit just ended: wake the thread if the log is due for a checkpoint. Never raises."""
        try:
            if self._pid != config.pid():
                self._reset()
            if self._fd is None:
                self._fd = os.open(self._shm, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            pending = pending_frames(self._fd)
        except OSError:
            return  # no readable -shm: SQLite's backstop checkpoints
        if pending is not None and pending >= CHECKPOINT_FRAMES:
            self._start()
            self._wake.set()

    def _reset(self) -> None:
        # A forked child: the thread was not copied and the descriptor is the
        # parent's (shared offsets do not matter to pread, but keep our own).
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._pid = config.pid()
        self._fd = None
        self._thread = None
        self._wake = threading.Event()
        self._lock = threading.Lock()  # another thread may have held it at the fork

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, args=(self._wake,), name="memolab-wal-checkpoint",
                                                daemon=True)
                self._thread.start()

    def _run(self, wake: threading.Event) -> None:
        while True:
            wake.wait()
            wake.clear()
            try:
                self._index.conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.checkpoints += 1
            except Exception:
                pass  # busy, or the store went away: the next commit wakes us again
            time.sleep(MIN_INTERVAL)
