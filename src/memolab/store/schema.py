"""The local index's schema: its tables, its versions, how an older file is brought up to date,
and how an older file is read without being changed.

Its own module, below ``sqlite`` (which migrates to it) and ``health`` (which reads an index
without migrating it), so that neither imports the other for it.

**Versions are steps.** ``STEPS`` lists, in order, what each version adds to the one before; a
file at version ``v`` is brought up to date by the steps above ``v``, every one idempotent and
the version written last, under the write lock. To add to the index (a table, a column, an
index), append a step and give its table or column here: the table to ``DDL`` (every current
table is created ``IF NOT EXISTS`` before the steps run), a column to ``ADDED_COLUMNS`` (and the
table's ``CREATE`` in ``DDL``, for new files), what else it needs to the step's function.

**Only a write migrates.** A store is migrated when it is opened to be written (a memoized call's
``Store``, ``gc``, ``clear``, ``memolab upgrade``), which says so once (``announce``). Commands that
only read (``ls``, ``show``, ``why``, ``runs``, ``gc --dry-run``, ``doctor`` without
``--repair``, ``export-tb``, ``ui``) open an older file read-only (``mode=ro``) and see the current
shape through ``read_shims``: temporary tables for what is missing and temporary views adding the
missing columns as NULL, all in the connection's ``temp`` schema, which is never written to the
file. So an older memolab still used on the project keeps working after a ``memolab ls``.
"""
from __future__ import annotations

import re
import sqlite3
import threading
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..errors import MemolabWarning, StoreUnavailable

__all__ = ["SCHEMA_VERSION", "STEPS", "DDL", "ADDED_COLUMNS", "ADDED_EVALUATION_INDEXES", "newer_schema", "check_schema",
           "file_version",
           "migrate", "read_shims", "announce"]

DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS evaluations(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fn TEXT NOT NULL,
    code TEXT NOT NULL,
    args TEXT NOT NULL,
    schema TEXT NOT NULL,
    status TEXT NOT NULL,
    payload TEXT,
    payload_size INTEGER,
    buffers TEXT,
    size INTEGER,
    started REAL,
    finished REAL,
    duration REAL,
    host TEXT,
    python TEXT,
    versions TEXT,
    snapshot TEXT,
    hits INTEGER NOT NULL DEFAULT 0,
    last_hit REAL,
    code_refs TEXT,
    signature TEXT,
    reason TEXT,
    inline BLOB,
    UNIQUE(fn, code, args, schema)
);
-- WITHOUT ROWID: one b-tree, not a table plus its key's index, so taking and
-- dropping a lease each write one page, not two (stores made before this keep
-- the rowid form: the same statements work on both)
CREATE TABLE IF NOT EXISTS leases(
    fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
    owner TEXT NOT NULL,
    heartbeat REAL NOT NULL,
    PRIMARY KEY(fn, code, args, schema)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sources(
    digest TEXT PRIMARY KEY,
    symbol TEXT NOT NULL,
    source TEXT NOT NULL
);
-- no AUTOINCREMENT (older stores have it): a miss then writes no
-- sqlite_sequence page; ids still grow, since only the oldest rows are deleted
CREATE TABLE IF NOT EXISTS misses(
    id INTEGER PRIMARY KEY,
    fn TEXT NOT NULL,
    time REAL NOT NULL,
    explanation TEXT NOT NULL
);
-- lineage (schema 4): an index of what the evaluations' snapshots say, kept by the triggers of
-- ``LINEAGE_TRIGGERS`` (whoever inserts a row: a call, a team row adopted, a pull): the
-- evaluation's inputs (argument path -> the key of the evaluation an object there came from),
-- and the digest of a result as an argument (its "value digest") -> the evaluation
CREATE TABLE IF NOT EXISTS inputs(
    evaluation INTEGER NOT NULL,
    path TEXT NOT NULL,
    fn TEXT NOT NULL,
    code TEXT NOT NULL,
    args TEXT NOT NULL,
    schema TEXT NOT NULL,
    how TEXT,
    PRIMARY KEY(evaluation, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outputs(
    digest TEXT NOT NULL,
    evaluation INTEGER NOT NULL,
    PRIMARY KEY(digest, evaluation)
) WITHOUT ROWID;
-- notes and tags (schema 5) on a run or an evaluation (``tracking/annotations.py``): kind is
-- 'note' or 'tag', source says who wrote it (log: memolab.log.note/tag, cli, dashboard)
CREATE TABLE IF NOT EXISTS annotations(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run INTEGER,
    evaluation INTEGER,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    time REAL NOT NULL,
    source TEXT
);
CREATE TABLE IF NOT EXISTS blob_stamps(
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL
);
-- accepted code changes (store/accepts.py): calls keyed with new_code may use what is stored under old_code
CREATE TABLE IF NOT EXISTS accepts(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fn TEXT NOT NULL,
    schema TEXT NOT NULL,
    new_code TEXT NOT NULL,
    old_code TEXT NOT NULL,
    time REAL NOT NULL,
    user_name TEXT,
    host TEXT,
    deps_before TEXT,
    deps_after TEXT,
    diffs TEXT,
    evaluation INTEGER,
    undone REAL,
    undone_by TEXT,
    team_id INTEGER,
    origin TEXT NOT NULL DEFAULT 'here',
    pending_undo INTEGER NOT NULL DEFAULT 0,
    signature TEXT
);
-- schema 6 (store/marks.py): keep marks on evaluation keys (gc never drops a kept row), and the
-- functions kept off the team store (@memo(team=False))
CREATE TABLE IF NOT EXISTS keeps(
    fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
    time REAL NOT NULL,
    source TEXT,
    PRIMARY KEY(fn, code, args, schema)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS local_only(
    fn TEXT PRIMARY KEY,
    time REAL NOT NULL
);
-- snapshots of files and folders (snapshots.py): each taken or restored here, and the blobs it
-- holds (gc keeps them while the snapshot is recorded)
CREATE TABLE IF NOT EXISTS snapshots(
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    kind TEXT NOT NULL,
    files INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    name TEXT,
    source TEXT,
    time REAL NOT NULL,
    used REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshot_blobs(
    snapshot TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY(snapshot, digest)
) WITHOUT ROWID;
-- indexes --
CREATE INDEX IF NOT EXISTS misses_fn ON misses(fn, time);
-- (fn, finished) first, for a function's evaluations newest first; the summed
-- columns after it make `memolab ls` a scan of this index, not of the table
CREATE INDEX IF NOT EXISTS evaluations_summary ON evaluations(fn, finished, size, hits, duration);
-- the miss explanation's nearest evaluation: same arguments, else same code
CREATE INDEX IF NOT EXISTS evaluations_args ON evaluations(fn, args, finished);
CREATE INDEX IF NOT EXISTS evaluations_code ON evaluations(fn, code, finished);
-- partial, small by construction: rows that refer to blob files (gc's
-- references) and rows out of use (what gc drops first)
CREATE INDEX IF NOT EXISTS evaluations_blobs ON evaluations(id) WHERE inline IS NULL;
CREATE INDEX IF NOT EXISTS evaluations_unused ON evaluations(id) WHERE status != 'done';
CREATE INDEX IF NOT EXISTS accepts_fn ON accepts(fn, schema, new_code);
-- schema 5: a run's or an evaluation's notes and tags; a tag once per run or evaluation
CREATE INDEX IF NOT EXISTS annotations_run ON annotations(run) WHERE run IS NOT NULL;
CREATE INDEX IF NOT EXISTS annotations_evaluation ON annotations(evaluation) WHERE evaluation IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS annotations_tag ON annotations(COALESCE(run, 0), COALESCE(evaluation, 0), text)
    WHERE kind = 'tag';
"""

#: Indexes of the evaluations added without a schema step (no version bump: an older memolab
#: keeps reading and writing the store, and SQLite keeps them up to date for it). Made on a
#: store's writable open (``tracking.schema.ensure``, as the runs' added indexes and the kept
#: counts are); a store read as it is, without them, answers the same queries by a scan.
ADDED_EVALUATION_INDEXES = (
    # the results in order of last use (``gcplan.LAST_USE``): gc --older-than reads those before its cutoff
    "CREATE INDEX IF NOT EXISTS evaluations_last_use ON evaluations(COALESCE(MAX(finished, COALESCE(last_hit, 0)), 0)) "
    "WHERE status = 'done'",
    # the results stored with an expiry (``@memo(max_age=...)``: few): ls's EXPIRED column counts them, not every row
    "CREATE INDEX IF NOT EXISTS evaluations_expiring ON evaluations(fn) "
    "WHERE status = 'done' AND instr(snapshot, '\"expires\"') > 0",
)

#: Columns added to a table after it shipped: table -> ((name, type), ...). Nullable, so an older
#: memolab reading a migrated file (it names its columns) still works, and rows written before
#: the migration simply have none (no code references, no signature, no inline bytes).
ADDED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "evaluations": (("code_refs", "TEXT"), ("signature", "TEXT"), ("reason", "TEXT"), ("inline", "BLOB")),
}

Write = Callable[[], AbstractContextManager[sqlite3.Connection]]


def _add_columns(conn: sqlite3.Connection, write: Write) -> None:
    """Add the columns an older file lacks, re-checked under the write lock (another process may
    have just added them)."""
    for table, cols in ADDED_COLUMNS.items():
        if not [n for n, _ in cols if n not in _columns(conn, "main", table)]:
            continue
        with write() as c:
            have = _columns(c, "main", table)
            for name, typ in cols:
                if name not in have:
                    c.execute(f"ALTER TABLE {table} ADD COLUMN {name} {typ}")


def _step_2(conn: sqlite3.Connection, write: Write) -> None:
    _add_columns(conn, write)
    conn.executescript(DDL.split("-- indexes --")[1] + "DROP INDEX IF EXISTS evaluations_fn;")  # schema 1's


def _step_3(conn: sqlite3.Connection, write: Write) -> None:
    # the table itself is in ``DDL`` (created before the steps run)
    conn.execute("CREATE INDEX IF NOT EXISTS accepts_fn ON accepts(fn, schema, new_code)")


#: The lineage tables follow the evaluations whatever writes them: a row inserted (by a call, by a
#: team row adopted, by ``pull``) indexes the inputs and value digest its snapshot records; a row
#: replaced (``INSERT OR REPLACE``: SQLite fires no delete trigger for the row it replaces) or
#: deleted (``clear``, ``gc``) takes its own entries along. A snapshot that is not JSON indexes
#: nothing (the row itself is judged where it is read). Edges *to* an evaluation that is gone
#: stay: they name its key, and are shown as "not stored any more". SQLite parses the snapshot
#: once per ``json_*`` call: each statement reads it through one ``json_each`` (three parses a
#: row with lineage: validity, inputs, value digest; none for a row without).
LINEAGE_TRIGGERS = """
CREATE INDEX IF NOT EXISTS inputs_upstream ON inputs(fn, code, args, schema);
CREATE INDEX IF NOT EXISTS outputs_evaluation ON outputs(evaluation);
CREATE TRIGGER IF NOT EXISTS lineage_replace BEFORE INSERT ON evaluations
WHEN EXISTS (SELECT 1 FROM evaluations WHERE fn=NEW.fn AND code=NEW.code AND args=NEW.args AND schema=NEW.schema)
BEGIN
    DELETE FROM inputs WHERE evaluation = (SELECT id FROM evaluations
        WHERE fn=NEW.fn AND code=NEW.code AND args=NEW.args AND schema=NEW.schema);
    DELETE FROM outputs WHERE evaluation = (SELECT id FROM evaluations
        WHERE fn=NEW.fn AND code=NEW.code AND args=NEW.args AND schema=NEW.schema);
END;
CREATE TRIGGER IF NOT EXISTS lineage_add AFTER INSERT ON evaluations
WHEN NEW.snapshot IS NOT NULL AND (instr(NEW.snapshot, '"inputs"') > 0 OR instr(NEW.snapshot, '"value_digest"') > 0)
     AND json_valid(NEW.snapshot) BEGIN
    INSERT OR IGNORE INTO inputs(evaluation, path, fn, code, args, schema, how)
        SELECT NEW.id, json_extract(value, '$.path'), json_extract(value, '$.fn'), json_extract(value, '$.code'),
               json_extract(value, '$.args'), json_extract(value, '$.schema'), json_extract(value, '$.by')
        FROM json_each(NEW.snapshot, '$.inputs')
        WHERE type = 'object' AND json_type(value, '$.path') = 'text' AND json_type(value, '$.fn') = 'text'
          AND json_type(value, '$.code') = 'text' AND json_type(value, '$.args') = 'text'
          AND json_type(value, '$.schema') = 'text';
    INSERT OR IGNORE INTO outputs(digest, evaluation)
        SELECT value, NEW.id FROM json_each(NEW.snapshot) WHERE key = 'value_digest' AND type = 'text';
END;
CREATE TRIGGER IF NOT EXISTS lineage_drop AFTER DELETE ON evaluations BEGIN
    DELETE FROM inputs WHERE evaluation = OLD.id;
    DELETE FROM outputs WHERE evaluation = OLD.id;
END;
"""


def _step_4(conn: sqlite3.Connection, write: Write) -> None:
    try:
        conn.execute("SELECT json_valid('{}')")
    except sqlite3.OperationalError:
        return  # an SQLite without JSON: lineage is read from the snapshots alone (no "used by" index)
    with write() as c:  # (not executescript: it would commit the write transaction first)
        for stmt in _split(LINEAGE_TRIGGERS):
            c.execute(stmt)


def _split(script: str) -> list[str]:
    """The statements of ``script`` (a trigger's body holds ';': split at 'END;' and plain ';')."""
    out, cur = [], []
    for line in script.strip().splitlines():
        cur.append(line)
        text = "\n".join(cur).strip()
        if text.endswith("END;") or (text.endswith(";") and "BEGIN" not in text):
            out.append(text)
            cur = []
    return out


def _step_5(conn: sqlite3.Connection, write: Write) -> None:
    # the table is in ``DDL`` (created before the steps run); its indexes are the DDL's last three
    indexes = DDL.split("-- schema 5:")[1].split("\n", 1)[1]
    with write() as c:
        for stmt in indexes.split(";"):
            if stmt.strip():
                c.execute(stmt)


def _step_6(conn: sqlite3.Connection, write: Write) -> None:
    pass  # its tables (keeps, local_only, snapshots, snapshot_blobs) are in ``DDL``, created before the steps run


#: (version, what it brings, the step from the version before): in order. Schema 1 was the first
#: format (its version in ``meta`` only; ``code_refs``, ``signature`` and ``reason`` were added to
#: it in place).
STEPS: list[tuple[int, str, Callable[[sqlite3.Connection, Write], None]]] = [
    (2, "small results inline (evaluations.inline), the miss-explanation and gc indexes, the version "
        "mirrored in SQLite's user_version header field (opening a current store is one header read)", _step_2),
    (3, "accepted code changes (the accepts table: `memolab accept`)", _step_3),
    (4, "lineage: the evaluations' inputs (argument path -> the evaluation an object there came from) and "
        "results' value digests, indexed by triggers (inputs, outputs)", _step_4),
    (5, "notes and tags on runs and evaluations (the annotations table: memolab.log.note, memolab tag, the "
        "dashboard)", _step_5),
    (6, "keep marks that gc never drops (the keeps table: @memo(keep=True), memolab keep), functions kept "
        "off the team store (the local_only table: @memo(team=False)) and snapshots of files and folders (the "
        "snapshots and snapshot_blobs tables: memolab snapshot)", _step_6),
]

#: The version this memolab writes. An older memolab refuses a file of a newer one (it reads
#: ``meta``): a version-1 memolab would take inline rows for rows whose blobs are missing.
SCHEMA_VERSION = STEPS[-1][0]


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA {schema}.table_info({table})")]


def has_table(c: sqlite3.Connection, table: str) -> bool:
    """Is ``table`` readable on ``c``: in the file, or as a read shim of a file of schema 5 or
    older read without migrating it (none before the shims are made)."""
    return c.execute("SELECT 1 FROM sqlite_master WHERE name=? UNION ALL "
                     "SELECT 1 FROM temp.sqlite_master WHERE name=?", (table, table)).fetchone() is not None


def has_runs(c: sqlite3.Connection) -> bool:
    """Does the index hold the logs' ``runs`` table (made when a first run is logged,
    ``tracking.schema``)? The one test of it: a store that never logged has no logs to read."""
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone() is not None


def newer_schema(path: Path, version: Any) -> StoreUnavailable:
    return StoreUnavailable(
        "newer-schema", f"{path} was written by a newer memolab (store schema {version}, this memolab reads "
        f"{SCHEMA_VERSION}): results are computed but not stored; upgrade memolab to use this store")


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Raise ``StoreUnavailable('newer-schema')`` for an index written by a newer memolab."""
    has_meta = conn.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='meta'").fetchone()
    if not has_meta:
        return
    row = conn.execute("SELECT value FROM main.meta WHERE key='schema_version'").fetchone()
    try:
        newer = row is not None and int(row[0]) > SCHEMA_VERSION
    except (TypeError, ValueError):
        newer = True  # a version we cannot even parse is not one we wrote
    if newer:
        raise newer_schema(path, row[0])


def file_version(conn: sqlite3.Connection) -> int:
    """The schema version of the file ``conn`` reads: its ``user_version``, else the version in its
    ``meta`` table (schema 1 kept it there only), else 0 (a new, empty file)."""
    v = conn.execute("PRAGMA main.user_version").fetchone()[0]
    if v:
        return int(v)
    # every version wrote its number in ``meta`` last: a file without it is being created (or
    # its creation was cut short), never an older store
    if conn.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='meta'").fetchone() is None:
        return 0
    row = conn.execute("SELECT value FROM main.meta WHERE key='schema_version'").fetchone()
    try:
        return int(row[0]) if row else 0
    except (TypeError, ValueError):
        return SCHEMA_VERSION + 1  # not a version we wrote: refused as newer


_announced: set[str] = set()
_announced_lock = threading.Lock()


def _warn(path: Path, old: int, new: int) -> None:
    warnings.warn(f"memolab: upgraded the store index {path} from schema {old} to {new} (to write it); an older "
                  "memolab can no longer use this store", MemolabWarning, stacklevel=6)


#: how an upgrade of an existing store is said, once per process and file (``memolab upgrade``
#: says it itself and replaces this for its own open)
announce: Callable[[Path, int, int], None] = _warn


def migrate(conn: sqlite3.Connection, path: Path, version: int, write: Write, enter_wal: Callable[[], None]) -> None:
    """Create the schema, or bring a file written by an older memolab up to date in place (see the
    module's doc). Two processes migrating at once, or a migration cut short by a crash, end in
    the same state as one that ran alone. An existing store's upgrade is said once (``announce``)."""
    if version > SCHEMA_VERSION:
        raise newer_schema(path, version)  # before anything is written: not ours to change
    check_schema(conn, path)  # a file of a memolab that set no user_version yet
    stored = file_version(conn)
    if version == 0:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new file: clear/gc can shrink it
    enter_wal()  # persistent in the file: set once, here
    conn.executescript(DDL.split("-- indexes --")[0])
    for v, _, step in STEPS:
        if v > stored:
            step(conn, write)
    with write() as c:
        row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row and int(row[0]) > SCHEMA_VERSION:
            raise newer_schema(path, row[0])
        c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    if 0 < stored < SCHEMA_VERSION:
        with _announced_lock:
            first = str(path) not in _announced
            _announced.add(str(path))
        if first:
            announce(Path(path), stored, SCHEMA_VERSION)


# -- reading an older file as it is ------------------------------------------------------------

def _statements(ddl: str) -> list[str]:
    ddl = re.sub(r"--[^\n]*", "", ddl)  # (comments may hold a ';')
    return [x.strip() for x in ddl.split(";") if x.strip().upper().startswith("CREATE TABLE")]


def _table_name(stmt: str) -> str:
    head = stmt.split("(", 1)[0].split()
    return head[-1]


def shim_tables(conn: sqlite3.Connection, ddl: str, added: dict[str, Sequence[tuple[str, str]]] | None = None) -> int:
    """Make the tables of ``ddl`` readable in their current shape on ``conn`` without writing its
    file: each one missing becomes an empty ``TEMP`` table, each one lacking columns a ``TEMP``
    view of the file's table with the missing columns as NULL. How many objects were made."""
    made = 0
    for stmt in _statements(ddl):
        name = _table_name(stmt)
        have = _columns(conn, "main", name)
        temp = conn.execute("SELECT type FROM temp.sqlite_master WHERE name=?", (name,)).fetchone()
        if temp is not None:
            continue  # made already on this connection
        body = stmt.split("(", 1)[1]
        if not have:
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name}({body}")
            made += 1
            continue
        conn.execute(f"CREATE TEMP TABLE memolab_shape({body}")
        want = _columns(conn, "temp", "memolab_shape")
        conn.execute("DROP TABLE temp.memolab_shape")
        missing = [c for c in want if c not in have]
        if missing:
            cols = ", ".join([*have, *(f"NULL AS {c}" for c in missing)])
            conn.execute(f"CREATE TEMP VIEW {name} AS SELECT {cols} FROM main.{name}")
            made += 1
    return made


def read_shims(conn: sqlite3.Connection) -> bool:
    """On a connection reading a file of an older schema, the index's tables as this memolab reads
    them (``shim_tables``); whether the file is older (``False`` for a current or a new one)."""
    v = file_version(conn)
    if v == 0 or v >= SCHEMA_VERSION:
        return False
    shim_tables(conn, DDL)
    return True


def connect(target: str, setup: Sequence[str] = (), **options: Any) -> sqlite3.Connection:
    """``sqlite3.connect(target, **options)``, then ``setup``'s statements: a connection whose
    set-up fails (a read-only file, a damaged one) is closed, not left to the garbage collector,
    which holds the file open until it runs (and 3.13 reports it: ``ResourceWarning``)."""
    c: sqlite3.Connection = sqlite3.connect(target, **options)
    try:
        for statement in setup:
            c.execute(statement).fetchall()
    except BaseException:
        c.close()
        raise
    return c
