"""The leases of the embedded store's SQLite index: who holds a key's computation.

``LeaseIndex`` is mixed into ``store.sqlite.Index`` (which gives ``conn()``, ``write()``,
``path`` and ``progress``, and takes a lease in ``claim``): this process's key locks, whether a
holder gave its lease up (``given_up``, the rules of store/leases.py), the leases gc may drop,
heartbeats and release. Below it, the lease owners' names (``process_token``) and whether an
owner is a process still running on this host (``owner_alive_here``).
"""
from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

from ..key import Key
from ..settings import config
from . import arming
from .leases import HostLocks, Progress, host_locks, owner_pid, same_kernel, uses_locks

# (host_name is looked up here by the functions below, so patching it here fakes another host)
from .process import host_name, process_table, start_time


class LeaseIndex:
    """The ``leases`` table of the local index and this process's key locks (``store/leases.py``)."""

    path: Any
    progress: Progress
    _locks: HostLocks | None

    def conn(self) -> sqlite3.Connection:  # pragma: no cover (the index's own)
        raise NotImplementedError

    def write(self, arms: Any = None) -> Any:  # pragma: no cover (the index's own)
        raise NotImplementedError

    def key_locks(self) -> HostLocks | None:
        """This process's key locks of this index (``store/leases.py``, rule 1), made on the first
        claim (a process that only hits creates no lock file); None where there can be none."""
        if getattr(self, "_locks_pid", None) != config.pid():
            self._locks = host_locks(self.path)
            self._locks_pid = config.pid()
        return self._locks

    def given_up(self, key: Key, holder: str, heartbeat: float, ttl: float, took: bool | None,
                  judge_progress: bool = True) -> bool:
        """May the lease of ``holder`` be taken over (``store/leases.py``)? ``took``: we hold the
        key's lock (no other process of this kernel does). ``judge_progress``: rule 2 too (a
        claimer polling); gc asks once and leaves such leases to claimers."""
        if took and uses_locks(holder) and same_kernel(holder, process_table()):
            if owner_pid(holder) == os.getpid():  # our own process: its record of what it holds
                return self._locks is None or self._locks.owners.get(key) != holder
            return True  # released (its release may have failed to delete the row) or dead
        if owner_alive_here(holder) is False:
            return True
        return judge_progress and self.progress.stale(key, holder, heartbeat, ttl)

    def abandoned_leases(self, c: sqlite3.Connection) -> list[tuple[Any, ...]]:
        """(owner, fn, code, args, schema) of the leases whose owners provably gave them up: dead
        on this host, or of this kernel and not holding the key's lock. Others are left to the
        claimers, which judge them by their heartbeat's progress."""
        locks = self.key_locks()
        gone = []
        for o, hb, *k in c.execute("SELECT owner, heartbeat, fn, code, args, schema FROM leases").fetchall():
            key = Key._make(k)
            took = locks.take(key) if locks is not None else None
            try:
                if self.given_up(key, o, hb, 0.0, took, judge_progress=False):
                    gone.append((o, *k))
            finally:
                if took and locks is not None:  # (took only with locks)
                    locks.drop(key)
        return gone

    def _let_go(self, key: Key, owner: str) -> None:
        """``owner`` no longer holds ``key`` here: its key lock goes (and what we saw of it)."""
        locks = getattr(self, "_locks", None)
        if locks is not None and getattr(self, "_locks_pid", None) == config.pid() \
                and locks.owners.get(tuple(key)) == owner:
            del locks.owners[tuple(key)]
            locks.drop(tuple(key))

    def heartbeat(self, held: Iterable[tuple[Key, str]]) -> None:
        # every beat changes the value (even if this clock stood still or went back): observers
        # judge a lease by whether its heartbeat moves, never by comparing it with their clock
        now = time.time()
        with self.write(arming.NOTHING) as c:  # (the leases alone: no trigger follows them)
            for key, owner in held:
                c.execute("UPDATE leases SET heartbeat=MAX(?, heartbeat + 0.001) WHERE fn=? AND code=? AND args=? "
                          "AND schema=? AND owner=?", (now, *key, owner))

    def live_leases(self, ttl: float) -> int:
        """How many computations are in flight (leases heart-beaten within ``ttl``)."""
        row = self.conn().execute("SELECT COUNT(*) FROM leases WHERE heartbeat > ?", (time.time() - ttl,)).fetchone()
        return int(row[0])

    def release(self, key: Key, owner: str) -> None:
        """Drop ``owner``'s lease; its key lock goes even if deleting the row fails (a full disk):
        then claimers of this kernel take the key at once, others once its heartbeat stops moving."""
        try:
            with self.write(arming.NOTHING) as c:
                c.execute("DELETE FROM leases WHERE fn=? AND code=? AND args=? AND schema=? AND owner=?", (*key, owner))
        finally:
            self._let_go(key, owner)


# -- lease owners: which process holds a lease, and is it alive here? -------------------------

def process_token() -> str:
    """``host:pid:start/table``: names this process for lease owners, pid reuse included."""
    return f"{host_name()}:{os.getpid()}:{start_time(os.getpid()) or '?'}/{process_table() or '?'}"


def owner_alive_here(owner: str) -> bool | None:
    """Is the owner of a lease a process on this host that is still running?
    True or False where the process table can say, None where it cannot
    (another host, no /proc, our own process): the heartbeat decides then.

    A heartbeat thread needs the GIL: an owner inside one long C call that holds
    it (``sum(range(10**9))``, a big sort, many C extensions) stops beating and
    its lease looks stale although it is still computing; an owner killed a
    moment ago still looks fresh for ``lease_ttl``. On the owner's own host the
    process table says for sure. The start time guards against a reused pid.
    """
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != host_name():
        return None
    start, _, table = parts[2].partition("/")
    if start in ("?", "") or table in ("?", "") or table != process_table():
        return None  # another machine, container or boot: not our process table to ask
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    if pid == os.getpid():
        return None  # our own threads beat through our heartbeat thread, which is running now
    return start_time(pid) == start
