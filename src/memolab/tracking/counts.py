"""How many runs and evaluations each function has, kept by triggers: what a page's "20 of
1,000,000" costs is one row, not a count of a million.

Two small tables in the store's index, maintained by SQLite triggers on ``runs`` and
``evaluations`` (whoever writes them: a call, ``gc``, ``clear``, a team pull, a logs bundle, an
older memolab; ``TEMP`` triggers on the connection that writes, or an older memolab's in the
file: see below):

* ``run_counts(fn, script, runs, stored, last)``: per function and script (``''``: no known
  script), its runs, those of them whose ``eval_id`` names a stored evaluation, and the newest
  ``started`` (a maximum kept on insert: deleting runs leaves it as it was);
* ``evaluation_counts(fn, n, hits, size, duration)``: per function, its stored evaluations and the
  sums of their hits, sizes and compute times (``memolab ls``'s columns).

The evaluations stored without a run of a function are ``n - SUM(stored)`` (one run names one
evaluation: a run records one computed call).

``INSERT OR REPLACE`` removes the rows it replaces without a delete trigger (SQLite fires none
unless ``recursive_triggers`` is on): a ``BEFORE INSERT`` trigger takes them off first, as the
lineage triggers do (``store.schema.LINEAGE_TRIGGERS``). An ``INSERT OR IGNORE`` of an existing
key fires that trigger and inserts nothing, so no writer uses it on ``evaluations`` (``doctor
--repair`` inserts with ``NOT EXISTS``); ``doctor`` recounts and repairs the tables whatever made
them drift (``check``).

The triggers are ``TEMP`` triggers of each connection that writes (``temptriggers``: a file
holding them made every connection parse them, a fresh process's first hit included); an older
memolab keeps the counts with the same triggers in the file, which the ``TEMP`` ones then leave
to count.

A store gains the tables the first time a memolab with them opens it to log
(``tracking.schema.ensure``): one count of what is there and the marker (``MARKER``) that says the
armed connections keep them, in one write transaction. Where they are missing (an older store read
as it is: its ``temp`` shims are empty tables), ``available`` says so and readers count as before.
"""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from ..store import arming, walpeers
from . import temptriggers

TABLES = """
CREATE TABLE IF NOT EXISTS run_counts(
    fn TEXT NOT NULL, script TEXT NOT NULL,
    runs INTEGER NOT NULL, stored INTEGER NOT NULL, last REAL,
    PRIMARY KEY(fn, script)
) WITHOUT ROWID;
-- one row: the digits of a run id that tell every run apart (before SHORT_MIN: cli/ids.py)
CREATE TABLE IF NOT EXISTS run_digits(n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS evaluation_counts(
    fn TEXT NOT NULL PRIMARY KEY, n INTEGER NOT NULL, hits INTEGER NOT NULL, size INTEGER NOT NULL,
    duration REAL NOT NULL
) WITHOUT ROWID;
"""

# the stored evaluations a run names, per group of run_counts
_STORED = "EXISTS (SELECT 1 FROM evaluations WHERE id = {}.eval_id)"
_ADD_RUN = ("INSERT INTO run_counts(fn, script, runs, stored, last) VALUES (NEW.fn, COALESCE(NEW.script, ''), 1, "
            + _STORED.format("NEW") + ", NEW.started) ON CONFLICT(fn, script) DO UPDATE SET runs = runs + 1, "
            "stored = stored + excluded.stored, last = MAX(COALESCE(last, excluded.last), excluded.last);")
_DROP_RUN = ("UPDATE run_counts SET runs = runs - 1, stored = stored - " + _STORED.format("OLD")
             + " WHERE fn = OLD.fn AND script = COALESCE(OLD.script, '');")
# the runs naming evaluation X, counted into their own group of run_counts
_NAMING = ("(SELECT COUNT(*) FROM runs r WHERE r.eval_id = {x} AND r.fn = run_counts.fn "
           "AND COALESCE(r.script, '') = run_counts.script) WHERE fn IN (SELECT fn FROM runs WHERE eval_id = {x})")
# the rows an INSERT OR REPLACE of NEW replaces (its key's, or its id's)
_REPLACED = ("(SELECT id FROM evaluations WHERE fn = NEW.fn AND code = NEW.code AND args = NEW.args "
             "AND schema = NEW.schema UNION SELECT id FROM evaluations WHERE id = NEW.id)")

_ADD_EVALUATION = ("INSERT INTO evaluation_counts(fn, n, hits, size, duration) VALUES (NEW.fn, 1, NEW.hits, "
                   "COALESCE(NEW.size, 0), COALESCE(NEW.duration, 0)) ON CONFLICT(fn) DO UPDATE SET n = n + 1, "
                   "hits = hits + excluded.hits, size = size + excluded.size, duration = duration + excluded.duration;")
_DROP_EVALUATION = ("UPDATE evaluation_counts SET n = n - 1, hits = hits - OLD.hits, size = size - COALESCE(OLD.size, 0), "
                    "duration = duration - COALESCE(OLD.duration, 0) WHERE fn = OLD.fn;")

#: ``counts_evaluation_replace`` as memolab made it before ``_REPLACE`` (``shorten`` replaces it): the
#: same numbers, each of the four sums with its own subquery
_REPLACE_UNROLLED = (
    "CREATE TRIGGER IF NOT EXISTS counts_evaluation_replace BEFORE INSERT ON evaluations "
    "WHEN EXISTS (SELECT 1 FROM evaluations WHERE fn = NEW.fn AND code = NEW.code AND args = NEW.args "
    "AND schema = NEW.schema) OR EXISTS (SELECT 1 FROM evaluations WHERE id = NEW.id) BEGIN "
    "UPDATE evaluation_counts SET n = n - (SELECT COUNT(*) FROM evaluations o WHERE o.fn = evaluation_counts.fn "
    f"AND o.id IN {_REPLACED}), hits = hits - (SELECT COALESCE(SUM(o.hits), 0) FROM evaluations o "
    f"WHERE o.fn = evaluation_counts.fn AND o.id IN {_REPLACED}), size = size - (SELECT COALESCE(SUM(o.size), 0) "
    f"FROM evaluations o WHERE o.fn = evaluation_counts.fn AND o.id IN {_REPLACED}), duration = duration - "
    f"(SELECT COALESCE(SUM(o.duration), 0) FROM evaluations o WHERE o.fn = evaluation_counts.fn "
    f"AND o.id IN {_REPLACED}) "
    f"WHERE fn IN (SELECT fn FROM evaluations WHERE id IN {_REPLACED}); "
    "UPDATE run_counts SET stored = stored - (SELECT COUNT(*) FROM runs r WHERE r.fn = run_counts.fn "
    f"AND COALESCE(r.script, '') = run_counts.script AND r.eval_id IN {_REPLACED}) "
    f"WHERE fn IN (SELECT fn FROM runs WHERE eval_id IN {_REPLACED}); END"
)

#: What an ``INSERT OR REPLACE`` takes off the counts for the rows it replaces, before it inserts:
#: the four sums of ``evaluation_counts`` in one row-valued ``SET`` (one subquery, where
#: ``_REPLACE_UNROLLED`` ran one per sum: 2.1 KB every connection parsed), the runs naming them
#: off ``run_counts.stored``. The same numbers (``tests/test_counts.py`` recounts after every write).
_REPLACE = (
    "CREATE TRIGGER IF NOT EXISTS counts_evaluation_replace BEFORE INSERT ON evaluations "
    "WHEN EXISTS (SELECT 1 FROM evaluations WHERE fn = NEW.fn AND code = NEW.code AND args = NEW.args "
    "AND schema = NEW.schema) OR EXISTS (SELECT 1 FROM evaluations WHERE id = NEW.id) BEGIN "
    "UPDATE evaluation_counts SET (n, hits, size, duration) = (SELECT evaluation_counts.n - COUNT(*), "
    "evaluation_counts.hits - COALESCE(SUM(o.hits), 0), evaluation_counts.size - COALESCE(SUM(o.size), 0), "
    "evaluation_counts.duration - COALESCE(SUM(o.duration), 0) FROM evaluations o "
    f"WHERE o.fn = evaluation_counts.fn AND o.id IN {_REPLACED}) "
    f"WHERE fn IN (SELECT fn FROM evaluations WHERE id IN {_REPLACED}); "
    "UPDATE run_counts SET stored = stored - (SELECT COUNT(*) FROM runs r WHERE r.fn = run_counts.fn "
    f"AND COALESCE(r.script, '') = run_counts.script AND r.eval_id IN {_REPLACED}) "
    f"WHERE fn IN (SELECT fn FROM runs WHERE eval_id IN {_REPLACED}); END"
)

TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS counts_run_add AFTER INSERT ON runs BEGIN " + _ADD_RUN + " END",
    "CREATE TRIGGER IF NOT EXISTS counts_run_drop AFTER DELETE ON runs BEGIN " + _DROP_RUN + " END",
    "CREATE TRIGGER IF NOT EXISTS counts_run_move AFTER UPDATE OF fn, script, eval_id ON runs "
    "WHEN OLD.fn IS NOT NEW.fn OR OLD.script IS NOT NEW.script OR OLD.eval_id IS NOT NEW.eval_id BEGIN "
    + _DROP_RUN + " " + _ADD_RUN + " END",
    _REPLACE,
    "CREATE TRIGGER IF NOT EXISTS counts_evaluation_add AFTER INSERT ON evaluations BEGIN "
    + _ADD_EVALUATION + " UPDATE run_counts SET stored = stored + " + _NAMING.format(x="NEW.id") + "; END",
    "CREATE TRIGGER IF NOT EXISTS counts_evaluation_drop AFTER DELETE ON evaluations BEGIN "
    + _DROP_EVALUATION + " UPDATE run_counts SET stored = stored - " + _NAMING.format(x="OLD.id") + "; END",
    "CREATE TRIGGER IF NOT EXISTS counts_evaluation_hits AFTER UPDATE OF hits, fn, size, duration ON evaluations "
    "WHEN OLD.hits IS NOT NEW.hits OR OLD.fn IS NOT NEW.fn OR OLD.size IS NOT NEW.size "
    "OR OLD.duration IS NOT NEW.duration BEGIN " + _DROP_EVALUATION + " " + _ADD_EVALUATION + " END",
)



def _lcp(a: str, b: str) -> str:
    """SQL: how many leading characters two different texts ``a`` and ``b`` share: a prefix that
    matches implies every shorter one does, so the matching prefix lengths sum to it (past the
    shorter one's end, ``substr`` gives the whole texts, which differ)."""
    return " + ".join(f"(substr({a}, 1, {k}) = substr({b}, 1, {k}))" for k in range(1, 20))


#: the digit counts 1 to 19 (a run id is below 2**63: at most 19 digits), as a table of one
#: column (``column1``): one ``VALUES`` list, where the trigger once wrote each length out
_LENGTHS = "(VALUES " + ",".join(f"({d})" for d in range(1, 20)) + ")"
#: per digit count ``d``: the smallest and largest id of that many digits
_SPANS = ("(SELECT column1 AS d, CAST(substr('1000000000000000000', 1, column1) AS INTEGER) AS lo, "
          "CASE WHEN column1 < 19 THEN CAST(substr('9999999999999999999', 1, column1) AS INTEGER) "
          f"ELSE {2 ** 63 - 1} END AS hi FROM {_LENGTHS})")


def _digits_trigger() -> str:
    """A run's id shown as its shortest unique start (``cli/ids.py``: ``r147562``): how many digits
    tell every run apart is the longest start two ids share, plus one. A new id's longest shared
    start is with one of its two neighbours in text order among the ids of each length, and ids of
    one length sort as text as they do as numbers: per length, the nearest id below and above the
    new one's start (padded or cut to that length) are two seeks of the primary key. Deleting a run
    leaves the number as it was (still enough digits, perhaps one more than needed).

    The lengths come from one ``VALUES`` list (``_SPANS``), each neighbour a subquery run per
    length: 1.9 KB of SQL, where writing the 38 seeks out (``unrolled_digits_trigger``, what
    memolab made before) took 8.4 KB, and every connection parses its schema's triggers on its
    first statement (a third of a fresh process's first hit). The same number after every
    insert (``tests/test_first_call.py`` compares both on random and edge ids)."""
    t = "CAST(NEW.id AS TEXT)"
    x = f"CAST(substr({t} || '0000000000000000000', 1, d) AS INTEGER)"
    # (ORDER BY … LIMIT 1, not MAX(): a seek, where an aggregate over a range walks it)
    below = f"(SELECT id FROM runs WHERE id >= lo AND id < {x} AND id != NEW.id ORDER BY id DESC LIMIT 1)"
    above = f"(SELECT id FROM runs WHERE id >= {x} AND id <= hi AND id != NEW.id ORDER BY id ASC LIMIT 1)"
    return ("CREATE TRIGGER IF NOT EXISTS counts_run_digits AFTER INSERT ON runs BEGIN "
            f"UPDATE run_digits SET n = MAX(n, 1 + COALESCE((SELECT MAX({_lcp('t', 'o')}) FROM "
            f"(SELECT {t} AS t, CAST(o AS TEXT) AS o FROM (SELECT {below} AS o FROM {_SPANS} "
            f"UNION ALL SELECT {above} FROM {_SPANS}) WHERE o IS NOT NULL)), 0)); END")


def unrolled_digits_trigger() -> str:
    """``counts_run_digits`` as memolab made it before the short form (``_digits_trigger``): the
    same number, each length's two seeks written out. Recognised on a writable open and replaced
    (``install``); an older memolab that makes it again (it makes the triggers a store lacks) is
    still right, and the next writable open makes it short again."""
    t = "CAST(NEW.id AS TEXT)"
    near = []
    for d in range(1, 20):
        lo, hi = 10 ** (d - 1), min(10 ** d - 1, 2 ** 63 - 1)
        x = f"CAST(substr({t} || '0000000000000000000', 1, {d}) AS INTEGER)"
        for order, rng in (("DESC", f"id >= {lo} AND id < {x}"), ("ASC", f"id >= {x} AND id <= {hi}")):
            near.append(f"SELECT * FROM (SELECT id FROM runs WHERE {rng} AND id != NEW.id ORDER BY id {order} LIMIT 1)")
    return ("CREATE TRIGGER IF NOT EXISTS counts_run_digits AFTER INSERT ON runs BEGIN "
            f"UPDATE run_digits SET n = MAX(n, 1 + COALESCE((SELECT MAX({_lcp('t', 'o')}) FROM "
            f"(SELECT {t} AS t, CAST(id AS TEXT) AS o FROM (" + " UNION ALL ".join(near) + "))), 0)); END")


_LAST = "counts_evaluation_hits"
#: the ``meta`` key that says the tables were filled and the armed connections keep them (``temptriggers``)
MARKER = arming.COUNTS_MARKER

#: what the tables hold, counted from the rows (install, ``check``)
_RECOUNT_RUNS = ("SELECT r.fn, COALESCE(r.script, ''), COUNT(*), COUNT(e.id), MAX(r.started) FROM runs r "
                 "LEFT JOIN evaluations e ON e.id = r.eval_id GROUP BY 1, 2")
_RECOUNT_EVALUATIONS = ("SELECT fn, COUNT(*), COALESCE(SUM(hits), 0), COALESCE(SUM(size), 0), "
                        "COALESCE(SUM(duration), 0) FROM evaluations GROUP BY fn")
#: (``doctor``: where its walk met a number that is not one, SQLite's arithmetic is the judge)
RECOUNT_EVALUATIONS = _RECOUNT_EVALUATIONS


def statements() -> list[str]:
    """The tables' ``CREATE … IF NOT EXISTS`` statements, one by one."""
    return [x.strip() for x in TABLES.split(";") if x.strip()]


_NAMES = ("counts_run_digits", "counts_run_add", "counts_run_drop", "counts_run_move", "counts_evaluation_replace",
          "counts_evaluation_add", "counts_evaluation_drop", _LAST)


def available(c: Any) -> bool:
    """Whether the file ``c`` reads keeps the counts: filled and kept by armed connections (its
    marker), or every trigger of an older memolab is in it (a ``temp`` shim is an empty table)."""
    return temptriggers.marked(c, MARKER) or len(temptriggers.in_file(c, _NAMES)) == len(_NAMES)


def install(c: sqlite3.Connection) -> bool:
    """Make the tables on a writable index that lacks them, filled from the rows there, with the
    marker, in one write transaction (the caller's, if it is in one); whether it made them. An
    index that has an older memolab's triggers in the file leaves them to armed connections
    (``move``) where no other process has it open, else gets the shorter ones (``shorten``)."""
    if temptriggers.marked(c, MARKER):
        return False
    if len(temptriggers.in_file(c, _NAMES)) == len(_NAMES):
        if not move(c, MARKER, _NAMES):
            shorten(c)
        return False
    return install_once(c, available, _make)


def temp_triggers() -> tuple[str, ...]:
    """The counts' triggers as an armed connection makes them (``temptriggers.temp_form``; made once
    a process, by ``tracking.schema``)."""
    return tuple(temptriggers.temp_form(s, MARKER) for s in (_digits_trigger(), *TRIGGERS))


def move(c: sqlite3.Connection, marker: str, names: tuple[str, ...]) -> bool:
    """Drop an older memolab's triggers ``names`` from the file and write ``marker`` (the armed
    connections keep the tables from then on: their ``TEMP`` triggers stood down while those were
    there), in one write transaction (the caller's, if it is in one), where no other process has
    the file open (``walpeers``: one connected, an older memolab's, would go on writing without
    them); whether they were moved (or another process had moved them)."""
    path = next((f for _, name, f in c.execute("PRAGMA database_list") if name == "main"), None)
    if path is None:
        return False
    with _write_transaction(c):
        if temptriggers.marked(c, marker):
            return True  # (another process moved them meanwhile)
        if walpeers.others_connected(path):
            return False
        for name in sorted(temptriggers.in_file(c, names)):
            c.execute(f"DROP TRIGGER main.{name}")
        temptriggers.mark(c, marker)
    return True


def _as_kept(create: str) -> str:
    """A ``CREATE TRIGGER IF NOT EXISTS`` statement as SQLite keeps it in ``sqlite_master`` (the
    clause left out)."""
    return create.replace("CREATE TRIGGER IF NOT EXISTS ", "CREATE TRIGGER ", 1)


_shortened_forms: dict[str, tuple[str, str]] = {}


def _shortened() -> dict[str, tuple[str, str]]:
    """name -> (the trigger as an older memolab made it, as this one makes it): the same numbers
    (made once a process: every writable open asks)."""
    if not _shortened_forms:
        _shortened_forms.update({"counts_run_digits": (unrolled_digits_trigger(), _digits_trigger()),
                                 "counts_evaluation_replace": (_REPLACE_UNROLLED, _REPLACE)})
    return _shortened_forms


def _older(c: sqlite3.Connection) -> list[str]:
    names = _shortened()
    kept = c.execute("SELECT name, sql FROM main.sqlite_master WHERE type='trigger' AND name IN (?, ?)", tuple(names))
    return [name for name, sql in kept if sql == _as_kept(names[name][0])]


def shorten(c: sqlite3.Connection) -> list[str]:
    """Replace the triggers an older memolab made longer (``_shortened``: the unrolled digits
    trigger, 8.4 KB, and the replace trigger, 2.1 KB, that every connection parses before its
    first statement) with this memolab's, in one write transaction (the caller's, if it is in
    one): each dropped and made again there, so no write ever runs without it. A trigger of any
    other text (a newer memolab's) is left as it is. The names replaced.

    An older memolab keeps working on the store: it asks for its triggers by name (all there)
    and they keep the same numbers; where one is missing it makes its own long form again, which
    is right too, and the next writable open here shortens it again."""
    if not _older(c):
        return []
    with _write_transaction(c):
        done = _older(c)  # (another process may have replaced them meanwhile)
        for name in done:
            c.execute(f"DROP TRIGGER main.{name}")  # (not an armed connection's TEMP one of its name)
            c.execute(_shortened()[name][1])
    return done


@contextlib.contextmanager
def _write_transaction(c: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: the caller's, if it is in one; else one begun here (``IMMEDIATE``:
    the write lock first), committed at the end and rolled back on any exception."""
    own = not c.in_transaction
    if own:
        c.execute("BEGIN IMMEDIATE")
    try:
        yield
        if own:
            c.execute("COMMIT")
    except BaseException:
        if own and c.in_transaction:
            c.execute("ROLLBACK")
        raise


def _make(c: sqlite3.Connection) -> None:
    _fill(c)
    temptriggers.mark(c, MARKER)


def install_once(c: sqlite3.Connection, available: Callable[[sqlite3.Connection], bool],
                 make: Callable[[sqlite3.Connection], None]) -> bool:
    """Run ``make`` on a writable index where ``available`` says what it makes is missing, in one
    write transaction (the caller's, if it is in one), asking again under the write lock (another
    process may have made it meanwhile); whether it was missing. The kept tables' one way in
    (these counts, ``argindex``): never on a logs bundle's own file, which has no evaluations."""
    if available(c):
        return False
    if c.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='evaluations'").fetchone() is None:
        return False  # (not a store's index: a logs bundle's own file)
    with _write_transaction(c):
        if not available(c):  # (another process may have made them meanwhile)
            make(c)
    return True


def _fill(c: sqlite3.Connection) -> None:
    for stmt in statements():
        c.execute(stmt)
    c.execute("DELETE FROM run_counts")
    c.execute("DELETE FROM evaluation_counts")
    c.execute(f"INSERT INTO run_counts(fn, script, runs, stored, last) {_RECOUNT_RUNS}")
    c.execute(f"INSERT INTO evaluation_counts(fn, n, hits, size, duration) {_RECOUNT_EVALUATIONS}")
    c.execute("DELETE FROM run_digits")
    c.execute("INSERT INTO run_digits(n) VALUES (?)", (shared_digits(c) + 1,))


def shared_digits(c: Any) -> int:
    """The longest start two run ids share, from every id (install, ``check``)."""
    return digits_shared_by(i for (i,) in c.execute("SELECT id FROM runs"))


def digits(c: Any) -> int | None:
    """The digits of a run id that tell every run apart (at least 1); None where not kept."""
    if not available(c):
        return None
    row = c.execute("SELECT n FROM run_digits").fetchone()
    return int(row[0]) if row else None


def check(c: sqlite3.Connection, repair: bool = False) -> list[str]:
    """What the tables say that the rows do not (``doctor``): one line per function and count;
    with ``repair``, recounted. O(rows): ``doctor`` reads them anyway."""
    if not available(c):
        return []
    want_r = {(r[0], r[1]): tuple(r[2:4]) for r in c.execute(_RECOUNT_RUNS)}
    have_r = {(r[0], r[1]): tuple(r[2:4]) for r in c.execute("SELECT fn, script, runs, stored FROM run_counts")
              if r[2] or r[3]}
    # (the summed compute time is a float: kept to a millisecond)
    want_e = {r[0]: (*r[1:4], round(r[4], 3)) for r in c.execute(_RECOUNT_EVALUATIONS)}
    have_e = {r[0]: (*r[1:4], round(r[4], 3)) for r in c.execute("SELECT fn, n, hits, size, duration "
                                                                  "FROM evaluation_counts") if r[1] or r[2]}
    out = [f"runs of {fn} ({script or 'no script'}): kept {have_r.get((fn, script))}, counted {want_r.get((fn, script))}"
           for fn, script in sorted(set(want_r) | set(have_r)) if want_r.get((fn, script)) != have_r.get((fn, script))]
    out += [f"evaluations of {fn}: kept {have_e.get(fn)}, counted {want_e.get(fn)}"
            for fn in sorted(set(want_e) | set(have_e)) if want_e.get(fn) != have_e.get(fn)]
    need = shared_digits(c) + 1
    kept = digits(c)
    if kept is None or kept < need:
        out.append(f"run id digits: kept {kept}, {need} needed")
    if out and repair:
        _fill(c)
    return out


# -- doctor: counts made from its own walk over the rows, compared and written back -------------

Kept = tuple[dict[tuple[str, str], tuple[int, int]], dict[str, tuple[Any, ...]], "int | None"]


def as_text(v: Any) -> Any:
    # (a connection reading with a bytes text factory, as ``doctor``'s does: names as they are kept)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def kept(c: Any) -> Kept:
    """What the tables hold: ({(fn, script): (runs, stored)}, {fn: (n, hits, size, duration)}, digits)."""
    have_r = {(as_text(r[0]), as_text(r[1])): (r[2], r[3])
              for r in c.execute("SELECT fn, script, runs, stored FROM run_counts") if r[2] or r[3]}
    have_e = {as_text(r[0]): tuple(r[1:5]) for r in c.execute("SELECT fn, n, hits, size, duration FROM evaluation_counts")
              if r[1] or r[2]}
    return have_r, have_e, digits(c)


def differences(have: Kept, want_r: dict[tuple[str, str], tuple[int, int]], want_e: dict[str, tuple[Any, ...]],
                shared: int) -> list[str]:
    """One line per count that ``have`` (``kept``) holds and the rows do not: ``want_r`` {(fn, script):
    (runs, stored)}, ``want_e`` {fn: (n, hits, size, duration)}, ``shared``: the longest start two run
    ids share."""
    have_r, have_e_raw, kept_digits = have
    # (the summed compute time is a float: kept to a millisecond)
    have_e = {fn: (*v[:3], round(v[3], 3)) for fn, v in have_e_raw.items()}
    want = {fn: (*v[:3], round(v[3], 3)) for fn, v in want_e.items()}
    out = [f"runs of {fn} ({script or 'no script'}): kept {have_r.get((fn, script))}, counted {want_r.get((fn, script))}"
           for fn, script in sorted(set(want_r) | set(have_r)) if want_r.get((fn, script)) != have_r.get((fn, script))]
    out += [f"evaluations of {fn}: kept {have_e.get(fn)}, counted {want.get(fn)}"
            for fn in sorted(set(want) | set(have_e)) if want.get(fn) != have_e.get(fn)]
    if kept_digits is None or kept_digits < shared + 1:
        out.append(f"run id digits: kept {kept_digits}, {shared + 1} needed")
    return out


def rewrite(c: sqlite3.Connection, want_r: dict[tuple[str, str], tuple[int, int, Any]],
            want_e: dict[str, tuple[Any, ...]], shared: int) -> None:
    """Replace the tables' rows with counts made from the rows (``doctor``'s walk, under the write
    lock that proved nothing was written since): ``want_r`` {(fn, script): (runs, stored, last)}."""
    c.execute("DELETE FROM run_counts")
    c.execute("DELETE FROM evaluation_counts")
    c.executemany("INSERT INTO run_counts(fn, script, runs, stored, last) VALUES (?,?,?,?,?)",
                  [(fn, script, *v) for (fn, script), v in want_r.items()])
    c.executemany("INSERT INTO evaluation_counts(fn, n, hits, size, duration) VALUES (?,?,?,?,?)",
                  [(fn, *v) for fn, v in want_e.items()])
    c.execute("DELETE FROM run_digits")
    c.execute("INSERT INTO run_digits(n) VALUES (?)", (shared + 1,))


def digits_shared_by(run_ids: Any) -> int:
    """The longest start two of ``run_ids`` share as decimal text (``doctor``'s walk: the ids it
    read; the same as ``shared_digits`` of a store holding those runs)."""
    ids = sorted(str(i) for i in run_ids)
    n = 0
    for a, b in zip(ids, ids[1:], strict=False):
        k = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            k += 1
        n = max(n, k)
    return n


def runs(c: Any, fn: str, script: str | None = None) -> int | None:
    """How many runs ``fn`` has (of ``script``; ``''``: of no known script); None where not kept."""
    if not available(c):
        return None
    if script is None:
        row = c.execute("SELECT SUM(runs) FROM run_counts WHERE fn=?", (fn,)).fetchone()
    else:
        row = c.execute("SELECT runs FROM run_counts WHERE fn=? AND script=?", (fn, script)).fetchone()
    return int(row[0] or 0) if row else 0


def unrun(c: Any, fn: str) -> int | None:
    """How many of ``fn``'s stored evaluations no run names; None where not kept."""
    if not available(c):
        return None
    n = c.execute("SELECT n FROM evaluation_counts WHERE fn=?", (fn,)).fetchone()
    stored = c.execute("SELECT SUM(stored) FROM run_counts WHERE fn=?", (fn,)).fetchone()
    return max(0, int(n[0] if n else 0) - int(stored[0] or 0 if stored else 0))


def per_script(c: Any, fn: str) -> dict[str | None, dict[str, Any]] | None:
    """{script or None: {"runs", "stored", "last"}} of ``fn``; None where not kept."""
    if not available(c):
        return None
    return {s or None: {"runs": n, "stored": st, "last": last}
            for s, n, st, last in c.execute("SELECT script, runs, stored, last FROM run_counts WHERE fn=? AND runs > 0",
                                            (fn,))}


def functions(c: Any) -> dict[str, dict[str, Any]] | None:
    """{fn: {"evaluations", "hits", "runs", "unrun"}} of every function with either; None where not kept."""
    if not available(c):
        return None
    out: dict[str, dict[str, Any]] = {}
    for fn, n, hits in c.execute("SELECT fn, n, hits FROM evaluation_counts WHERE n > 0"):
        out[fn] = {"evaluations": n, "hits": hits, "runs": 0, "stored": 0}
    for fn, n, st in c.execute("SELECT fn, SUM(runs), SUM(stored) FROM run_counts GROUP BY fn HAVING SUM(runs) > 0"):
        d = out.setdefault(fn, {"evaluations": 0, "hits": 0, "runs": 0, "stored": 0})
        d["runs"], d["stored"] = n, st
    for d in out.values():
        d["unrun"] = max(0, d["evaluations"] - d.pop("stored"))
    return out
