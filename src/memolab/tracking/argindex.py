"""Every run's arguments in value order: what sorting, filtering and grouping a million runs by
an argument read instead of the million runs' JSON.

A run records its arguments as JSON (``runs.hparams``: ``{"cfg": {"optim": {"lr": 0.1}}, "seed": 3}``).
The dashboard sorts and filters a function's runs by an argument and groups them by one; done on
``json_extract`` that is a pass over every run (and a sort of them) at each page. Tables in the
store's index make it an index range:

* ``run_args(fn, name, value, started, run)``: one row per run and flattened argument
  (``cfg.optim.lr``, as ``names.flatten`` names the page's columns), ordered by value, then newest
  first (``runs_fn``'s order: ``started``, then ``id``, descending): a page of a sort by an argument
  is a range of it, a filter ``lr<=0.01`` another, a group (the runs with one value) another;
* ``arg_names(fn, name, runs, groups)``: per function and argument, how many runs have it and how
  many distinct values it takes (the group statistics' "first 200 of N"), kept by triggers on
  ``run_args``;
* ``args_pending(run)``: the runs written since ``run_args`` was last brought up to date.

**Who pays.** A run's write (a miss records one) pays one row in ``args_pending``, appended by
SQLite triggers on ``runs`` whoever writes them (a call, gc, a team pull, a logs bundle, an older
memolab: ``TEMP`` triggers of the writing connection, or an older memolab's in the file).
Indexing its arguments there, one b-tree entry per argument (and a trigger each), made a miss of
a 7-argument function about 1.3x in CPU; it is done instead by the reader that needs it
(``sync``: the dashboard's sort, filter or group statistics), for the runs written since the last
one, in one write transaction of set-based statements (past ``REBUILD`` pending runs: the tables
rebuilt in index order, as a store's first fill).

What a value is (``VALUE``): a number stays a number, a text a text, ``true``/``false`` the texts the
page shows, a list or an empty object its JSON text; ``null`` (and a run whose ``hparams`` is not
JSON: an older writer's NaN) is no row: such a run sorts with the runs without the argument, last.
SQLite orders numbers (as numbers) before texts (by their bytes: the page's own order of text), the
order the page's table used to sort its window in.

The triggers are ``TEMP`` triggers of each connection that writes (``temptriggers``, as the
counts'); an older memolab keeps the tables with the same triggers in the file, which the ``TEMP``
ones then leave to it.

A store gains them the first time a memolab with them opens it to log (``tracking.schema.ensure``,
as ``counts.install``): the tables, the marker (``MARKER``), and one pending mark that has the
first reader fill them. Where they are missing (an older store read as it is), or pending runs
cannot be indexed (a read-only store), ``sync`` says so and readers fall back to ``json_extract``
over the runs. ``doctor`` tells and rebuilds what drifted from the runs, whatever the cause
(``check``).
"""
from __future__ import annotations

import sqlite3
from typing import Any

from ..errors import swallowed
from ..store import arming
from . import temptriggers
from .counts import install_once, move

TABLES = """
CREATE TABLE IF NOT EXISTS run_args(
    fn TEXT NOT NULL, name TEXT NOT NULL, value NOT NULL, started REAL NOT NULL, run INTEGER NOT NULL,
    PRIMARY KEY(fn, name, value, started DESC, run DESC)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_args_run ON run_args(run);
CREATE TABLE IF NOT EXISTS arg_names(
    fn TEXT NOT NULL, name TEXT NOT NULL, runs INTEGER NOT NULL, groups INTEGER NOT NULL,
    PRIMARY KEY(fn, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS args_pending(run INTEGER PRIMARY KEY)
"""

#: ``args_pending``'s mark that every run is to be indexed (a run id is at least 1)
EVERY = 0
#: pending runs past which ``sync`` rebuilds the tables (in index order) rather than updating them
REBUILD = 20_000

#: an argument's value as the tables keep it (``t``: a row of ``json_tree``)
VALUE = ("CASE t.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' WHEN 'array' THEN t.value "
         "WHEN 'object' THEN t.value ELSE t.atom END")


def leaves(row: str) -> str:
    """SQL: (fn, name, value, started, run) of each flattened argument of the runs row ``row``
    (``NEW``, ``OLD``, an alias): the leaves of its JSON that are not inside a list (a list is one
    value), named as ``names.flatten`` names them (``cfg.optim.lr``; json_tree quotes a key that is
    not a plain word: the quotes go)."""
    h = f"{row}.hparams"
    return (f"SELECT {row}.fn AS fn, replace(substr(t.fullkey, 3), '\"', '') AS name, {VALUE} AS value, "
            f"{row}.started AS started, {row}.id AS run "
            f"FROM json_tree(CASE WHEN json_valid({h}) THEN {h} END) t "
            "WHERE typeof(t.key) = 'text' AND instr(t.path, '[') = 0 AND t.type != 'null' "
            "AND (t.type != 'object' OR t.value = '{}')")


# another run with this run's value of the argument (the group goes on, or was there already)
_OTHER = ("EXISTS (SELECT 1 FROM run_args WHERE fn = {r}.fn AND name = {r}.name AND value = {r}.value "
          "AND run != {r}.run)")
_PENDING = "INSERT OR IGNORE INTO args_pending(run) VALUES ({}.id);"

TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS args_run_add AFTER INSERT ON runs BEGIN " + _PENDING.format("NEW") + " END",
    "CREATE TRIGGER IF NOT EXISTS args_run_drop AFTER DELETE ON runs BEGIN " + _PENDING.format("OLD") + " END",
    "CREATE TRIGGER IF NOT EXISTS args_run_move AFTER UPDATE OF id, fn, hparams, started ON runs "
    "WHEN OLD.id IS NOT NEW.id OR OLD.fn IS NOT NEW.fn OR OLD.hparams IS NOT NEW.hparams "
    "OR OLD.started IS NOT NEW.started BEGIN " + _PENDING.format("OLD") + " " + _PENDING.format("NEW") + " END",
)
#: ``arg_names`` follows ``run_args`` (made and dropped around a rebuild)
NAME_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS args_name_add AFTER INSERT ON run_args BEGIN "
    "INSERT INTO arg_names(fn, name, runs, groups) VALUES (NEW.fn, NEW.name, 1, NOT " + _OTHER.format(r="NEW")
    + ") ON CONFLICT(fn, name) DO UPDATE SET runs = runs + 1, groups = groups + excluded.groups; END",
    "CREATE TRIGGER IF NOT EXISTS args_name_drop AFTER DELETE ON run_args BEGIN "
    "UPDATE arg_names SET runs = runs - 1, groups = groups - NOT " + _OTHER.format(r="OLD")
    + " WHERE fn = OLD.fn AND name = OLD.name; END",
)

_NAMES = ("args_run_add", "args_run_drop", "args_run_move", "args_name_add", "args_name_drop")
_NAME_TRIGGERS = ("args_name_add", "args_name_drop")
#: the ``meta`` key that says the tables were made and the armed connections keep them (``temptriggers``)
MARKER = arming.ARGS_MARKER

#: what the tables hold, made from the rows (install, ``check``)
_LEAVES_OF_ALL = "SELECT * FROM (" + leaves("r").replace("FROM json_tree", "FROM runs r, json_tree") + ")"
#: (of the runs pending)
_LEAVES_PENDING = ("SELECT * FROM (" + leaves("r").replace("FROM json_tree", "FROM runs r, json_tree")
                   + " AND r.id IN (SELECT run FROM args_pending))")
_RECOUNT_NAMES = "SELECT fn, name, COUNT(*), COUNT(DISTINCT value) FROM run_args GROUP BY fn, name"


def available(c: Any) -> bool:
    """Whether the file ``c`` reads keeps the tables: made and kept by armed connections (its
    marker), or every trigger of an older memolab is in it (a ``temp`` shim is an empty table)."""
    return temptriggers.marked(c, MARKER) or len(temptriggers.in_file(c, _NAMES)) == len(_NAMES)


def install(c: sqlite3.Connection) -> bool:
    """Make the tables on a writable index that lacks them, with every run pending (the first
    reader fills them: ``sync``) and the marker, in one write transaction (the caller's, if it is
    in one); whether it made them. An older memolab's triggers in the file are left to armed
    connections where no other process has it open (``counts.move``)."""
    if temptriggers.marked(c, MARKER):
        return False
    if len(temptriggers.in_file(c, _NAMES)) == len(_NAMES):
        move(c, MARKER, _NAMES)
        return False
    return install_once(c, available, _make)


def temp_triggers() -> tuple[str, ...]:
    """The index's triggers as an armed connection makes them (``temptriggers.temp_form``)."""
    return tuple(temptriggers.temp_form(s, MARKER) for s in (*TRIGGERS, *NAME_TRIGGERS))


def _make(c: sqlite3.Connection) -> None:
    for stmt in statements():
        c.execute(stmt)
    c.execute("INSERT OR IGNORE INTO args_pending(run) VALUES (?)", (EVERY,))
    temptriggers.mark(c, MARKER)


def statements() -> list[str]:
    """The tables' ``CREATE … IF NOT EXISTS`` statements, one by one."""
    return [x.strip() for x in TABLES.split(";") if x.strip()]


def sync(index: Any) -> bool:
    """Bring ``run_args`` up to date with the runs written since it last was (their arguments
    indexed, in one write transaction); whether it can be read (False: not kept, or runs pending on
    a store this process may not write, or busy past the timeout: read the runs' JSON)."""
    c = index.conn()
    if not available(c):
        return False
    if c.execute("SELECT 1 FROM args_pending LIMIT 1").fetchone() is None:
        return True
    if getattr(index, "read_only", False):
        return False
    try:
        with index.write() as w:
            drain(w)
    except sqlite3.OperationalError:  # another writer held the store past the busy timeout
        swallowed("tracking.argindex: sync")
        return False
    return True


def drain(c: sqlite3.Connection) -> None:
    """Index the pending runs' arguments (in the caller's write transaction): those runs' rows
    replaced by what their JSON says now (a run gone: none); past ``REBUILD`` of them, or with
    ``EVERY`` pending, all rebuilt."""
    n = int(c.execute("SELECT COUNT(*) FROM args_pending").fetchone()[0])
    if not n:
        return
    if n > REBUILD or c.execute("SELECT 1 FROM args_pending WHERE run = ?", (EVERY,)).fetchone():
        _rebuild(c)
        return
    c.execute("DELETE FROM run_args WHERE run IN (SELECT run FROM args_pending)")
    c.execute(f"INSERT OR IGNORE INTO run_args(fn, name, value, started, run) {_LEAVES_PENDING}")
    c.execute("DELETE FROM args_pending")


def _rebuild(c: sqlite3.Connection) -> None:
    """Every run's arguments, in the primary key's order (the b-tree appended to, not written at
    random places), and the counts from them, without ``arg_names``' triggers firing row by row:
    this connection's ``TEMP`` ones and an older memolab's in the file are dropped, and made again
    after (in the caller's write transaction: no other connection writes meanwhile)."""
    in_file = temptriggers.in_file(c, _NAME_TRIGGERS)
    armed = temptriggers.armed(c, _NAME_TRIGGERS)
    for name in _NAME_TRIGGERS:
        c.execute(f"DROP TRIGGER IF EXISTS main.{name}")
        c.execute(f"DROP TRIGGER IF EXISTS temp.{name}")
    for stmt in statements():
        c.execute(stmt)
    c.execute("DROP INDEX IF EXISTS run_args_run")  # (made again once, by a sort: not entry by entry)
    c.execute("DELETE FROM run_args")
    c.execute("DELETE FROM arg_names")
    c.execute(f"INSERT OR IGNORE INTO run_args(fn, name, value, started, run) {_LEAVES_OF_ALL} "
              "ORDER BY 1, 2, 3, 4 DESC, 5 DESC")
    c.execute(f"INSERT INTO arg_names(fn, name, runs, groups) {_RECOUNT_NAMES}")
    c.execute("DELETE FROM args_pending")
    for stmt in statements():
        c.execute(stmt)
    for stmt in NAME_TRIGGERS:
        if temptriggers.names_of([stmt])[0] in in_file:
            c.execute(stmt)
        if armed:
            c.execute(temptriggers.temp_form(stmt, MARKER))


def check(c: sqlite3.Connection, repair: bool = False) -> list[str]:
    """What the tables say that the runs do not (``doctor``; runs pending are not compared: their
    rows are made when next read): one line per kind of difference; with ``repair``, rebuilt.
    O(runs): ``doctor`` reads them anyway."""
    if not available(c):
        return []
    out = []
    if c.execute("SELECT 1 FROM args_pending WHERE run = ?", (EVERY,)).fetchone() is None:
        done = "run NOT IN (SELECT run FROM args_pending)"
        extra = c.execute(f"SELECT COUNT(*) FROM (SELECT * FROM run_args WHERE {done} EXCEPT "
                          f"SELECT * FROM ({_LEAVES_OF_ALL}) WHERE {done})").fetchone()[0]
        missing = c.execute(f"SELECT COUNT(*) FROM (SELECT * FROM ({_LEAVES_OF_ALL}) WHERE {done} EXCEPT "
                            f"SELECT * FROM run_args WHERE {done})").fetchone()[0]
        if extra or missing:
            out.append(f"argument index: {missing} run argument(s) missing, {extra} of no run")
    want = set(c.execute(_RECOUNT_NAMES))
    have = {r for r in c.execute("SELECT fn, name, runs, groups FROM arg_names") if r[2] or r[3]}
    if want != have:
        out.append(f"argument counts: {len(want ^ have)} row(s) differ")
    if out and repair:
        _rebuild(c)
    return out


def leaf_count(row: str) -> str:
    """SQL: how many rows of ``run_args`` the runs row ``row`` has once indexed (``doctor``'s walk
    over the runs counts them per function in the same statement)."""
    return f"(SELECT COUNT(*) FROM (SELECT DISTINCT name, value FROM ({leaves(row)})))"


def walk_differences(c: Any, per_fn: dict[Any, int]) -> list[str]:
    """What ``run_args`` and ``arg_names`` say that the runs do not, from the runs' argument counts
    per function (``per_fn``: ``leaf_count`` summed over the runs not pending, from ``doctor``'s one
    walk over them): ``run_args`` is read once (grouped by function and name), ``args_pending`` and
    the pending runs' rows by key. Counts only: a row that names a wrong value but is there is not
    seen (nothing memolab writes makes one; ``check`` compares the rows)."""
    if not available(c) or c.execute("SELECT 1 FROM args_pending WHERE run = ?", (EVERY,)).fetchone():
        return []
    names = {(r[0], r[1]): (r[2], r[3]) for r in c.execute(_RECOUNT_NAMES)}
    have = {(r[0], r[1]): (r[2], r[3]) for r in c.execute("SELECT fn, name, runs, groups FROM arg_names")
            if r[2] or r[3]}
    out = []
    if names != have:
        out.append(f"argument counts: {len(set(names.items()) ^ set(have.items()))} row(s) differ")
    rows: dict[Any, int] = {}
    for (fn, _), (n, _) in names.items():
        rows[fn] = rows.get(fn, 0) + n
    for fn, n in c.execute("SELECT fn, COUNT(*) FROM run_args WHERE run IN (SELECT run FROM args_pending) GROUP BY fn"):
        rows[fn] -= n  # (the pending runs' rows are made again when next read)
    bad = sorted(fn.decode("utf-8", "replace") if isinstance(fn, bytes) else str(fn)
                 for fn in set(rows) | set(per_fn) if rows.get(fn, 0) != per_fn.get(fn, 0))
    if bad:
        out.append(f"argument index: the runs of {', '.join(bad[:5])} have other arguments than it holds")
    return out


def rebuild(c: sqlite3.Connection) -> None:
    """``run_args`` and ``arg_names`` made again from every run (``doctor``'s repair)."""
    _rebuild(c)


def counted(c: Any, fn: str, name: str) -> tuple[int, int] | None:
    """(runs that have the argument ``name``, its distinct values) of ``fn``; None where not kept."""
    if not available(c):
        return None
    row = c.execute("SELECT runs, groups FROM arg_names WHERE fn=? AND name=?", (fn, name)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
