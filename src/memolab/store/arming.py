"""A connection of the index is armed before it writes, and refuses writes until then.

The kept counts and the argument index follow the writes to ``evaluations``, ``runs`` and
``run_args`` through ``TEMP`` triggers that each writing connection makes for itself
(``tracking.temptriggers``: a file holding them would make every connection, a fresh process's
first hit included, parse them). The store makes them on its connection before a write
transaction (``arm``: the tracking layer's ``ARM``, imported then, as ``TEAM_STORE_FACTORY`` is: the
store never imports the layers above it), and until then refuses a write to those tables
(``Refusal``, an SQLite authorizer set on every connection it opens): a write that bypassed arming
fails with "not authorized" instead of leaving the counts behind, and is found by the tests that
make it.

A connection is armed for the writes it is about to make (``Write``: a table and an action), and
by default for every one (``EVERY``): making a trigger costs about three times parsing it, and a
process that only hits writes one thing, its hit counts at exit (``HIT_COUNTS``: one trigger of
the thirteen).
"""
from __future__ import annotations

import importlib
import sqlite3
from typing import Any

__all__ = ["ARM", "ARGS_MARKER", "COUNTS_MARKER", "EVERY", "FOLLOWED", "HIT_COUNTS", "Refusal", "Write", "arm"]

#: what arms a connection (``module:function``): the tracking layer's, a plug-in here
ARM = "memolab.tracking.schema:arm"

#: the tables whose writes the ``TEMP`` triggers follow
FOLLOWED = frozenset(("evaluations", "runs", "run_args"))

#: the ``meta`` keys that say the kept counts and the argument index were filled and the armed
#: connections keep them (``tracking.counts.MARKER``, ``tracking.argindex.MARKER``: named here, where
#: the store's own reads of the counts ask for it)
COUNTS_MARKER = "kept:counts"
ARGS_MARKER = "kept:args"

#: a write a connection is armed for: (table, ``sqlite3.SQLITE_INSERT``, ``_UPDATE`` or ``_DELETE``)
Write = tuple[str, int]
_ACTIONS = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
EVERY: frozenset[Write] = frozenset((t, a) for t in FOLLOWED for a in _ACTIONS)
#: the batched hit counts (``upkeep.write_usage``): an update of ``evaluations``
HIT_COUNTS: frozenset[Write] = frozenset({("evaluations", sqlite3.SQLITE_UPDATE)})


class Refusal:
    """SQLite authorizer of a connection not armed for every write: a write to a followed table of
    the file that it is not armed for is refused (SQLite asks when a statement is prepared, not
    when a prepared one runs again)."""

    __slots__ = ("armed",)

    def __init__(self, armed: frozenset[Write]) -> None:
        self.armed = armed

    def __call__(self, action: int, table: str | None, _column: str | None, db: str | None, _source: str | None) -> int:
        if action in _ACTIONS and table in FOLLOWED and db == "main" and (table, action) not in self.armed:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK


#: a connection armed for nothing yet (every connection the index opens starts so)
NOTHING: frozenset[Write] = frozenset()


def arm(c: sqlite3.Connection, wanted: frozenset[Write], armed: frozenset[Write]) -> frozenset[Write]:
    """Arm connection ``c``, armed for ``armed`` so far, for ``wanted`` too (outside a transaction:
    its ``TEMP`` triggers made inside one would go with its rollback), and refuse only the writes it
    is not armed for; what it is armed for now (nothing while the file has no ``evaluations`` table
    yet: a store being made, whose first transaction writes no row)."""
    module, _, name = ARM.partition(":")
    fn: Any = getattr(importlib.import_module(module), name)
    now = armed | wanted if fn(c, wanted) else armed
    c.set_authorizer(None if now >= EVERY else Refusal(now))
    return frozenset(now)
