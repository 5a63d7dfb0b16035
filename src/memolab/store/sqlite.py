"""The SQLite index of the embedded store.

One file, WAL mode, so readers never block the writer and a crash mid-commit
leaves the last committed state. Each thread gets its own connection (sqlite3
connections must not be shared across threads). Every statement that decides
something (take a lease, record a result) runs in ``BEGIN IMMEDIATE`` so two
processes can never both believe they own a key.

This module holds the ``Index`` class and what a call reads and writes through it: the
statements of a lookup, a claim, a record and a publish, and damaged-row detection. Mixed
into ``Index``: its leases (``store/leasing.py``: key locks, heartbeats, release, whether a
lease's owner is alive), its upkeep (``store/upkeep.py``: hit counts, blob stamps and
references, gc, clearing) and its accepts (``store/accepts.py``).
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import BlobsGone as BlobsGone  # (also imported from here)
from ..key import Key as Key  # (also imported from here)
from ..settings import config
from . import arming, signing
from .accepts import AcceptIndex
from .gcplan import plan_by_size as plan_by_size  # (plan_by_size: also imported from here)
from .inlist import chunks
from .leases import Progress
from .leasing import LeaseIndex
from .misses import parse_miss as parse_miss  # (also imported from here)

# (host_name is looked up in store/leasing.py, so patching it there fakes another host)
from .process import (  # noqa: F401 (old names)
    host_name as host_name,
    process_table,
    process_table as _process_table,
    start_time,
    start_time as _start_time,
)
from .schema import SCHEMA_VERSION as SCHEMA_VERSION, check_schema, connect, has_runs, migrate, newer_schema  # noqa: F401 (also imported from here)
from .upkeep import IndexUpkeep

EVAL_COLUMNS = ("id", "fn", "code", "args", "schema", "status", "payload", "payload_size", "buffers", "size",
                "started", "finished", "duration", "host", "python", "versions", "snapshot", "hits", "last_hit",
                "code_refs", "signature", "reason")

#: What a hit reads: the listing columns plus the inline bytes (payload, then
#: each buffer in order), which listings never fetch.
#: ``result_token`` is the snapshot's ``result_digest`` as JSON text, extracted
#: by SQLite (JSON1, built in since 3.38) so that a hit parses a short list
#: instead of the whole snapshot.
_JSON1 = sqlite3.sqlite_version_info >= (3, 38)
_TOKEN = "".join(f", json_extract(snapshot, '$.{p}')" for p in ("result_digest", "state_deps", "reads")) if _JSON1 else ""
# The row is found through the key's unique index, then read by rowid, and the
# key is compared with the *table's* columns (the last column, ``key_ok``): a
# damaged index b-tree can point a key at another key's row, and SQLite would
# report the key from the index entry. The same page visits as a plain lookup
# (the table row is read anyway), one statement. Its parameters: ``key + key``.
_WHERE_KEY = (", fn=? AND code=? AND args=? AND schema=? FROM evaluations WHERE id=("
              "SELECT id FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=?) AND status='done'")
#: ``state_deps``: the states a row was made in (``call.Call.reroute``); ``reads``: what it read (``memolab.inputs.reads``)
_EXTRACTED = ("result_token", "state_deps", "reads") if _JSON1 else ()
#: what a lookup returns besides the table's columns (the extracted ones and the key check):
#: this index's reading aids, never fields of the evaluation (a team upload leaves them out)
LOOKUP_ONLY = ("result_token", "state_deps", "reads", "key_ok")
HIT_COLUMNS = EVAL_COLUMNS + ("inline",) + _EXTRACTED
_HIT_SQL = f"SELECT {','.join(EVAL_COLUMNS)}, inline{_TOKEN}{_WHERE_KEY}"
#: What loading needs and nothing more: every column fetched (and every text bound) is ~2,000
#: instructions of a hit. Only an unsigned store may use it (a signature covers the snapshot
#: and the code references, so a signed store reads them and the signature), and only with JSON1
#: (else the result token comes from the snapshot).
#: (``started``, ``finished``, ``duration``: what an expiring function's hit judges, ``memo(max_age=...)``,
#: and what a body that uses the result records, ``reads.consumed``)
_LEAN_BASE = ("id", "status", "payload", "payload_size", "buffers", "inline", "started", "finished", "duration")
LEAN_COLUMNS = _LEAN_BASE + _EXTRACTED
# The lean lookup checks the key as ``_WHERE_KEY`` does with half its parameters: the index
# entry is found by the key (a covering search of the unique index: its key columns are the
# entry's own), the row read by the entry's rowid, and the *table row's* key compared with the
# entry's, so with the key: a damaged index b-tree that points the key at another key's row
# still cannot serve that row. Its first column says it all: the row's id when the keys agree
# and the row is in use (``status='done'``), else NULL (an id is never NULL: the rowid), two
# columns less to fetch than the id, the status and the check; a row it does not serve is read
# again in full (``_LOOKUP_SQL``), which tells the damaged index from a row out of use.
# (``CROSS JOIN``: the index entry first, whatever the planner's statistics say;
# ``tests/test_hit_path_costs.py`` pins the plan.)
# Each result column is named by a letter (``AS a``, ...): sqlite3 makes the cursor's
# ``description`` from the names on every execute, and a one-letter name is a string Python
# keeps made (a long one, ``CASE WHEN ...``, is decoded and freed each time): 3,000 instructions
# a hit. The row is read by position (``_LEAN_ROW``), never by these names.
_LEAN_EXPRS = ("CASE WHEN ev.fn=ix.fn AND ev.code=ix.code AND ev.args=ix.args AND ev.schema=ix.schema "
               "AND ev.status='done' THEN ev.id END", *(f"ev.{c}" for c in _LEAN_BASE[2:]),
               *(f"json_extract(ev.snapshot, '$.{p}')" for p in ("result_digest", "state_deps", "reads")))
_LOOKUP_LEAN_SQL = (
    "SELECT " + ", ".join(f"{x} AS {chr(97 + i)}" for i, x in enumerate(_LEAN_EXPRS))
    + " FROM evaluations ix CROSS JOIN evaluations ev WHERE ix.fn=? AND ix.code=? AND ix.args=? AND ix.schema=? "
    "AND ev.id=ix.id")
assert len(_LEAN_EXPRS) == len(LEAN_COLUMNS) - 1 or not _JSON1  # (no status column: a row served is 'done')
# What ``lookup`` runs: whatever the row's status (at most one row per
# key: UNIQUE), so that a miss learns in the same statement whether the key has
# no row at all (the common miss) or one out of use, which the miss explanation
# and the unloadable check then read (``known_absent``).
_STATUS_ANY = " AND status='done'"
_LOOKUP_SQL = _HIT_SQL[: -len(_STATUS_ANY)]
assert _HIT_SQL.endswith(_STATUS_ANY)
# A row these statements cannot read (text that is not UTF-8, a snapshot that is not
# JSON: ``json_extract`` raises for it) would fail every lookup and claim of its key
# for as long as it exists. ``_read`` tells such damage from other failures by
# reading the row's raw bytes, which never fails: every text column as a blob
# (decoded here) and whether the snapshot is JSON.
_TEXT_COLUMNS = tuple(c for c in EVAL_COLUMNS if c not in ("id", "payload_size", "size", "started", "finished",
                                                           "duration", "hits", "last_hit"))
_RAW_SQL = (f"SELECT id, {', '.join(f'CAST({c} AS BLOB)' for c in _TEXT_COLUMNS)}, "
            + ("snapshot IS NULL OR json_valid(snapshot)" if _JSON1 else "1")
            + _WHERE_KEY[: -len(_STATUS_ANY)])


def row_damage(c: sqlite3.Connection, key: Key) -> tuple[int, str, str] | None:
    """(id, status, what is damaged) when the stored row of ``key`` cannot be read (a text
    column that is not UTF-8, a snapshot that is not JSON); None when there is no row or it
    reads. Judged from the row's raw bytes: a verdict about its content, never about the
    moment (a lock, an I/O error)."""
    r = c.execute(_RAW_SQL, key + key).fetchone()
    if r is None or not r[-1]:
        return None  # no row (or the key index points elsewhere: ``_checked`` says so)
    raw = dict(zip(_TEXT_COLUMNS, r[1:-2], strict=False))
    why = None
    for col, v in raw.items():
        try:
            raw[col] = v.decode("utf-8") if isinstance(v, bytes) else v
        except UnicodeDecodeError:
            raw[col] = v.decode("utf-8", "replace")
            why = why or f"its {col} column is not UTF-8 text"
    if why is None and not r[-2]:
        why = "its snapshot column is not JSON"
    return None if why is None else (int(r[0]), raw["status"] or "", f"damaged index row: {why}")


def key_params(*values: Any) -> dict[str, Any]:
    """``:k1``, ``:k2``, ... from a key (not ``?1``: Python 3.12 warns of it, 3.14 refuses it)."""
    return {f"k{i}": v for i, v in enumerate(values, 1)}


def _read(c: sqlite3.Connection, sql: str, cols: tuple[str, ...],
          key: Key) -> tuple[dict[str, Any] | None, tuple[int, str, str] | None]:
    """(the row ``sql`` reads for ``key``, None), or (None, ``row_damage``) for a row it cannot read."""
    try:
        return _checked(c.execute(sql, key + key).fetchone(), cols), None
    except (sqlite3.OperationalError, UnicodeDecodeError) as e:  # (Python < 3.12 raises the latter for bad text)
        return None, _damage(c, key, e)


def _damage(c: sqlite3.Connection, key: Key, e: BaseException) -> tuple[int, str, str]:
    """``row_damage`` of the row whose read raised ``e``; ``e`` again when the row reads (then
    it is not the row's content but the store's trouble, reported as such)."""
    try:
        damage = row_damage(c, key)
    except sqlite3.Error:
        damage = None
    if damage is None:
        raise e from None
    return damage


_RETIRE_SQL = "UPDATE evaluations SET status='corrupt', reason=? WHERE id=? AND status='done'"


#: The nearest stored evaluation of a key's function, for the miss explanation:
#: same arguments (only code changed), else same code (only arguments changed),
#: else the newest. One statement: UNION ALL stops at the first row found.
_NEAREST_SQL = " UNION ALL ".join(
    f"SELECT * FROM (SELECT {','.join(EVAL_COLUMNS)} FROM evaluations WHERE fn=:k1 AND {where} AND status='done' "
    "AND id<=:k5 "
    "ORDER BY finished DESC LIMIT 1)" for where in ("args=:k3 AND schema=:k4", "code=:k2 AND schema=:k4", "1")) + " LIMIT 1"


#: ``_NEAREST_SQL`` among the evaluations a given script computed (or whose script is not
#: known): two scripts that each define ``train`` share the symbol ``__main__:train``, and
#: one script's evaluation is not an earlier version of the other's.
_NEAREST_IN_SCRIPT_SQL = _NEAREST_SQL.replace(
    "AND id<=:k5 ", "AND id<=:k5 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.eval_id=evaluations.id "
    "AND r.script IS NOT NULL AND r.script!=:k6) ")

_MAX_ID = 2 ** 63 - 1
#: the newest evaluation's id (ids only grow: AUTOINCREMENT), bounding what a deferred miss is compared with
NEWEST_ID_SQL = "SELECT max(id) FROM evaluations"

#: Columns a published row may carry (``publish``): the listing columns and the inline bytes.
_PUBLISHED = frozenset(EVAL_COLUMNS + ("inline",))


def _row_maker(columns: tuple[str, ...], fixed: dict[str, str] | None = None) -> Callable[[tuple[Any, ...]], dict[str, Any]]:
    """``lambda r: {columns[0]: r[0], ...}``: a hit's row as a dict in one dict display, about half
    the instructions of ``dict(zip(columns, r))`` (which makes and unpacks a pair per column).
    ``fixed``: columns the statement does not fetch, with the value each has in every row it reads."""
    assert all(c.isidentifier() for c in columns)  # (the index's own column names, nothing else)
    fixed = fixed or {}
    at = iter(range(len(columns)))
    return eval("lambda r: {" + ", ".join(f"{c!r}: {fixed[c]!r}" if c in fixed else f"{c!r}: r[{next(at)}]"  # type: ignore[no-any-return]  # noqa: S307
                                          for c in columns) + "}")


#: the row makers of the lookups a hit runs (others: ``dict(zip(...))``); a row the lean
#: statement serves is in use (its first column is NULL for any other)
_LEAN_ROW, _HIT_ROW = _row_maker(LEAN_COLUMNS, {"status": "done"}), _row_maker(HIT_COLUMNS)


_DAMAGED_INDEX = "the index returned the row of another key: the index is damaged"


def _checked(row: tuple[Any, ...] | None, columns: tuple[str, ...]) -> dict[str, Any] | None:
    if row is None:
        return None
    if not row[-1]:
        raise sqlite3.DatabaseError(_DAMAGED_INDEX)
    return _HIT_ROW(row) if columns is HIT_COLUMNS else dict(zip(columns, row, strict=False))




#: Keeps source texts (digest, symbol, text): keyed by digest, never changed, so a text
#: already here stays (the miss explanation's diffs read them).
KEEP_SOURCES_SQL = "INSERT OR IGNORE INTO sources(digest, symbol, source) VALUES (?,?,?)"


class savepoint:
    """All or nothing inside the caller's transaction: on an error, what the block wrote is
    rolled back to the savepoint (the rest of the transaction stays) and the error raised."""

    def __init__(self, c: sqlite3.Connection, name: str) -> None:
        self.c, self.name = c, name

    def __enter__(self) -> sqlite3.Connection:
        self.c.execute(f"SAVEPOINT {self.name}")
        return self.c

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if et is None:
            self.c.execute(f"RELEASE {self.name}")
        elif self.c.in_transaction:  # (SQLite may have rolled the whole transaction back itself)
            self.c.execute(f"ROLLBACK TO {self.name}")
            self.c.execute(f"RELEASE {self.name}")


#: how long opening a new store waits for the switch to WAL (as long as the busy timeout)
WAL_SWITCH_WAIT = 60.0


def _enter_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the file.

    The switch out of rollback mode needs the file to itself, and SQLite answers
    SQLITE_BUSY at once there instead of calling the busy handler: two processes
    opening a new store at the same moment (two jobs started together) saw one of
    them fail with "database is locked" (4 in 800 concurrent opens). Once the file
    is WAL the pragma takes no lock, so only a brand-new store ever waits here.
    """
    deadline = time.monotonic() + WAL_SWITCH_WAIT
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


class Index(LeaseIndex, IndexUpkeep, AcceptIndex):
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not os.path.isdir(self.path.parent):  # (a store opened again: one stat, no EEXIST raised and caught)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._sources_seen: set[str] = set()
        self.progress = Progress()  # leases seen and since when (store/leases.py, rule 2)
        try:  # the fast path: one header read (a current store needs no schema work; opening it writes nothing)
            conn = self.conn()
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                self._migrate(conn, version)
        except BaseException:
            self.close()  # an index that cannot open keeps no connection (the caller opens it otherwise)
            raise

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        """Create the schema, or bring a file written by an older memolab up to date in place
        (``schema.migrate``: its steps by version, idempotent, the version written last)."""
        migrate(conn, self.path, version, self.write, lambda: _enter_wal(conn))

    # -- connections ------------------------------------------------------------------
    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or self._local.pid != config.pid():
            # timeout= is SQLite's busy timeout. synchronous=NORMAL in WAL mode: a commit survives a crash
            # of the process, not necessarily of the machine (see "Durability" in docs/storage-format.md).
            c = connect(str(self.path), ["PRAGMA synchronous=NORMAL"], timeout=60.0, isolation_level=None,
                        check_same_thread=False)
            c.set_authorizer(arming.Refusal(arming.NOTHING))  # (lifted as it is armed: ``write``)
            self._local.conn, self._local.pid, self._local.armed = c, config.pid(), arming.NOTHING
        return c

    def close(self) -> None:
        """Close this thread's connection; the next use opens a new one. Other threads'
        connections are let go (each is closed when its thread ends)."""
        c = getattr(self._local, "conn", None)
        self._local = threading.local()
        if c is not None:
            c.close()

    class _write:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on error.

        Nested on one thread, the inner block joins the outer transaction: a blob
        put inside a write (its stamp is a write) commits or rolls back with it.
        """

        def __init__(self, conn: sqlite3.Connection) -> None:
            self.c = conn
            self.nested = False

        def __enter__(self) -> sqlite3.Connection:
            if self.c.in_transaction:
                self.nested = True
                return self.c
            self.c.execute("BEGIN IMMEDIATE")
            return self.c

        def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
            if self.nested:
                return  # the outer block commits, or rolls back on our exception
            if et is None:
                try:
                    self.c.execute("COMMIT")
                except BaseException:
                    # A COMMIT that fails (disk full, I/O error) may leave the
                    # transaction open: every later BEGIN on this thread's
                    # connection would then fail. End it before re-raising.
                    if self.c.in_transaction:
                        self.c.execute("ROLLBACK")
                    raise
            elif self.c.in_transaction:  # SQLite may have rolled back on its own (SQLITE_FULL)
                self.c.execute("ROLLBACK")

    def write(self, arms: frozenset[arming.Write] = arming.EVERY) -> Index._write:
        """A write transaction (``_write``) on this thread's connection, armed first for ``arms``
        (the kept counts' TEMP triggers of those writes: ``store.arming``; by default, every one)."""
        c = self.conn()
        if not arms <= self._local.armed and not c.in_transaction:
            self._local.armed = arming.arm(c, arms, self._local.armed)
        return Index._write(c)

    # -- evaluations --------------------------------------------------------------------
    def lookup(self, key: Key, lean: bool = False) -> dict[str, Any] | None:
        """The stored evaluation of ``key`` (with its inline bytes), or None: one
        point query on the key's unique index, no transaction, no write.
        ``lean``: only the columns loading needs (``LEAN_COLUMNS``), for unsigned stores."""
        damaged: tuple[int, str, str] | None
        if lean and _JSON1:  # (a hit's way: ``_read`` and ``_checked`` written out, two Python calls less)
            c = self.conn()
            try:
                # (a plain tuple: sqlite3 binds a tuple subclass, the ``Key``, item by item through
                # the sequence protocol, 2,300 instructions more than the slice costs)
                r = c.execute(_LOOKUP_LEAN_SQL, key[:]).fetchone()
            except (sqlite3.OperationalError, UnicodeDecodeError) as e:
                row, damaged = None, _damage(c, key, e)
            else:
                if r is not None and r[0] is not None:  # (its id: NULL unless the key checks and it is in use)
                    return _LEAN_ROW(r)  # a hit leaves the note alone (see below)
                # no row (a miss), or one the lean read does not serve: the full read says why
                # (another key's row: a damaged index; a row out of use) or serves it (in use since)
                row, damaged = (None, None) if r is None else _read(c, _LOOKUP_SQL, HIT_COLUMNS, key)
        else:
            row, damaged = _read(self.conn(), _LOOKUP_SQL, HIT_COLUMNS, key)
        if row is None:
            # no row at all, or one that cannot be read: a miss, whose claim takes that row
            # out of use (``claim``: under the write lock) so that the computation replaces it
            self._local.absent = key if damaged is None else None
            return None
        if row["status"] != "done":
            self._local.absent = None
            return None  # out of use (corrupt, stale, unloadable): a miss
        # a hit leaves the note alone: it is read only right after a lookup that found no usable row
        return row

    def known_absent(self, key: Key) -> bool:
        """Did this thread's latest ``lookup`` find no row at all for ``key`` (not
        even one out of use)? Lets a miss skip reading what such a row would say."""
        return getattr(self._local, "absent", None) == key

    def nearest(self, key: Key, before: int | None = None, script: str | None = None) -> dict[str, Any] | None:
        """The stored evaluation of ``key``'s function closest to it (see ``_NEAREST_SQL``), or
        None; ``before``: among those with ids up to it (the evaluations a past miss saw);
        ``script``: among those that script computed or whose script is unknown."""
        c = self.conn()
        params: tuple[Any, ...] = (*key, _MAX_ID if before is None else before)
        sql = _NEAREST_SQL
        if script is not None and has_runs(c):
            sql, params = _NEAREST_IN_SCRIPT_SQL, params + (script,)
        r = c.execute(sql, key_params(*params)).fetchone()
        return dict(zip(EVAL_COLUMNS, r, strict=False)) if r is not None else None

    def snapshot_of_code(self, fn: str, code: str, schema: str) -> str | None:
        """The snapshot (JSON text) of an evaluation of ``fn`` with code digest ``code``, or
        None: its ``deps`` are those of every evaluation of that code."""
        r = self.conn().execute("SELECT snapshot FROM evaluations WHERE fn=? AND code=? AND schema=? "
                                "AND snapshot IS NOT NULL ORDER BY finished DESC LIMIT 1", (fn, code, schema)).fetchone()
        return r[0] if r else None

    def inline_of(self, eval_id: int) -> bytes | None:
        row = self.conn().execute("SELECT inline FROM evaluations WHERE id=?", (eval_id,)).fetchone()
        return row[0] if row else None

    def claim(self, key: Key, owner: str, ttl: float, force: bool = False,
              on_owner: Callable[[sqlite3.Connection], None] | None = None) -> tuple[str, dict[str, Any] | None]:
        """Atomically: ('hit', row) if stored; else ('owner', None) if we took the
        lease (free, or its holder stopped heart-beating); else ('wait', None).
        ``force`` skips the stored row (recompute and overwrite). ``on_owner``
        runs in the same transaction when we take the lease (the miss record:
        one commit instead of two)."""
        key = tuple(key)  # type: ignore[assignment]
        locks = self.key_locks()
        took = locks.take(key) if locks is not None else None  # (rule 1 of store/leases.py: before the row)
        state, prior = "wait", locks.owners.get(key) if took else None  # type: ignore[union-attr]
        try:
            state, row = self._claim(key, owner, ttl, force, on_owner, took)  # (registers us as holding it)
            return state, row
        finally:
            if took:
                locks.settle(key, owner, prior, state == "owner")  # type: ignore[union-attr]

    def _claim(self, key: Key, owner: str, ttl: float, force: bool, on_owner: Callable[[sqlite3.Connection], None] | None,
               took: bool | None) -> tuple[str, dict[str, Any] | None]:
        with self.write() as c:
            if not force:
                row, damaged = _read(c, _HIT_SQL, HIT_COLUMNS, key)
                if row:
                    return "hit", row
                if damaged is not None:
                    # judged under the write lock, on the row as it is now: a row that
                    # cannot be read goes out of use, and our computation replaces it
                    c.execute(_RETIRE_SQL, (damaged[2], damaged[0]))
            if took is False:
                return "wait", None  # a live process of this kernel owns (or is claiming) the key
            lease = c.execute("SELECT owner, heartbeat FROM leases WHERE fn=? AND code=? AND args=? AND schema=?", key).fetchone()
            if lease is None or lease[0] == owner or self.given_up(key, lease[0], lease[1], ttl, took):
                c.execute("INSERT OR REPLACE INTO leases(fn, code, args, schema, owner, heartbeat) VALUES (?,?,?,?,?,?)",
                          (*key, owner, time.time()))
                if took:  # registered before the commit: a sibling thread reading the row sees it held (rule 1)
                    self._locks.owners[key] = owner  # type: ignore[union-attr]
                if on_owner is not None:
                    on_owner(c)
                self.progress.forget(key)
                return "owner", None
            return "wait", None

    def record(self, key: Key, owner: str, fields: dict[str, Any], sources: dict[str, tuple[str, str]],
               present: Callable[[], bool] = lambda: True,
               also: Callable[[sqlite3.Connection], None] | None = None) -> int:
        """Store a finished evaluation and drop our lease, in one transaction.

        ``present`` says whether the blobs the row refers to are all still there.
        It is asked under the write lock, which garbage collection also holds while
        it deletes: a row is never recorded over a blob gc has just taken
        (``BlobsGone`` then; put them again and retry). ``also`` rides along in
        the same transaction (batched hit counts: a write that is paid anyway).
        """
        cols = ["fn", "code", "args", "schema", "status", *fields]
        vals = [*key, "done", *fields.values()]
        # sources this process has recorded already are not written again (they are
        # keyed by digest, never change, and serve only explain's diffs)
        new_sources = [(d, sym, src) for d, (sym, src) in sources.items() if d not in self._sources_seen]
        eval_id = self._record(key, owner, cols, vals, new_sources, present, also)
        self._sources_seen.update(d for d, _, _ in new_sources)
        self._let_go(key, owner)
        return eval_id

    def _record(self, key: Key, owner: str, cols: list[str], vals: list[Any], new_sources: list[tuple[str, str, str]],
                present: Callable[[], bool], also: Callable[[sqlite3.Connection], None] | None) -> int:
        with self.write() as c:
            # Our lease dropped first (rolled back with the rest if we raise below).
            held = owner and c.execute("DELETE FROM leases WHERE fn=? AND code=? AND args=? AND schema=? AND owner=?",
                                       (*key, owner)).rowcount
            if not held:
                # Our lease went stale (we were slow) and another process took the
                # key over, or we computed without one (``owner`` empty: a quick
                # function). If a result is stored meanwhile, that row stands: other
                # processes may be reading it, its logs and hits hang off its id, and
                # our blobs, put while we held no live lease, may already be collected.
                row = c.execute("SELECT id FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=? AND status='done'",
                                key).fetchone()
                if row is not None and not self.retire_damaged(key):
                    return int(row[0])
            if not present():
                raise BlobsGone(key)
            if new_sources:
                c.executemany(KEEP_SOURCES_SQL, new_sources)
            # REPLACE: a row for this key exists if it was marked corrupt or stale, or
            # if we hold the lease to overwrite it (``fresh``).
            cur = c.execute(f"INSERT OR REPLACE INTO evaluations({','.join(cols)}) VALUES ({','.join('?' * len(cols))})", vals)
            eval_id = int(cur.lastrowid)  # type: ignore[arg-type]  # set by the INSERT
            if also is not None:
                also(c)
            return eval_id

    # -- rows computed elsewhere (the team store: see ``team.protocol.EvalIndex``) -------------
    def lookup_many(self, keys: Sequence[Key]) -> dict[Key, dict[str, Any]]:
        out: dict[Key, dict[str, Any]] = {}
        c = self.conn()
        for key in keys:  # point queries on an embedded database: no round trips to batch
            row, _ = _read(c, _HIT_SQL, HIT_COLUMNS, key)  # (one that cannot be read is not had)
            if row is not None:
                out[tuple(key)] = row  # type: ignore[index]
        return out

    def publish(self, key: Key, fields: dict[str, Any], sources: dict[str, tuple[str, str]],
                owner: str | None = None) -> tuple[int, bool]:
        return self.publish_many([(key, fields, sources)], owner)[0]

    def publish_many(self, rows: Sequence[tuple[Key, dict[str, Any], dict[str, tuple[str, str]]]],
                     owner: str | None = None) -> list[tuple[int, bool]]:
        """Insert finished rows computed elsewhere; a key's 'done' row is never replaced
        (the first result published wins: others may already be reading it), unless it
        cannot be used by anyone: it does not decode (``retire_damaged``), or it is refused
        and the new one is correctly signed (``_refused``)."""
        out: list[tuple[int, bool]] = []
        with self.write() as c:
            for key, fields, sources in rows:
                have = c.execute("SELECT id FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=? "
                                 "AND status='done'", key).fetchone()
                if have is not None and not self.retire_damaged(key) and not self._refused(c, key, fields):
                    out.append((int(have[0]), False))
                else:
                    f = {k: v for k, v in fields.items() if k in _PUBLISHED and k not in ("id", "fn", "code", "args",
                                                                                         "schema", "status")}
                    if f.get("finished") is None:  # left to the index's clock (``clock``): a publisher's may be off
                        f["finished"] = time.time()
                        f["started"] = f["finished"] - float(f.get("duration") or 0.0)
                    cols = ["fn", "code", "args", "schema", "status", *f]
                    cur = c.execute(f"INSERT OR REPLACE INTO evaluations({','.join(cols)}) "
                                    f"VALUES ({','.join('?' * len(cols))})", [*key, "done", *f.values()])
                    out.append((int(cur.lastrowid), True))  # type: ignore[arg-type]  # set by the INSERT
                self.add_sources(sources)  # (nested: in this transaction)
                if owner is not None:
                    c.execute("DELETE FROM leases WHERE fn=? AND code=? AND args=? AND schema=? AND owner=?",
                              (*key, owner))
        return out

    def _refused(self, c: sqlite3.Connection, key: Key, fields: dict[str, Any]) -> bool:
        """Is the 'done' row of ``key`` one ``fields`` may replace (``signing.replaces``)? Asked
        under the write lock, which the replacement is made under too: atomic."""
        if signing.secret() is None:
            return False
        old, _ = _read(c, _HIT_SQL, HIT_COLUMNS, key)
        recorded = c.execute("SELECT value FROM meta WHERE key=?", (signing.KEY_CHECK,)).fetchone()
        return old is not None and signing.replaces(key, old, fields, recorded[0] if recorded else None)

    # -- the team's key and clock (``team.protocol.EvalIndex``) ----------------------------------
    def team_key(self) -> str | None:
        """The key check ``memolab remote upgrade`` recorded (``signing.key_check``), or None."""
        row = self.conn().execute("SELECT value FROM meta WHERE key=?", (signing.KEY_CHECK,)).fetchone()
        return row[0] if row else None

    def set_team_key(self, check: str, replace: bool = False) -> tuple[str | None, str]:
        """Record ``check`` as the team's key unless one is recorded (``replace``: whatever is);
        (the one before, the one now)."""
        with self.write() as c:
            row = c.execute("SELECT value FROM meta WHERE key=?", (signing.KEY_CHECK,)).fetchone()
            if row is None or replace:
                c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (signing.KEY_CHECK, check))
            return (row[0] if row else None), (check if row is None or replace else row[0])

    def clock(self) -> float:
        """This index's time (seconds): every time the team store compares is taken from it."""
        return time.time()

    def rows_since(self, fn: str | None = None, since: float | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
        cols = EVAL_COLUMNS + ("inline",)
        sql = f"SELECT {','.join(cols)} FROM evaluations WHERE status='done'"
        args: list[Any] = []
        if fn is not None:
            sql += " AND fn=?"
            args.append(fn)
        if since is not None:
            sql += " AND finished > ?"
            args.append(since)
        sql += " ORDER BY finished ASC, id ASC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [dict(zip(cols, r, strict=False)) for r in self.conn().execute(sql, args)]

    def retire_damaged(self, key: Key) -> bool:
        """Take the 'done' row of ``key`` out of use if it cannot be read (``row_damage``);
        whether it was. Under the write lock (joining the caller's transaction): the verdict
        is about the row as it is when it is marked, never about one another process has
        just written in its place."""
        with self.write() as c:
            damaged = row_damage(c, key)
            return damaged is not None and c.execute(_RETIRE_SQL, (damaged[2], damaged[0])).rowcount > 0

    def mark_corrupt(self, eval_id: int, reason: str | None = None, status: str = "corrupt") -> None:
        """Take an evaluation out of use (``status`` 'corrupt', 'stale' or 'refused'), keeping why."""
        with self.write() as c:
            c.execute("UPDATE evaluations SET status=?, reason=? WHERE id=?", (status, reason, eval_id))

    def evaluations(self, fn: str | None = None, where: str = "", params: Sequence[Any] = (),
                    order: str = "finished DESC", limit: int | None = None) -> list[dict[str, Any]]:
        clauses, args = [], []
        if fn is not None:
            clauses.append("fn=?")
            args.append(fn)
        if where:
            clauses.append(where)
            args.extend(params)
        sql = f"SELECT {','.join(EVAL_COLUMNS)} FROM evaluations"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += f" ORDER BY {order}"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [dict(zip(EVAL_COLUMNS, r, strict=False)) for r in self.conn().execute(sql, args)]

    def functions(self) -> list[dict[str, Any]]:
        c = self.conn()
        if c.execute("SELECT 1 FROM main.meta WHERE key=?", (arming.COUNTS_MARKER,)).fetchone() is not None or \
                c.execute("SELECT 1 FROM main.sqlite_master WHERE type='trigger' AND name='counts_evaluation_hits'"
                          ).fetchone() is not None:
            # per function counts kept by triggers (``tracking/counts.py``: the armed connections' or an
            # older memolab's in the file), its newest by one index seek
            return [dict(fn=fn, evaluations=n, size=size or 0, hits=hits or 0, compute=d or 0.0,
                         last=c.execute("SELECT MAX(finished) FROM evaluations WHERE fn=?", (fn,)).fetchone()[0])
                    for fn, n, size, hits, d in c.execute("SELECT fn, n, size, hits, duration FROM evaluation_counts "
                                                          "WHERE n > 0 ORDER BY fn").fetchall()]
        rows = c.execute(
            "SELECT fn, COUNT(*), SUM(size), MAX(finished), SUM(hits), SUM(duration) FROM evaluations GROUP BY fn ORDER BY fn")
        return [dict(fn=r[0], evaluations=r[1], size=r[2] or 0, last=r[3], hits=r[4] or 0, compute=r[5] or 0.0) for r in rows]

    def add_sources(self, sources: dict[str, tuple[str, str]]) -> None:
        """Keep source texts (digest -> (symbol, text)); those already here stay as they are."""
        if sources:
            with self.write() as c:
                c.executemany(KEEP_SOURCES_SQL, [(d, sym, src) for d, (sym, src) in sources.items()])

    def source(self, digest: str) -> str | None:
        row = self.conn().execute("SELECT source FROM sources WHERE digest=?", (digest,)).fetchone()
        return row[0] if row else None

    def sources_of(self, digests: Iterable[str]) -> dict[str, tuple[str, str]]:
        """digest -> (symbol, source text) of those of ``digests`` this index keeps."""
        ds = list(dict.fromkeys(digests))
        out: dict[str, tuple[str, str]] = {}
        c = self.conn()
        for q, part in chunks(ds):
            out.update((d, (sym, src)) for d, sym, src in
                       c.execute(f"SELECT digest, symbol, source FROM sources WHERE digest IN ({q})", part))
        return out

    # -- misses ---------------------------------------------------------------------------
    def last_miss(self, fn: str) -> dict[str, Any] | None:
        row = self.conn().execute("SELECT time, CAST(explanation AS BLOB) FROM misses WHERE fn=? ORDER BY id DESC LIMIT 1",
                                  (fn,)).fetchone()
        return None if not row else parse_miss(fn, row[0], row[1])
