"""Tables kept by triggers that live on the connections that write, not in the file.

SQLite parses every trigger a file holds on a connection's first statement, whatever that
statement is. The 13 triggers of the kept counts (``counts``) and the argument index
(``argindex``), 7 KB of SQL, were about 0.45 ms of a fresh process's first hit, which reads one
row. So they are ``TEMP`` triggers: made by a connection before its first write (``arm``) and
parsed there only; a connection that only reads parses none of them.

Who keeps the tables, then:

* this memolab: every connection of a store's index is armed before its first write
  transaction (``store.arming``), and until then refuses any write to the tables the triggers
  follow: a write path that forgot to arm fails loudly ("not authorized") instead of leaving the
  counts behind;
* an older memolab (0.4.3 and before): it asks for its triggers in the file by name and, where
  one is missing, counts the rows again and makes them, in one transaction; from then on they
  count.

Each ``TEMP`` trigger stands down while a trigger of its own name is in the file (``guard``): a
store that has an older memolab's triggers counts once, by those. And it counts only once the
tables were filled (the marker in ``meta``, written in the fill's own transaction): a connection
armed before the fill never adds to counts that the fill then makes again.

A store that has the older memolab's triggers keeps them until a writable open finds no other
process connected to the file (``store.walpeers``), then drops them and writes the marker, in one
transaction (``move``): a process of an older memolab connected at that moment would otherwise go
on writing without them. An older memolab that makes them again later is left its triggers (no
recount at every change of version): the ``TEMP`` ones stand down.
"""
from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from typing import Any

from ..store.inlist import placeholders

_CREATE = re.compile(r"CREATE TRIGGER IF NOT EXISTS (\w+) (BEFORE|AFTER) (.+?) ON (\w+) (?:WHEN (.+?) )?BEGIN (.*)\Z",
                     re.DOTALL)


def guard(name: str, marker: str) -> str:
    """SQL: a ``TEMP`` trigger named ``name`` counts: the tables were filled (``marker`` in
    ``meta``) and no trigger of its name is in the file (an older memolab's: that one counts)."""
    return (f"EXISTS (SELECT 1 FROM main.meta WHERE key = '{marker}') AND NOT EXISTS "
            f"(SELECT 1 FROM main.sqlite_master WHERE type = 'trigger' AND name = '{name}')")


def temp_form(create: str, marker: str) -> str:
    """The ``TEMP`` form of a ``CREATE TRIGGER IF NOT EXISTS name {BEFORE|AFTER} event ON table
    [WHEN cond] BEGIN …`` statement: on ``main.table``, its condition behind ``guard``. The body
    is the same: SQLite resolves a ``TEMP`` trigger's unqualified names in ``temp`` first, and a
    connection that writes has no ``temp`` table of those names (``shim_tables`` makes them only
    on a read-only connection)."""
    m = _CREATE.match(create)
    if m is None:
        raise ValueError(f"not a trigger memolab makes: {create[:80]!r}")
    name, when, event, table, cond, body = m.groups()
    test = guard(name, marker) + (f" AND ({cond})" if cond else "")
    return f"CREATE TEMP TRIGGER IF NOT EXISTS {name} {when} {event} ON main.{table} WHEN {test} BEGIN {body}"


def names_of(creates: Iterable[str]) -> tuple[str, ...]:
    """The names of the triggers ``creates`` make (in the file, or ``TEMP``)."""
    out = []
    for create in creates:
        m = _NAME.match(create)
        if m is None:
            raise ValueError(f"not a trigger memolab makes: {create[:80]!r}")
        out.append(m.group(1))
    return tuple(out)


def write_of(create: str) -> tuple[str, int]:
    """(table, ``sqlite3.SQLITE_INSERT``, ``_UPDATE`` or ``_DELETE``): the write the trigger of
    ``create`` (in the file, or ``TEMP``) follows (``store.arming.Write``)."""
    m = _EVENT.search(create)
    if m is None:
        raise ValueError(f"not a trigger memolab makes: {create[:80]!r}")
    return m.group(3), _ACTIONS[m.group(2)]


_EVENT = re.compile(r"^CREATE (?:TEMP )?TRIGGER IF NOT EXISTS \w+ (BEFORE|AFTER) (INSERT|UPDATE|DELETE)\b.*? "
                    r"ON (?:main\.)?(\w+) ", re.DOTALL)
_ACTIONS = {"INSERT": sqlite3.SQLITE_INSERT, "UPDATE": sqlite3.SQLITE_UPDATE, "DELETE": sqlite3.SQLITE_DELETE}

_NAME = re.compile(r"CREATE (?:TEMP )?TRIGGER IF NOT EXISTS (\w+) ")


def marked(c: Any, marker: str) -> bool:
    """Whether the file ``c`` reads says its tables were filled and are kept by armed
    connections (False where it has no ``meta``: a logs bundle's own file)."""
    try:
        return c.execute("SELECT 1 FROM main.meta WHERE key = ?", (marker,)).fetchone() is not None
    except sqlite3.OperationalError:  # no meta table: not a store's index
        return False


def mark(c: sqlite3.Connection, marker: str) -> None:
    """Write the marker (in the caller's write transaction: with the fill, or with the drop of the
    older triggers)."""
    c.execute("INSERT OR REPLACE INTO main.meta(key, value) VALUES (?, 'armed connections')", (marker,))


def in_file(c: Any, names: tuple[str, ...]) -> set[str]:
    """Which triggers of ``names`` the file holds (an older memolab's)."""
    q = placeholders(len(names))
    return {n for (n,) in c.execute(f"SELECT name FROM main.sqlite_master WHERE type='trigger' AND name IN ({q})", names)}


def armed(c: Any, names: tuple[str, ...]) -> bool:
    """Whether connection ``c`` holds every ``TEMP`` trigger of ``names``."""
    q = placeholders(len(names))
    return int(c.execute(f"SELECT COUNT(*) FROM temp.sqlite_master WHERE type='trigger' AND name IN ({q})",
                         names).fetchone()[0]) == len(names)

