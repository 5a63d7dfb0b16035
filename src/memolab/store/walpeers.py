"""Whether another process has an SQLite file open in WAL mode, told without touching the file.

Every connection to a WAL-mode database holds a shared POSIX lock on one byte of its ``-shm``
file, the "DMS" byte (offset 128: after the eight WAL locks at 120–127), for as long as it has the
file open; SQLite's first connection tests exactly that byte to learn whether it is alone. Here the
kernel's table of locks (``/proc/locks``, Linux) is read for a lock on that byte of that file
(device and inode, from a ``stat`` of its path) held by another process.

Not by opening the ``-shm`` file and asking ``fcntl(F_GETLK)``: closing any descriptor of a file
drops every POSIX lock the process holds on it, this process's own SQLite connections' included,
and another process would then take the WAL index for unused and rebuild it under them.

Where the table cannot be read (not Linux, no ``/proc``), or cannot be parsed, the answer is
"perhaps": callers that need "no one" then do nothing.
"""
from __future__ import annotations

import os

from ..errors import swallowed
from ..settings.files import read_bytes

__all__ = ["DMS", "others_connected"]

#: the byte of the ``-shm`` file every connection holds a shared lock on
DMS = 128


def others_connected(index: str, locks: str = "/proc/locks") -> bool:
    """True unless the lock table proves that no other process holds ``index`` (an SQLite file in
    WAL mode) open: False only where it was read, and no lock on the DMS byte of ``index``'s
    ``-shm`` file is held by a process other than this one."""
    if not index:
        return False  # (an in-memory or temporary database: this connection's own)
    try:
        st = os.stat(index + "-shm")
    except OSError:
        # (none: the caller's connection is not in WAL mode, whose readers hold no lock between
        # transactions: perhaps)
        swallowed("store.walpeers: stat")
        return True
    try:
        table = read_bytes(locks).decode("ascii", "replace")
    except OSError:
        swallowed("store.walpeers: lock table")
        return True
    me = str(os.getpid())
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        # "3: POSIX  ADVISORY  READ 6170 fe:00:2147216 128 128" (a blocked waiter's line starts "3: ->")
        f = line.split()
        if where not in f:
            continue
        i = f.index(where)
        if i < 1 or len(f) < i + 3:
            return True  # a line not as expected: perhaps
        start, end = f[i + 1], f[i + 2]
        if not start.isdigit():
            return True
        if int(start) <= DMS and (end == "EOF" or end.isdigit() and DMS <= int(end)) and f[i - 1] != me:
            return True
    return False
