"""When another owner's lease may be taken over: judged without trusting its clock or its pid alone.

A lease (``leases`` row: key -> owner, heartbeat) says "I am computing this key". It can outlive
its computation three ways: the owner died (SIGKILL, a lost machine), the owner's release failed
(a full disk, in a process that lives on: a notebook kernel), or the owner stalls (a long C call
holding the GIL stops its heartbeat thread while it still computes). Two clocks may also disagree
by an hour (two machines or containers sharing a store). The rules, in order:

1. **This kernel: the key's lock.** An owner holds, besides the row, an OS lock on one byte of
   the store's ``leases.lock`` (``fcntl`` record lock; the byte is a hash of the key), taken
   *before* its claim's transaction and dropped when it records or releases (or by the kernel
   when it dies). A claimer takes the byte (non-blocking) before it looks at the row: if another
   process on this kernel holds it, that process is alive and owns or is claiming the key: wait,
   whatever its heartbeat (a GIL-holding C call keeps its lock). If the claimer gets the byte and
   the row's owner is on this kernel (same boot id: another container sharing the store counts)
   and takes these locks (its id says so), the owner has released it, or died: taken over at
   once. A release that failed to delete the row still dropped the lock, so the key is free.
   Within one process (POSIX locks are per process) the process's own record of the leases it
   holds says the same; a claimer is recorded as holding before its claim commits (``settle``).
2. **Elsewhere: heartbeat progress on the observer's clock.** An owner this kernel cannot judge
   (another machine, an older memolab, a file system without locks) is judged by whether its
   heartbeat *moves*: the observer remembers the (owner, heartbeat) it saw and when, by its own
   monotonic clock, and takes the lease over once the same value has stood for ``lease_ttl``.
   No clock of the holder's is compared with the observer's: an owner an hour ahead that died is
   taken over a TTL after it was first seen unchanged, one an hour behind that beats keeps its
   lease. The price: a lease first seen at a claim is never older than its first sighting, so a
   dead owner on another machine costs its first waiter up to one TTL, even if it died long ago.
   An owner on another machine stalled by a GIL-holding call longer than the TTL is taken over
   (computed twice, never a wrong result: its late save keeps the first row); raise
   ``MEMOLAB_LEASE_TTL`` for such functions.
3. Where the kernel's process table can say an older owner on this host is dead, it is taken
   over at once (``owner_alive_here``).

The team store's leases (PostgreSQL) are judged by the database's clock, which both sides share
(``team/pg.py``): a lease not heart-beaten for ``lease_ttl`` by that clock is taken over, whoever
holds it; an owner dead on this host at once. There is no shared kernel lock across machines, so
the GIL caveat of rule 2 applies to team leases whatever the machine.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import threading
import time
from pathlib import Path

from ..errors import swallowed
from ..key import Key

__all__ = ["HostLocks", "host_locks", "LOCKS_MARK", "uses_locks", "same_kernel", "Progress"]

#: an owner id whose nonce starts with this takes the key locks of rule 1
LOCKS_MARK = "L"

_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _offset(key: Key) -> int:
    """The byte of ``leases.lock`` that stands for ``key`` (56 bits of a hash: two keys sharing
    one would only make a claimer wait for the other's owner)."""
    h = hashlib.blake2b(json.dumps(list(key)).encode(), digest_size=7).digest()
    return int.from_bytes(h, "big")


class HostLocks:
    """This process's locks on one ``leases.lock`` file. One per file and process (POSIX record
    locks belong to the process, and closing any descriptor of the file would drop them all),
    counted per key so that two threads of the process can hold or try one key. The file is
    open only while a lock is held (a store let go of holds no descriptor)."""

    def __init__(self, path: Path, mode: int) -> None:
        self.path, self.mode = path, mode
        self.fd: int | None = None
        self._lock = threading.Lock()
        self._count: dict[int, int] = {}
        #: key -> the owner of this process holding its lease (rule 1 within the process)
        self.owners: dict[Key, str] = {}

    def take(self, key: Key) -> bool | None:
        """Take the key's lock (counted): False if another process holds it, None if the file
        cannot be locked now (rules 2 and 3 decide then)."""
        off = _offset(key)
        with self._lock:
            n = self._count.get(off, 0)
            if n == 0:
                try:
                    if self.fd is None:
                        self.fd = os.open(self.path, _FLAGS, self.mode)
                    fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, off, os.SEEK_SET)
                except OSError as e:
                    self._close_if_idle()
                    if e.errno in (errno.EAGAIN, errno.EACCES):
                        return False
                    return None
            self._count[off] = n + 1
            return True

    def drop(self, key: Key) -> None:
        off = _offset(key)
        with self._lock:
            n = self._count.get(off, 0) - 1
            if n > 0:
                self._count[off] = n
                return
            self._count.pop(off, None)
            if self.fd is not None:
                try:
                    fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, off, os.SEEK_SET)
                except OSError:
                    # nothing else can be done; the kernel drops it when the process ends
                    swallowed("store.leases: HostLocks.drop")
            self._close_if_idle()

    def settle(self, key: Key, owner: str, prior: str | None, owns: bool) -> None:
        """After a claim by ``owner`` that took the key's lock (counted): kept if the claim made
        ``owner`` the holder (``owns``), given back otherwise. The claim registers the holder in
        ``owners`` inside its transaction, before the commit: registered after it, a sibling
        thread reading the committed row in between took its own process's fresh lease for a
        released one (POSIX locks do not tell threads apart) and computed the key again.
        ``prior``: the holder registered before the claim (the same owner claiming again while
        it holds the key, polling another lease: its extra count goes back)."""
        if owns and prior != owner:
            return  # held until recorded or released
        if not owns and prior != owner and self.owners.get(key) == owner:
            del self.owners[key]  # registered, but the claim did not commit
        self.drop(key)

    def _close_if_idle(self) -> None:
        if not self._count and self.fd is not None:
            os.close(self.fd)  # (holds no lock: closing drops nothing)
            self.fd = None


_files: dict[str, HostLocks] = {}
_files_lock = threading.Lock()
_pid = [os.getpid()]


def host_locks(index_path: Path) -> HostLocks | None:
    """This process's ``HostLocks`` of the store whose index is ``index_path`` (its
    ``leases.lock`` beside it, created with the index's mode), or None where they cannot be had
    (a read-only folder, a file system without record locks): rules 2 and 3 decide then."""
    path = Path(index_path).absolute().with_name("leases.lock")
    with _files_lock:
        if _pid[0] != os.getpid():  # a forked child holds none of its parent's locks
            _files.clear()
            _pid[0] = os.getpid()
        have = _files.get(str(path))
        if have is not None:
            return have
        try:
            mode = os.stat(index_path).st_mode & 0o666
        except OSError:
            mode = 0o600
        try:
            fd = os.open(path, _FLAGS, mode)
        except OSError:
            return None
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0, os.SEEK_SET)  # do record locks work here?
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0, os.SEEK_SET)
        except OSError:
            return None
        finally:
            os.close(fd)
        locks = _files[str(path)] = HostLocks(path, mode)
        return locks


def uses_locks(owner: str) -> bool:
    """Does ``owner`` (``host:pid:start/table:nonce:thread``) take the key locks of rule 1?"""
    parts = owner.split(":")
    return len(parts) >= 4 and parts[3].startswith(LOCKS_MARK)


def same_kernel(owner: str, table: str | None) -> bool:
    """Does ``owner`` run on this kernel (its boot id, the last part of its process table tag,
    is ours: containers sharing the store included)? ``table``: ours (``process.process_table``)."""
    if not table:
        return False
    parts = owner.split(":")
    if len(parts) < 3:
        return False
    theirs = parts[2].partition("/")[2]
    return bool(theirs) and theirs.rpartition(".")[2] == table.rpartition(".")[2]


def owner_pid(owner: str) -> int | None:
    try:
        return int(owner.split(":")[1])
    except (IndexError, ValueError):
        return None


class Progress:
    """Rule 2: when each lease seen was first seen with its current heartbeat, by this process's
    monotonic clock. ``stale`` once the same (owner, heartbeat) has stood for ``ttl``."""

    def __init__(self) -> None:
        self._seen: dict[Key, tuple[str, float, float]] = {}

    def stale(self, key: Key, owner: str, heartbeat: float, ttl: float) -> bool:
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is None or seen[0] != owner or seen[1] != heartbeat:
            if len(self._seen) > 10_000:
                self._seen.clear()  # keys waited on long ago: seen afresh if asked again
            self._seen[key] = (owner, heartbeat, now)
            return False
        return now - seen[2] >= ttl

    def forget(self, key: Key) -> None:
        self._seen.pop(key, None)
