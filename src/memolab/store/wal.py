"""Checkpointing the index's write-ahead log off the caller's thread.

SQLite copies the WAL back into the database file itself, inside the COMMIT
that takes the log past ``wal_autocheckpoint`` frames (1000 by default). With
``synchronous=NORMAL`` that checkpoint syncs the WAL and then the database file:
two fsyncs in the middle of a user's call. One small miss in about 120 took
5–10 ms instead of 0.3–0.4 ms (figures in docs/storage-format.md).

Here a commit only looks at the WAL-index header (a ``pread`` of the ``-shm``
file, whose layout is part of SQLite's documented file format; see ``_shm_fd``
for why that descriptor is never closed) and, once the log holds
``CHECKPOINT_FRAMES`` frames not yet copied back, wakes a daemon thread that
runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own.
PASSIVE waits for nobody, and SQLite releases the GIL while it works. SQLite's
own automatic checkpoint stays on at ``sqlite.AUTOCHECKPOINT_FRAMES``, in case
this thread falls behind or the header cannot be read.

Durability is unchanged: a checkpoint copies frames that are already committed,
and one cut short (the process exits: the thread is a daemon) is redone by the
next.
"""
from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Dict, Optional

from .. import config

#: Frames not yet copied back into the database file at which the thread checkpoints
#: (SQLite's default automatic checkpoint threshold).
CHECKPOINT_FRAMES = 1000
#: Seconds between two checkpoints: a reader holding an old snapshot can keep the
#: log from being copied back, and every commit would wake the thread again.
MIN_INTERVAL = 0.05

#: Commits between two checks that the ``-shm`` file read is still SQLite's (``_shm_fd``).
RECHECK_EVERY = 64

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


_shm_fds: Dict[str, int] = {}  # inherited by a forked child, and valid there
_shm_lock = threading.Lock()


def _new_lock_in_child() -> None:
    global _shm_lock
    _shm_lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _shm_fd(path: str, recheck: bool) -> int:
    """A descriptor of the ``-shm`` file at ``path``, opened once per process and never closed.

    Never closed, on purpose: closing *any* descriptor of a file drops every POSIX
    lock the process holds on that file, SQLite's included (its read marks, and
    the lock that tells other processes the shared memory is in use; without
    that one the next process to open the store re-initialises the file under
    our connections, and a process that has it mapped dies of SIGBUS, which the
    stress test caught when this descriptor was opened and closed per commit).
    SQLite's own VFS keeps its descriptors open for the same reason.

    ``recheck``: see whether SQLite deleted the file since (it does when the last
    connection closes). Not at every commit: a stale descriptor only moves
    checkpoints (to the backstop at worst), and ``fstat`` is a system call.
    """
    with _shm_lock:
        fd = _shm_fds.get(path)
        if fd is not None and recheck and os.fstat(fd).st_nlink == 0:
            # SQLite deleted the file: the last connection to the store closed, in every
            # process, ours included. No lock of ours is on that file, so closing is safe.
            os.close(fd)
            fd = None
        if fd is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))  # never O_CREAT: SQLite makes it
            _shm_fds[path] = fd
        return fd


class Checkpointer:
    """One per index and process: ``after_commit`` on every commit, the checkpoints on a thread."""

    def __init__(self, path: Path) -> None:
        self._db = Path(path)
        self._shm = str(path) + "-shm"
        self._pid = -1
        self._thread: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._commits = 0
        self.checkpoints = 0  # how many the thread ran in this process (for tests)

    def after_commit(self) -> None:
        """A commit just ended: wake the thread if the log is due for a checkpoint. Never raises."""
        if self._pid != config.pid():
            # a forked child: the thread was not copied, and a lock may have been held at the fork
            self._pid, self._thread, self._wake, self._lock = config.pid(), None, threading.Event(), threading.Lock()
        try:
            self._commits += 1
            pending = pending_frames(_shm_fd(self._shm, recheck=self._commits % RECHECK_EVERY == 1))
            if pending is not None and pending >= CHECKPOINT_FRAMES:
                self._start()
                self._wake.set()
        except Exception:
            # No readable -shm (or no os.pread), or no new thread at interpreter
            # shutdown (a commit in an atexit handler): SQLite's backstop checkpoints.
            # The commit itself went through, and the caller must not hear otherwise.
            pass

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                # The thread holds the checkpointer weakly: a retired store (the working
                # directory changed) is collected, and its thread then ends.
                wake = self._wake
                self._thread = threading.Thread(target=_run, args=(self._db, weakref.ref(self), wake),
                                                name="memolab-wal-checkpoint", daemon=True)
                weakref.finalize(self, wake.set)
                self._thread.start()


def _run(db: Path, ref: "weakref.ref[Checkpointer]", wake: threading.Event) -> None:
    conn: Optional[sqlite3.Connection] = None
    while True:
        wake.wait()
        wake.clear()
        me = ref()
        if me is None:
            break
        try:
            if conn is None:
                # its own connection, which never creates the file (mode=rw): a store
                # deleted since the commit that woke us stays deleted
                conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=rw", uri=True, isolation_level=None,
                                       check_same_thread=False)
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()  # waits for no one
            me.checkpoints += 1
        except Exception:
            pass  # the store went away or is damaged: its users hear of it, not from here
        del me
        time.sleep(MIN_INTERVAL)
    if conn is not None:
        conn.close()
