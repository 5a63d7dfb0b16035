"""Every run's arguments in value order, kept by triggers: what sorting, filtering and grouping a
million runs by an argument read instead of the million runs' JSON.

A run records its arguments as JSON (``runs.hparams``: ``{"cfg": {"optim": {"lr": 0.1}}, "seed": 3}``).
The dashboard sorts and filters a function's runs by an argument and groups them by one; done on
``json_extract`` that is a pass over every run (and a sort of them) at each page. Two small tables
in the store's index, maintained by SQLite triggers on ``runs`` (whoever writes them: a call, gc,
a team pull, a logs bundle, an older memolab: the triggers live in the file), make it an index range:

* ``run_args(fn, name, value, started, run)``: one row per run and flattened argument
  (``cfg.optim.lr``, as ``names.flatten`` names the page's columns), ordered by value, then newest
  first (``runs_fn``'s order: ``started``, then ``id``, descending): a page of a sort by an argument is a range of it, a filter ``lr<=0.01`` another, a group
  (the runs with one value) another;
* ``arg_names(fn, name, runs, groups)``: per function and argument, how many runs have it and how
  many distinct values it takes (the group statistics' "first 200 of N").

What a value is (``VALUE``): a number stays a number, a text a text, ``true``/``false`` the texts the
page shows, a list or an empty object its JSON text; ``null`` (and a run whose ``hparams`` is not
JSON: an older writer's NaN) is no row: such a run sorts with the runs without the argument, last.
SQLite orders numbers (as numbers) before texts (by their bytes: the page's own order of text), the
order the page's table used to sort its window in.

A store gains them the first time a memolab with them opens it to log (``tracking.schema.ensure``,
as ``counts.install``): one fill from the rows (sorted, so the b-tree is written in order) and the
triggers, in one write transaction. Where they are missing (an older store read as it is)
``available`` says so and readers fall back to ``json_extract`` over the runs. ``INSERT OR REPLACE``
of a run that exists would bypass the delete trigger: no writer does it; ``doctor`` rebuilds the
tables where they drifted from the rows whatever the cause (``check``).
"""
from __future__ import annotations

import sqlite3
from typing import Any

from ..store.inlist import placeholders

TABLES = """
CREATE TABLE IF NOT EXISTS run_args(
    fn TEXT NOT NULL, name TEXT NOT NULL, value NOT NULL, started REAL NOT NULL, run INTEGER NOT NULL,
    PRIMARY KEY(fn, name, value, started DESC, run DESC)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS arg_names(
    fn TEXT NOT NULL, name TEXT NOT NULL, runs INTEGER NOT NULL, groups INTEGER NOT NULL,
    PRIMARY KEY(fn, name)
) WITHOUT ROWID
"""

#: an argument's value as the tables keep it (``t``: a row of ``json_tree``)
VALUE = ("CASE t.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' WHEN 'array' THEN t.value "
         "WHEN 'object' THEN t.value ELSE t.atom END")


def leaves(row: str) -> str:
    """SQL: (fn, name, value, started, run) of each flattened argument of the runs row ``row``
    (``NEW``, ``OLD``, an alias): the leaves of its JSON that are not inside a list (a list is one
    value), named as ``names.flatten`` names them (``cfg.optim.lr``; json_tree quotes a key that is
    not a plain word: the quotes go)."""
    h = f"{row}.hparams"
    return (f"SELECT {row}.fn, replace(substr(t.fullkey, 3), '\"', ''), {VALUE}, {row}.started, {row}.id "
            f"FROM json_tree(CASE WHEN json_valid({h}) THEN {h} END) t "
            "WHERE typeof(t.key) = 'text' AND instr(t.path, '[') = 0 AND t.type != 'null' "
            "AND (t.type != 'object' OR t.value = '{}')")


_ADD = "INSERT OR IGNORE INTO run_args(fn, name, value, started, run) " + leaves("NEW") + ";"
_DROP = "DELETE FROM run_args WHERE (fn, name, value, started, run) IN (" + leaves("OLD") + ");"
# another run with this run's value of the argument (the group goes on, or was there already)
_OTHER = ("EXISTS (SELECT 1 FROM run_args WHERE fn = {r}.fn AND name = {r}.name AND value = {r}.value "
          "AND run != {r}.run)")

TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS args_run_add AFTER INSERT ON runs BEGIN " + _ADD + " END",
    "CREATE TRIGGER IF NOT EXISTS args_run_drop AFTER DELETE ON runs BEGIN " + _DROP + " END",
    "CREATE TRIGGER IF NOT EXISTS args_run_move AFTER UPDATE OF fn, hparams, started ON runs "
    "WHEN OLD.fn IS NOT NEW.fn OR OLD.hparams IS NOT NEW.hparams OR OLD.started IS NOT NEW.started BEGIN "
    + _DROP + " " + _ADD + " END",
    "CREATE TRIGGER IF NOT EXISTS args_name_add AFTER INSERT ON run_args BEGIN "
    "INSERT INTO arg_names(fn, name, runs, groups) VALUES (NEW.fn, NEW.name, 1, NOT " + _OTHER.format(r="NEW")
    + ") ON CONFLICT(fn, name) DO UPDATE SET runs = runs + 1, groups = groups + excluded.groups; END",
    "CREATE TRIGGER IF NOT EXISTS args_name_drop AFTER DELETE ON run_args BEGIN "
    "UPDATE arg_names SET runs = runs - 1, groups = groups - NOT " + _OTHER.format(r="OLD")
    + " WHERE fn = OLD.fn AND name = OLD.name; END",
)

_NAMES = ("args_run_add", "args_run_drop", "args_run_move", "args_name_add", "args_name_drop")

#: what the tables hold, made from the rows (install, ``check``)
_LEAVES_OF_ALL = "SELECT * FROM (" + leaves("r").replace("FROM json_tree", "FROM runs r, json_tree") + ")"
_RECOUNT_NAMES = "SELECT fn, name, COUNT(*), COUNT(DISTINCT value) FROM run_args GROUP BY fn, name"


def available(c: Any) -> bool:
    """Whether the file ``c`` reads keeps the tables: every trigger is there (a ``temp`` shim is an
    empty table; a runs table dropped and made again has lost its triggers: ``install`` refills)."""
    q = placeholders(len(_NAMES))
    return int(c.execute(f"SELECT COUNT(*) FROM main.sqlite_master WHERE type='trigger' AND name IN ({q})",
                         _NAMES).fetchone()[0]) == len(_NAMES)


def install(c: sqlite3.Connection) -> bool:
    """Make the tables and triggers on a writable index that lacks them, filled from the runs there,
    in one write transaction (the caller's, if it is in one); whether it made them."""
    if available(c):
        return False
    if c.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='evaluations'").fetchone() is None:
        return False  # (not a store's index: a logs bundle's own file)
    own = not c.in_transaction
    if own:
        c.execute("BEGIN IMMEDIATE")
    try:
        if not available(c):  # (another process may have made them meanwhile)
            _fill(c)
            for stmt in TRIGGERS:
                c.execute(stmt)
        if own:
            c.execute("COMMIT")
    except BaseException:
        if own and c.in_transaction:
            c.execute("ROLLBACK")
        raise
    return True


def _fill(c: sqlite3.Connection) -> None:
    for stmt in (x.strip() for x in TABLES.split(";") if x.strip()):
        c.execute(stmt)
    c.execute("DELETE FROM run_args")
    c.execute("DELETE FROM arg_names")
    # in the primary key's order: the b-tree is appended to, not written at random places
    c.execute(f"INSERT OR IGNORE INTO run_args(fn, name, value, started, run) {_LEAVES_OF_ALL} "
              "ORDER BY 1, 2, 3, 4 DESC, 5 DESC")
    c.execute(f"INSERT INTO arg_names(fn, name, runs, groups) {_RECOUNT_NAMES}")


def check(c: sqlite3.Connection, repair: bool = False) -> list[str]:
    """What the tables say that the runs do not (``doctor``): one line per kind of difference; with
    ``repair``, rebuilt. O(runs): ``doctor`` reads them anyway."""
    if not available(c):
        return []
    out = []
    extra = c.execute(f"SELECT COUNT(*) FROM (SELECT * FROM run_args EXCEPT {_LEAVES_OF_ALL})").fetchone()[0]
    missing = c.execute(f"SELECT COUNT(*) FROM ({_LEAVES_OF_ALL} EXCEPT SELECT * FROM run_args)").fetchone()[0]
    if extra or missing:
        out.append(f"argument index: {missing} run argument(s) missing, {extra} of no run")
    want = set(c.execute(_RECOUNT_NAMES))
    have = {r for r in c.execute("SELECT fn, name, runs, groups FROM arg_names") if r[2] or r[3]}
    if want != have:
        out.append(f"argument counts: {len(want ^ have)} row(s) differ")
    if out and repair:  # (filled as at install: without the triggers firing row by row, then them again)
        for name in _NAMES:
            c.execute(f"DROP TRIGGER IF EXISTS {name}")
        _fill(c)
        for stmt in TRIGGERS:
            c.execute(stmt)
    return out


def counted(c: Any, fn: str, name: str) -> tuple[int, int] | None:
    """(runs that have the argument ``name``, its distinct values) of ``fn``; None where not kept."""
    if not available(c):
        return None
    row = c.execute("SELECT runs, groups FROM arg_names WHERE fn=? AND name=?", (fn, name)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)
