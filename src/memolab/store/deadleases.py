"""Leases of provably dead owners, in the local store and the team index: what ``memolab doctor``
lists, and drops with ``--drop-dead-leases``.

A lease whose owner died (SIGKILL, an OOM kill, a lost connection at the wrong moment) is taken
over by the next claimer of its key (at once on this host, after a TTL elsewhere), so it costs
nothing until its key is asked for again; but it sits in the table, shows as a computation in
flight, and makes the first waiter of another machine wait a TTL. An owner is provably dead
only where this machine can see it: a process of this host (same boot and pid namespace) that
is not running, or runs with another start time (a reused pid) — ``owner_alive_here`` —, and, in
the local store, an owner of this kernel that no longer holds its key's lock
(``Index.abandoned_leases``). Owners on other machines are judged by their heartbeat by the
claimers; they are counted here, never dropped. Every drop is owner-checked: a lease taken over
since by a live owner is never touched.
"""
from __future__ import annotations

from typing import Any

from ..key import Key
from .leasing import owner_alive_here

Lease = tuple[str, Key]  # (owner, key)


def local_dead(store: Any) -> list[Lease]:
    """The local store's leases whose owners provably gave them up."""
    return [(o, Key(fn, code, args, schema)) for o, fn, code, args, schema in store.index.abandoned_leases(store.index.conn())]


def drop_local(store: Any) -> int:
    """Delete the local leases of provably dead owners, judged again under the write lock; how many."""
    with store.index.write() as c:
        gone = store.index.abandoned_leases(c)
        c.executemany("DELETE FROM leases WHERE owner=? AND fn=? AND code=? AND args=? AND schema=?", gone)
    return len(gone)


def team_leases(index: Any) -> list[Lease]:
    """Every lease of a team index: a ``PgIndex`` (``lease_owners``) or a one-host SQLite one."""
    owners = getattr(index, "lease_owners", None)
    if owners is not None:
        return list(owners())
    return [(o, Key(fn, code, args, schema)) for o, fn, code, args, schema in
            index.conn().execute("SELECT owner, fn, code, args, schema FROM leases").fetchall()]


def team_dead(index: Any) -> tuple[list[Lease], int]:
    """The team index's leases whose owners are provably dead (processes of this host that are
    gone), and how many others it holds (live, or owned elsewhere: judged by their TTL)."""
    rows = team_leases(index)
    dead = [(o, k) for o, k in rows if owner_alive_here(o) is False]
    return dead, len(rows) - len(dead)


def drop_team(index: Any, dead: list[Lease]) -> int:
    """Release these team leases (each only if that owner still holds it); how many were asked."""
    for owner, key in dead:
        index.release(key, owner)
    return len(dead)


def describe(owner: str) -> str:
    """``host pid N`` of an owner id (``host:pid:start/table:nonce:thread``)."""
    parts = owner.split(":")
    return f"{parts[0]} pid {parts[1]}" if len(parts) > 1 else owner
