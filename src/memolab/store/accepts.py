"""Accepted code changes (``memolab accept``): "this code gives the same results as that code".

An accept is a fact a person states, never one memolab infers: for one memoized function
(its symbol ``fn``) under one key schema, calls keyed with the code digest ``new_code`` may
use the evaluations stored under ``old_code``. It is the user's answer to a miss caused only
by code (a log line, a progress bar, a rename): memolab showed the diff, the user confirmed.

Why it is safe, by construction:

- It maps a *whole code digest* to another. The digest covers the function and every piece
  of code it depends on (docs/code-dependencies.md), so an accept covers exactly the change
  the user was shown, all dependencies together, and nothing else: a later edit makes
  another digest, which no accept names (a miss, as always).
- It replaces only the code part of a key: a call is looked up under ``(fn, old_code,
  args, schema)`` with its own function symbol, argument digest (and global generator
  states) and key schema. The row found is then used as any row is: its signature over its
  own key, the code references it holds (checked on load), its generator states
  (``call.Call.reroute``), its expiry.
- Chains: ``new -> old`` where ``old -> older`` was accepted too reaches rows stored under
  ``older`` (each link was stated by someone), nearest first, at most ``MAX_LINKS`` links.
- Undone (``memolab accept --undo``), it no longer applies: a miss again. Rows are kept as a
  history (who accepted, who took it back, when).
- With ``MEMOLAB_HMAC_KEY`` set, an accept is signed when recorded and one that does not
  verify (made without the key, or forged in a shared index) is never followed.

This module is the store's half: the SQL of the local index's ``accepts`` table (its
``CREATE`` is in ``schema.DDL``, added by schema step 3), signing, and following chains.
"""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import MemolabWarning, swallowed
from . import signing
from .inlist import placeholders

__all__ = ["COLUMNS", "SIGNED", "MAX_LINKS", "sign", "problem", "resolve", "who", "AcceptIndex", "summary", "short",
           "covering", "usable", "record", "decoded"]

#: the columns of the local ``accepts`` table (``schema.DDL``)
COLUMNS = ("id", "fn", "schema", "new_code", "old_code", "time", "user_name", "host", "deps_before", "deps_after",
           "diffs", "evaluation", "undone", "undone_by", "team_id", "origin", "pending_undo", "signature")
#: what an accept's signature covers: everything that decides what it does, and who said so when
SIGNED = ("fn", "schema", "new_code", "old_code", "time", "user_name", "host")
#: the longest chain of accepts a call follows (each link a stated change)
MAX_LINKS = 8
#: the most codes a call looks under through accepts (a function accepted many times over)
MAX_CODES = 32


def _message(rec: dict[str, Any]) -> list[str]:
    return ["accept"] + [str(rec.get(f)) for f in SIGNED]


def sign(rec: dict[str, Any]) -> str | None:
    """The signature of accept ``rec`` under ``MEMOLAB_HMAC_KEY`` (None without one)."""
    return signing.sign(_message(rec), {})


def problem(rec: dict[str, Any]) -> str | None:
    """Why accept ``rec`` must not be followed under the current key, or None."""
    return signing.problem(_message(rec), {"signature": rec.get("signature")})


def who() -> tuple[str, str]:
    """(user, host) of this process: who an accept or an undo is recorded as made by."""
    import getpass

    from .process import host_name

    try:
        user = getpass.getuser()
    except (OSError, KeyError, ImportError):  # no user name (a container without a passwd entry)
        swallowed("store.accepts: who")
        import os

        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "?"
    return user, host_name()


def resolve(accepts: Iterable[dict[str, Any]], code: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The codes a call keyed with ``code`` may use, through the active ``accepts`` of its function
    and key schema: [(old code, [the accepts followed, first link first])], nearest first (one link,
    then two, ...), newest accept first among equals; ``code`` itself and cycles excluded; at most
    ``MAX_LINKS`` links and ``MAX_CODES`` codes."""
    by_new: dict[str, list[dict[str, Any]]] = {}
    for a in accepts:
        by_new.setdefault(a["new_code"], []).append(a)
    for links in by_new.values():
        links.sort(key=lambda a: (-(a.get("time") or 0.0), -(a.get("id") or 0)))
    out: list[tuple[str, list[dict[str, Any]]]] = []
    seen = {code}
    frontier: list[tuple[str, list[dict[str, Any]]]] = [(code, [])]
    for _ in range(MAX_LINKS):
        nxt: list[tuple[str, list[dict[str, Any]]]] = []
        for c, chain in frontier:
            for a in by_new.get(c, ()):
                old = a["old_code"]
                if old in seen:
                    continue
                seen.add(old)
                out.append((old, chain + [a]))
                nxt.append((old, chain + [a]))
                if len(out) >= MAX_CODES:
                    return out
        if not nxt:
            break
        frontier = nxt
    return out


def short(code: str | None) -> str:
    return (code or "?")[:8]


def summary(a: dict[str, Any]) -> str:
    """One line: ``accept #3: code 5e6f7a8b… = 1a2b3c4d… (accepted by alice@box 2026-01-02 12:00)``."""
    import datetime as _dt

    when = _dt.datetime.fromtimestamp(a["time"]).strftime("%Y-%m-%d %H:%M") if a.get("time") else "?"
    line = (f"accept #{a.get('id')}: code {short(a['new_code'])}… gives the results of code {short(a['old_code'])}… "
            f"(accepted by {a.get('user_name') or '?'}@{a.get('host') or '?'} {when})")
    if a.get("undone"):
        undone = _dt.datetime.fromtimestamp(a["undone"]).strftime("%Y-%m-%d %H:%M")
        line += f", undone by {a.get('undone_by') or '?'} {undone}"
    return line


def decoded(a: dict[str, Any], field: str) -> dict[str, Any]:
    """A JSON column of an accept (``deps_before``, ``deps_after``, ``diffs``) as a dict ({} if damaged)."""
    try:
        v = json.loads(a.get(field) or "{}")
    except (ValueError, TypeError):
        return {}
    return v if isinstance(v, dict) else {}


def covering(index: Any, fn: str, codes: Sequence[str], active: bool = True) -> dict[str, list[dict[str, Any]]]:
    """code -> the accepts of ``fn`` naming it (as the new code or the old one), for ``show``,
    ``why``, ``runs`` and the dashboard; {} for an index without accepts."""
    accepts = getattr(index, "accepts", None)
    if accepts is None:
        return {}
    try:
        found = accepts(fn, active=active)
    except (sqlite3.Error, OSError):  # the local index (a NoStore's raises StoreUnavailable): information here
        swallowed("store.accepts: covering")
        return {}
    want = set(codes)
    out: dict[str, list[dict[str, Any]]] = {}
    for a in found:
        for c in (a["new_code"], a["old_code"]):
            if c in want:
                out.setdefault(c, []).append(a)
    return out



_SELECT = f"SELECT {', '.join(COLUMNS)} FROM accepts"


class AcceptIndex:
    """The ``accepts`` table of an SQLite index (the local one, or a team index on SQLite):
    mixed into ``store.sqlite.Index``, which gives ``conn()`` and ``write()``."""

    #: (a team index on PostgreSQL at schema 1 has none: ``team.pgaccepts``)
    accepts_supported = True

    def conn(self) -> sqlite3.Connection:  # pragma: no cover (the index's own)
        raise NotImplementedError

    def write(self, arms: Any = None) -> Any:  # pragma: no cover (the index's own)
        raise NotImplementedError

    def _accepts_table(self) -> bool:
        # a file an older memolab wrote, opened read-only, has it as a temporary table (schema.read_shims)
        return self.conn().execute("SELECT 1 FROM sqlite_master WHERE name='accepts' UNION ALL "
                                   "SELECT 1 FROM sqlite_temp_master WHERE name='accepts'").fetchone() is not None

    def accepts(self, fn: str | None = None, schema: str | None = None, active: bool = True,
                ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Accepts (of ``fn``, under ``schema``), oldest first; ``active``: those not undone."""
        clauses: list[str] = []
        params: list[Any] = []
        if fn is not None:
            clauses.append("fn=?")
            params.append(fn)
        if schema is not None:
            clauses.append("schema=?")
            params.append(schema)
        if active:
            clauses.append("undone IS NULL")
        if ids is not None:
            ids = [int(i) for i in ids]
            clauses.append(f"id IN ({placeholders(len(ids)) or 'NULL'})")
            params.extend(ids)
        sql = _SELECT + (" WHERE " + " AND ".join(clauses) if clauses else "") + " ORDER BY id"
        try:
            rows = self.conn().execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            if self._accepts_table():
                raise
            return []  # an index without the table (nothing accepted in it yet)
        return [dict(zip(COLUMNS, r, strict=False)) for r in rows]

    def add_accept(self, rec: dict[str, Any]) -> int:
        """Record accept ``rec`` (its columns; ``time`` defaults to now); its id."""
        rec = dict(rec)
        rec.setdefault("time", time.time())
        cols = [c for c in COLUMNS if c != "id" and rec.get(c) is not None]
        with self.write() as c:
            cur = c.execute(f"INSERT INTO accepts({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                            [rec[k] for k in cols])
            return int(cur.lastrowid)

    def undo_accept(self, accept_id: int, when: float | None = None, by: str | None = None,
                    pending: bool = False) -> bool:
        """Take accept ``accept_id`` back (it stays, as history); whether it was active.
        ``pending``: the undo is still to be sent to the team index."""
        with self.write() as c:
            return bool(c.execute("UPDATE accepts SET undone=?, undone_by=?, pending_undo=? WHERE id=? AND undone IS NULL",
                             (time.time() if when is None else when, by, 1 if pending else 0,
                              int(accept_id))).rowcount > 0)

    def set_accept_team(self, accept_id: int, team_id: int | None, pending_undo: bool = False) -> None:
        """Accept ``accept_id`` is on the team index as ``team_id`` (its undo sent, unless ``pending_undo``)."""
        with self.write() as c:
            c.execute("UPDATE accepts SET team_id=?, pending_undo=? WHERE id=?",
                      (team_id, 1 if pending_undo else 0, int(accept_id)))


_refused: set[tuple[Any, ...]] = set()


def usable(recs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The accepts of ``recs`` that may be followed: those whose signature verifies under the
    current key (all of them without a key). One that does not is said once per process."""
    out = []
    for a in recs:
        bad = problem(a)
        if bad is None:
            out.append(a)
            continue
        mark = (a.get("fn"), a.get("id"), a.get("team_id"))
        if mark not in _refused:
            _refused.add(mark)
            import warnings

            warnings.warn(f"memolab: {summary(a)} is not followed: {bad}", MemolabWarning, stacklevel=3)
    return out


def record(index: Any, rec: dict[str, Any]) -> int:
    """Sign and record accept ``rec`` in ``index``; its id there."""
    rec = dict(rec)
    rec.setdefault("time", time.time())
    rec["signature"] = sign(rec)
    return int(index.add_accept(rec))
