"""Accepted code changes on a team store: made on one machine, followed on every machine.

- ``memolab accept`` on a machine with a team store records the accept locally and on the team
  index at once (``record``); unreachable, it stays local and ``memolab sync`` sends it
  (``push``). An undo goes the same way.
- A call that finds no row under its key asks the team index for the function's accepts
  (one statement, ``accepts_of``): the team's state wins. Accepts new to this machine are
  copied into its local index (so it follows them offline too), and local copies the team has
  taken back are taken back here. While the team store is unreachable, the local copies are
  followed as they were last seen (an undo made elsewhere reaches this machine when it is back).
- Every accept is verified before it is followed (``store.accepts.usable``: its signature,
  when the team signs); a machine that may load no team row (``TeamStore.load_refusal``)
  follows none of the team's accepts.
"""
from __future__ import annotations

from typing import Any

from ..store.accepts import usable
from .link import Offline

__all__ = ["accepts_of", "record", "undo", "push"]

#: the fields of an accept that travel (the rest is each index's bookkeeping)
_TRAVEL = ("fn", "schema", "new_code", "old_code", "time", "user_name", "host", "deps_before", "deps_after", "diffs",
           "signature")


def _supported(store: Any) -> bool:
    return bool(getattr(store.link.index, "accepts_supported", True))


def accepts_of(store: Any, fn: str, schema: str) -> list[dict[str, Any]]:
    """The accepts of ``fn`` under ``schema`` a call on ``store`` (a ``TeamStore``) may follow."""
    index = store.local.index
    if store.link.usable():
        try:
            # an accept decides which stored results a call gets: where no team row may be loaded
            # (no key while the team signs, an unsigned team not opted into) none of the team's
            # accepts is followed either, since none can be verified
            team = None if store.load_refusal() is not None else store.link.run(
                lambda: store.link.index.accepts(fn, schema, active=False) if _supported(store) else None)
        except Offline:
            team = None
        if team is not None:
            _sync(index, index.accepts(fn, schema, active=False), team)
    return usable(index.accepts(fn, schema))


def _sync(index: Any, local: list[dict[str, Any]], team: list[dict[str, Any]]) -> None:
    """Bring the local copies of the team's accepts (of one function) to the team's state."""
    by_team = {a["team_id"]: a for a in local if a.get("team_id") is not None}
    for t in team:
        mine = by_team.get(t["id"])
        if mine is None:
            if t.get("undone") is None:
                index.add_accept({**{k: t.get(k) for k in _TRAVEL}, "team_id": t["id"], "origin": "team"})
        elif mine.get("undone") is None and t.get("undone") is not None:
            index.undo_accept(mine["id"], when=t["undone"], by=t.get("undone_by"))


def record(store: Any, rec: dict[str, Any]) -> dict[str, Any]:
    """``TeamStore.record_accept``: locally, then on the team index: ``{"id", "team"}`` where
    ``team`` is ``published``, ``offline`` (``memolab sync`` sends it), ``old-schema`` (a team index
    at schema 1) or ``refused`` (this machine's key is not the team's: it publishes nothing)."""
    from ..store.accepts import record as record_here

    local_id = record_here(store.local.index, rec)
    return {"id": local_id, "team": _publish(store, local_id)}


def _publish(store: Any, local_id: int) -> str:
    index = store.local.index
    got = index.accepts(ids=[local_id], active=False)
    if not got:
        return "offline"
    a = got[0]
    try:
        if store.key_refusal(store.link.attempt) is not None:
            return "refused"
        if not store.link.attempt(lambda: _supported(store)):
            return "old-schema"
        tid = store.link.attempt(lambda: store.link.index.add_accept({k: a.get(k) for k in _TRAVEL}))
    except Offline:
        return "offline"
    store.link.came_back()
    index.set_accept_team(local_id, tid, pending_undo=a.get("undone") is not None)
    if a.get("undone") is not None:
        _send_undo(store, {**a, "team_id": tid})
    return "published"


def _send_undo(store: Any, a: dict[str, Any]) -> str:
    try:
        store.link.attempt(lambda: store.link.index.undo_accept(a["team_id"], when=a.get("undone"),
                                                                by=a.get("undone_by")))
    except Offline:
        return "offline"
    store.local.index.set_accept_team(a["id"], a["team_id"])
    return "undone"


def undo(store: Any, accept_id: int, by: str) -> dict[str, Any]:
    """``TeamStore.undo_accept``: here at once, then on the team index (``team``: ``undone``,
    ``offline``: sent by ``memolab sync``; None for an accept the team never had)."""
    index = store.local.index
    got = index.accepts(ids=[accept_id], active=False)
    a = got[0] if got else None
    done = index.undo_accept(accept_id, by=by, pending=a is not None and a.get("team_id") is not None)
    if a is None or a.get("team_id") is None:
        return {"undone": done, "team": None}
    now = index.accepts(ids=[accept_id], active=False)[0]
    return {"undone": done, "team": _send_undo(store, now)}


def push(store: Any) -> dict[str, int]:
    """Send what the team index lacks: accepts made here while it was unreachable, and undos
    (``memolab sync``). ``Offline`` if it is down."""
    index = store.local.index
    sent = undone = 0
    for a in index.accepts(active=False):
        if a.get("origin") == "here" and a.get("team_id") is None and a.get("undone") is None:
            state = _publish(store, a["id"])
            if state == "offline":
                raise Offline()
            sent += state == "published"
        elif a.get("pending_undo") and a.get("team_id") is not None:
            if _send_undo(store, a) == "offline":
                raise Offline()
            undone += 1
    return {"accepts": sent, "undos": undone}
