"""A connection of the index is armed before it writes, and refuses writes until then.

The kept counts and the argument index follow the writes to ``evaluations``, ``runs`` and
``run_args`` through ``TEMP`` triggers that each writing connection makes for itself
(``tracking.kept``: a file holding them would make every connection, a fresh process's first hit
included, parse them). The store makes them on its connection before its first write transaction
(``arm``: the tracking layer's ``ARM``, imported then, as ``TEAM_STORE_FACTORY`` is: the store never
imports the layers above it), and until then refuses a write to those tables (``refuse_unarmed``,
an SQLite authorizer set on every connection it opens): a write that bypassed arming fails with
"not authorized" instead of leaving the counts behind, and is found by the tests that make it.
"""
from __future__ import annotations

import importlib
import sqlite3
from typing import Any

__all__ = ["ARM", "ARGS_MARKER", "COUNTS_MARKER", "FOLLOWED", "arm", "refuse_unarmed"]

#: what arms a connection (``module:function``): the tracking layer's, a plug-in here
ARM = "memolab.tracking.schema:arm"

#: the tables whose writes the ``TEMP`` triggers follow
FOLLOWED = frozenset(("evaluations", "runs", "run_args"))

#: the ``meta`` keys that say the kept counts and the argument index were filled and the armed
#: connections keep them (``tracking.counts.MARKER``, ``tracking.argindex.MARKER``: named here, where
#: the store's own reads of the counts ask for it)
COUNTS_MARKER = "kept:counts"
ARGS_MARKER = "kept:args"

_WRITES = frozenset((sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE))


def refuse_unarmed(action: int, table: str | None, _column: str | None, db: str | None, _source: str | None) -> int:
    """SQLite authorizer of a connection not armed yet: a write to a followed table of the file is
    refused (SQLite calls it when a statement is prepared, not when it runs again)."""
    if action in _WRITES and table in FOLLOWED and db == "main":
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def arm(c: sqlite3.Connection) -> bool:
    """Arm connection ``c`` (outside a transaction: its ``TEMP`` triggers made inside one would go
    with its rollback) and lift its refusal; whether it is armed (False while the file has no
    ``evaluations`` table yet: a store being made, whose first transaction writes no row)."""
    module, _, name = ARM.partition(":")
    fn: Any = getattr(importlib.import_module(module), name)
    if not fn(c):
        return False
    c.set_authorizer(None)
    return True
