"""Team-wide use: local hits are counted on the team index too.

``memolab gc --remote`` drops what the team has not used for a while, so the
team row of a result must learn of every hit, and most hits are local (a
result fetched once is read from the local store ever after, without any team
traffic). The local store already batches its hit counts off the hit path
(``Store.count_hit``, flushed every few seconds and at exit); a ``TeamStore``
keeps a copy of each batch and forwards it from the same flush: the local ids
mapped to keys (one local query), the keys to team ids (one ``lookup_many``),
the counts added (one ``add_hits``). Nothing of this runs on a caller's path.

Counts are advisory and approximate, like the local ones: a batch that cannot
be sent (the team store is down) is kept and sent with a later flush; one
pending at a SIGKILL is lost; a hit on a result not yet uploaded is dropped
(the team row does not exist yet; its upload is fresh anyway).
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Tuple

from .link import Offline

Counts = Dict[int, Tuple[int, float]]


class Pending:
    """Hit counts taken from the local batches, not yet added on the team index."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counts = {}

    def add(self, counts: Counts) -> None:
        with self._lock:
            for i, (n, t) in counts.items():
                m, u = self._counts.get(i, (0, 0.0))
                self._counts[i] = (m + n, max(t, u))

    def take(self) -> Counts:
        with self._lock:
            out, self._counts = self._counts, {}
        return out


def forward(store: Any, pending: Pending) -> int:
    """Send ``pending`` to the team index of ``store`` (a ``TeamStore``); how many rows counted."""
    counts = pending.take()
    if not counts:
        return 0
    if not store.link.usable():
        pending.add(counts)  # sent once the team store is back
        return 0
    keys: Dict[Tuple[str, str, str, str], int] = {}
    ids: List[int] = sorted(counts)
    try:
        c = store.index.conn()
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for eid, *key in c.execute(f"SELECT id, fn, code, args, schema FROM evaluations WHERE id IN "
                                       f"({','.join('?' * len(chunk))})", chunk):
                keys[tuple(key)] = eid  # type: ignore[index]
    except Exception:
        return 0  # the local index is busy or damaged: these counts are lost (advisory)
    if not keys:
        return 0
    try:
        team = store.link.run(lambda: store.link.index.lookup_many(list(keys)))
        adds = {int(row["id"]): counts[keys[k]] for k, row in team.items() if k in keys}
        if adds:
            store.link.run(lambda: store.link.index.add_hits(adds))
        return len(adds)
    except Offline:
        pending.add(counts)
        return 0
    except Exception:
        return 0  # never let counting fail anything
