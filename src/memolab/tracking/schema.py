"""Tables for runs and their logs, kept in the store's own ``index.sqlite``.

Living in the same file as ``evaluations`` means one backup, one ``clear`` and
one WAL; the tables are created on first use with ``IF NOT EXISTS`` so stores
written by a memolab without logging simply gain them.

Scalars get their own narrow table (the bulk of all points, read by range),
clustered on (run, tag, step) so a series is one contiguous range of one B-tree
and no separate index doubles its size;
histograms, images and text share ``log_events`` with a JSON or binary payload.
``scalar_tags`` is maintained on every flush so listing tags and the "final
metric" column of the hparams table never scan the points. ``scalar_blocks``
summarises every ``BLOCK`` consecutive points of a tag (count, step range, sums,
min, max): a chart of a million-point series reads ~4,000 block rows instead of
a million points. ``ordered`` says whether steps only ever grew, which is what
makes consecutive blocks also step ranges.
"""
from __future__ import annotations

import sqlite3

from ..errors import swallowed
from ..store.arming import EVERY
from . import argindex, counts, temptriggers

BLOCK = 64

DDL = """
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY,
    fn TEXT NOT NULL,
    code TEXT, args TEXT, schema TEXT,
    parent INTEGER,
    name TEXT,
    started REAL NOT NULL,
    finished REAL,
    updated REAL,
    status TEXT NOT NULL,
    hparams TEXT,
    eval_id INTEGER,
    pid INTEGER,
    host TEXT,
    error TEXT,
    traceback TEXT,
    output TEXT,
    script TEXT
);
CREATE INDEX IF NOT EXISTS runs_fn ON runs(fn, started);
CREATE INDEX IF NOT EXISTS runs_eval ON runs(eval_id);
CREATE TABLE IF NOT EXISTS scalars(
    run INTEGER NOT NULL, tag TEXT NOT NULL, step INTEGER NOT NULL,
    seq INTEGER NOT NULL,  -- the point's position in its (run, tag): keeps repeated steps apart, in order
    wall REAL NOT NULL, value REAL,
    PRIMARY KEY(run, tag, step, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scalar_tags(
    run INTEGER NOT NULL, tag TEXT NOT NULL, n INTEGER NOT NULL,
    last_step INTEGER, last_value REAL, last_wall REAL,
    first_step INTEGER, ordered INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY(run, tag)
);
CREATE TABLE IF NOT EXISTS scalar_blocks(
    run INTEGER NOT NULL, tag TEXT NOT NULL, block INTEGER NOT NULL,
    n INTEGER NOT NULL, step_min INTEGER, step_max INTEGER, wall_sum REAL,
    value_sum REAL, value_n INTEGER, vmin REAL, vmax REAL,
    PRIMARY KEY(run, tag, block)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_events(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run INTEGER NOT NULL, kind TEXT NOT NULL, tag TEXT NOT NULL, step INTEGER NOT NULL, wall REAL NOT NULL,
    meta TEXT, data BLOB
);
CREATE INDEX IF NOT EXISTS log_events_run ON log_events(run, kind, tag, step);
"""


#: columns added after the runs table shipped (nullable: older readers ignore them). New stores
#: get them from the DDL above; only a store made before them is altered, once.
ADDED_RUN_COLUMNS = (
    ("error", "TEXT"),  # a failed run's exception: "ValueError: boom"
    ("traceback", "TEXT"),  # a failed or interrupted run's traceback (bounded, see runs.TRACEBACK_LIMIT)
    ("output", "TEXT"),  # the tail of what it printed to sys.stdout/sys.stderr (bounded, output.LIMIT)
    ("script", "TEXT"),  # the absolute path of the script that ran it (sys.argv[0]), if any
    # its arguments as its evaluation's snapshot shows them ({name: text}, JSON: ``call.arg_snapshot``'s
    # texts), while it has no stored evaluation: `ls FUNC`'s rows of computing, failed, interrupted
    # runs compare with its evaluations' (the hparams are another form); dropped when it ends done
    ("argtext", "TEXT"),
)

#: indexes on those added columns: made once the columns exist (a store made before them has
#: its runs table altered first; in the DDL they would fail there: "no such column: script")
ADDED_RUN_INDEXES = (
    # the scripts that ran a function, found in O(scripts x log runs) (``query.scripts_of``)
    "CREATE INDEX IF NOT EXISTS runs_fn_script ON runs(fn, script)",
    # the running runs (few at any time, of a million): whether one is lost, the heartbeat's list
    "CREATE INDEX IF NOT EXISTS runs_running ON runs(fn) WHERE status = 'running'",
    # runs that did not end done (failed, interrupted, running): `ls FUNC`'s footer of unstored runs
    "CREATE INDEX IF NOT EXISTS runs_unfinished ON runs(fn, status) WHERE status != 'done'",
    # the same runs newest first: `ls FUNC --limit N`'s rows of them read N index entries, not all
    "CREATE INDEX IF NOT EXISTS runs_open ON runs(fn, started) WHERE status != 'done'",
    # the best run of a metric (``pages.best``, the dashboard's best row): walked in value order
    "CREATE INDEX IF NOT EXISTS scalar_tags_value ON scalar_tags(tag, last_value)",
)

#: runs in order of their last write (``retention.LAST_WRITTEN``): gc --older-than reads those
#: before its cutoff, not every run (made where the runs have those columns: see ``_gc_indexes``)
LAST_WRITTEN_INDEX = ("CREATE INDEX IF NOT EXISTS runs_last_written ON runs(MAX(COALESCE(finished, 0), "
                      "COALESCE(updated, 0), COALESCE(started, 0)))")


#: DDL one statement at a time (no statement or comment in it holds a ';')
_STATEMENTS = tuple(x.strip() for x in DDL.split(";") if x.strip())


def ensure(conn: sqlite3.Connection, read_only: bool = False) -> None:
    """Create what is missing. Safe inside the caller's transaction: statement by
    statement, never ``executescript``, which first COMMITs whatever transaction the
    connection is in; a caller's ``BEGIN IMMEDIATE`` then silently became autocommit
    (a logs bundle was imported row by row, and its final COMMIT failed).

    ``read_only``: a connection that must not write its file (a read-only store, or an
    older one a command only reads): what is missing is made in its ``temp`` schema instead
    (``store.schema.shim_tables``), empty tables and NULL columns."""
    if read_only:
        from ..store.schema import shim_tables

        shim_tables(conn, DDL)
        return
    have = _make_tables(conn)
    for stmt in ADDED_RUN_INDEXES:
        conn.execute(stmt)
    _gc_indexes(conn, have)
    try:
        counts.install(conn)  # per-function counts kept by triggers (once per store)
    except sqlite3.OperationalError:
        # another writer held the store past the busy timeout: readers count as before, and the
        # next open tries again (the install is one transaction: nothing half made)
        swallowed("tracking.schema: counts.install")
    try:
        argindex.install(conn)  # every run's arguments in value order, kept by triggers (once per store)
    except sqlite3.OperationalError:
        swallowed("tracking.schema: argindex.install")


def _make_tables(conn: sqlite3.Connection) -> set[str]:
    """The tables of ``DDL`` and the runs' added columns, where missing; the runs' columns before."""
    for stmt in _STATEMENTS:
        conn.execute(stmt)
    have = {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    for name, typ in ADDED_RUN_COLUMNS:
        if name not in have:
            try:
                conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {typ}")
            except sqlite3.OperationalError as e:  # another process added it first
                if "duplicate column" not in str(e):
                    raise
    return have


#: the tables an armed connection's triggers are on or write
_KEPT_TABLES = ("evaluations", "runs", "run_args", "run_counts", "run_digits", "evaluation_counts", "arg_names",
                "args_pending")
_RUN_COLUMNS = {n for n, _ in ADDED_RUN_COLUMNS}


def arm(conn: sqlite3.Connection, wanted: frozenset[tuple[str, int]] = EVERY) -> bool:
    """Make connection ``conn``'s ``TEMP`` triggers of the kept counts and argument index
    (``temptriggers``) that follow the writes ``wanted`` (``store.arming.Write``: a table and an
    action), those it lacks: before it writes them (``store.arming``), outside a transaction (made
    in one, they would go with its rollback). The tables they are on and write are made first where
    missing, empty and unmarked: the triggers count only once an ``ensure`` filled them. Raises
    where it cannot (another writer held the store past the busy timeout): the write waits for
    nothing else. Whether it is armed (False: no ``evaluations`` table yet, a store being made)."""
    if conn.in_transaction:
        raise RuntimeError("a connection is armed only outside a transaction (its TEMP triggers would go with a rollback)")
    todo = [(name, stmt) for name, write, stmt in _temp_triggers() if write in wanted]
    have = {n for (n,) in conn.execute("SELECT name FROM temp.sqlite_master WHERE type='trigger'")}
    todo = [(name, stmt) for name, stmt in todo if name not in have]
    if not todo:
        return True
    tables = {n for (n,) in conn.execute(
        f"SELECT name FROM main.sqlite_master WHERE type='table' AND name IN ({','.join('?' * len(_KEPT_TABLES))})",
        _KEPT_TABLES)}
    if "evaluations" not in tables:
        return False  # (a store being made: its tables come in the transaction after)
    if len(tables) < len(_KEPT_TABLES) or not _RUN_COLUMNS <= {r[1] for r in conn.execute("PRAGMA table_info(runs)")}:
        # (the triggers name the runs' added columns: ``script``)
        _make_tables(conn)
        for stmt in (*counts.statements(), *argindex.statements()):
            conn.execute(stmt)
    for _, stmt in todo:
        conn.execute(stmt)
    return True


_triggers: list[tuple[str, tuple[str, int], str]] = []


def _temp_triggers() -> list[tuple[str, tuple[str, int], str]]:
    """(name, the write it follows, its ``TEMP`` statement) of every kept trigger."""
    if not _triggers:
        _triggers.extend((temptriggers.names_of([s])[0], temptriggers.write_of(s), s)
                         for s in (*counts.temp_triggers(), *argindex.temp_triggers()))
    return _triggers


def _gc_indexes(conn: sqlite3.Connection, have: set[str]) -> None:
    """The indexes ``gc --older-than`` and ``ls`` read by range: the runs' last writes, and the store's
    evaluation indexes added without a schema step (``store.schema.ADDED_EVALUATION_INDEXES``), once,
    on a store's index (not a logs bundle's own file, which has no evaluations)."""
    from ..store.schema import ADDED_EVALUATION_INDEXES

    stmts = [LAST_WRITTEN_INDEX] if {"finished", "updated", "started"} <= have else []
    if conn.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='evaluations'").fetchone() is not None:
        stmts += ADDED_EVALUATION_INDEXES
    for stmt in stmts:
        try:
            conn.execute(stmt)
        except sqlite3.OperationalError:
            # another writer held the store past the busy timeout: the queries that use it scan
            # as before, and the next writable open makes it
            swallowed("tracking.schema: gc index")
