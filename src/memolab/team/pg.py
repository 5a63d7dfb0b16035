"""The team index on PostgreSQL (psycopg 3): ``PgIndex``, its schema and explicit upgrades.

``PgIndex`` satisfies ``team.protocol.EvalIndex`` with the semantics of the local
``store.sqlite.Index`` (``tests/test_index_conformance.py`` runs one suite against
both). What differs, and why:

- Single flight across machines: a lease is a row locked in a transaction; its
  heartbeat and expiry use the DATABASE clock (``clock_timestamp()``), never the
  client's: the machines' clocks differ. A lease not heart-beaten for the TTL by that
  clock is taken over whoever holds it (a live process whose release failed too); a
  dead owner on this host (``owner_alive_here``) at once (store/leases.py).
- Round trips are what costs here (~55 µs each on loopback, a few ms across a
  network), so: ``lookup`` is one prepared statement in autocommit mode;
  ``lookup_many``/``heartbeat``/``add_hits`` one statement over arrays;
  ``claim`` one call of a PL/pgSQL function (``memolab_claim``); ``record`` two
  round trips (pipeline mode); ``publish_many`` one pipeline for the whole batch.
- A network failure (refused, timed out, server gone) raises
  ``errors.RemoteUnavailable``: the team layer goes offline then. Connecting waits
  at most ``MEMOLAB_REMOTE_TIMEOUT`` seconds (default 10; libpq's minimum is 2).
- The schema lives in ``memolab_*`` tables (it can share a database with other
  applications). Its version is checked when an index is opened: an empty database
  gets the current schema (under an advisory lock); an older one is refused until
  ``upgrade(dsn)`` (``memolab remote upgrade``) migrates it, explicitly, under
  ``pg_advisory_xact_lock`` with a ``lock_timeout``, in one transaction; a newer
  one is refused ("upgrade memolab").

psycopg is imported here and nowhere else: ``import memolab`` never loads it.

Mixed into ``PgIndex``: its listing, gc and clearing (``team/pgupkeep.py``), keep marks and
snapshots (``team/pgmarks.py``) and accepts (``team/pgaccepts.py``).
"""
from __future__ import annotations

import getpass
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors

from ..errors import RemoteUnavailable, swallowed
from ..key import Key, key_of
from ..store import signing
from ..store.leasing import owner_alive_here
from ..store.sqlite import BlobsGone, host_name
from .deadline import WATCHDOG
from .pgaccepts import PgAcceptIndex
from .pgmarks import PgMarkIndex
from .pgschema import (
    DATA_COLS as _DATA_COLS,
    KEY_COLS as _KEY_COLS,
    MARGIN,
    NOW as _NOW,
    ROW_COLUMNS,
    SUPPORTED as SUPPORTED,  # (X as X: imported from here too, by cli/team_commands.py and the tests)
    TEAM_SCHEMA_VERSION as TEAM_SCHEMA_VERSION,
    TYPES as _TYPES,
    SchemaIncomplete as _Inconsistent,
    TeamSchemaError,
    bounded,
    check_version as _check_version,
    connect as _connect,
    key_arrays,
    migrate as _migrate,
    migrate_budget,
    network_error as _network,
    one_line,
    read_version as _read_version,
    remote_timeout,
    session_settings,
    slow_budget,
    status as status,
    upgrade as upgrade,
    where,
)
from .pgupkeep import PgUpkeep

Row = dict[str, Any]
T = TypeVar("T")


# -- SQL of the index ---------------------------------------------------------------------------
_WHERE_KEY = "fn = %s AND code = %s AND args = %s AND schema = %s"
_SELECT_ROW = f"SELECT {', '.join(ROW_COLUMNS)} FROM memolab_evaluations"
_LOOKUP_SQL = f"{_SELECT_ROW} WHERE {_WHERE_KEY} AND status = 'done'"
# A point query per key (LIMIT 1 keeps the planner from flattening it into a hash
# join over the whole table, which it chose for a table without statistics yet)
_LOOKUP_MANY_SQL = (f"SELECT e.* FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS k(fn, code, args, schema) "
                    f"CROSS JOIN LATERAL ({_SELECT_ROW} e WHERE e.fn = k.fn AND e.code = k.code AND e.args = k.args "
                    "AND e.schema = k.schema AND e.status = 'done' LIMIT 1) e")
_HIT_ID_SQL = f"SELECT id FROM memolab_evaluations WHERE {_WHERE_KEY} AND status = 'done'"
# Written as an upsert that replaces every column: SQLite's INSERT OR REPLACE
# (a fresh row, a new id, unspecified columns at their defaults), atomically.
_REPLACE_SET = ", ".join(f"{c} = EXCLUDED.{c}" for c in ("id", "status") + _DATA_COLS)
# A row published without ``finished`` (the uploader's: a machine's clock may be off by days)
# gets the database's: ``finished`` is then when it reached the team, ``started`` that less its
# duration. Every time the team store compares (gc's cutoffs, pull --since, leases) is the server's.
_FINISHED = f"COALESCE(%(finished)s::float8, {_NOW})"
_STARTED = f"COALESCE(%(started)s::float8, {_NOW} - COALESCE(%(duration)s::float8, 0))"
_VALUE = {"hits": "COALESCE(%(hits)s, 0)", "finished": _FINISHED, "started": _STARTED}
_INSERT = (f"INSERT INTO memolab_evaluations AS e ({', '.join(_KEY_COLS + ('status',) + _DATA_COLS)}) "
           f"VALUES (%(fn)s, %(code)s, %(args)s, %(schema)s, 'done', "
           + ", ".join(_VALUE.get(c, f"%({c})s") for c in _DATA_COLS) + ") "
           f"ON CONFLICT ON CONSTRAINT memolab_evaluations_key DO UPDATE SET {_REPLACE_SET}")
_RECORD_SQL = _INSERT + " RETURNING id"
# ``publish_many`` in one statement, whatever the batch size: the rows, the sources
# and the lease drops as arrays, written by data-modifying CTEs (one statement:
# atomic in autocommit, one round trip). A 'done' row is never replaced (the
# upsert's WHERE sees the latest version of a conflicting row); the statement's
# snapshot gives the id of a 'done' row committed before it began. One committed
# while it ran comes back with a NULL id: ``publish_many`` asks again for those.
# Rows are inserted in key order: batches that overlap lock rows in one order.
_KEY_ORDER = ", ".join(c + ' COLLATE "C"' for c in _KEY_COLS)
_ARRAY_TYPES = {c: _TYPES.get(c, "text") for c in _KEY_COLS + _DATA_COLS}
_PUBLISH_MANY_SQL = (
    "WITH v AS (SELECT * FROM unnest("
    + ", ".join(f"%({c})s::{_ARRAY_TYPES[c]}[]" for c in _KEY_COLS + _DATA_COLS)
    + f") WITH ORDINALITY AS v({', '.join(_KEY_COLS + _DATA_COLS)}, ord)), "
    f"ins AS (INSERT INTO memolab_evaluations AS e ({', '.join(_KEY_COLS + ('status',) + _DATA_COLS)}) "
    f"SELECT {', '.join(_KEY_COLS)}, 'done', "
    + ", ".join({"hits": "COALESCE(hits, 0)", "finished": f"COALESCE(finished, {_NOW})",
                 "started": f"COALESCE(started, {_NOW} - COALESCE(duration, 0))"}.get(c, c) for c in _DATA_COLS)
    + f" FROM v ORDER BY {_KEY_ORDER} "
    f"ON CONFLICT ON CONSTRAINT memolab_evaluations_key DO UPDATE SET {_REPLACE_SET} WHERE e.status <> 'done' "
    "RETURNING e.id, e.fn, e.code, e.args, e.schema), "
    "src AS (INSERT INTO memolab_sources(digest, symbol, source) "
    "SELECT * FROM unnest(%(s_digest)s::text[], %(s_symbol)s::text[], %(s_source)s::text[]) "
    "ON CONFLICT DO NOTHING), "
    "dl AS (DELETE FROM memolab_leases l WHERE %(owner)s::text IS NOT NULL AND (l.fn, l.code, l.args, l.schema, "
    "l.owner) IN (SELECT fn, code, args, schema, %(owner)s::text FROM v)) "
    "SELECT v.ord, COALESCE(ins.id, d.id), ins.id IS NOT NULL FROM v "
    "LEFT JOIN ins ON ins.fn = v.fn AND ins.code = v.code AND ins.args = v.args AND ins.schema = v.schema "
    "LEFT JOIN LATERAL (SELECT x.id FROM memolab_evaluations x WHERE ins.id IS NULL AND x.fn = v.fn "
    "AND x.code = v.code AND x.args = v.args AND x.schema = v.schema AND x.status = 'done' LIMIT 1) d ON true")
# A refused 'done' row (``signing.replaces``: judged by the client, which holds the key the
# database never sees) replaced by a correctly signed one: a compare-and-swap on exactly
# the values the client judged, under the row's lock (the upsert's WHERE sees its latest
# version). A row replaced or re-signed meanwhile is left alone.
_SIGNED_COLS = ("payload", "payload_size", "buffers", "code_refs", "snapshot", "signature")
_REPLACE_REFUSED_SQL = (_INSERT + " WHERE e.status = 'done' AND ("
                        + ", ".join(f"e.{c}" for c in _SIGNED_COLS) + ") IS NOT DISTINCT FROM ("
                        + ", ".join(f"%(old_{c})s::{_TYPES.get(c, 'text')}" for c in _SIGNED_COLS)
                        + ") RETURNING id")
_SOURCES_SQL = "INSERT INTO memolab_sources(digest, symbol, source) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
_DROP_LEASE_SQL = f"DELETE FROM memolab_leases WHERE {_WHERE_KEY} AND owner = %s"
class PgIndex(PgAcceptIndex, PgMarkIndex, PgUpkeep):
    """The team index: ``EvalIndex`` on PostgreSQL. One connection per thread (and per process)."""

    def __init__(self, dsn: str, timeout: float | None = None, create: bool = True) -> None:
        self.dsn = dsn
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[tuple[int, psycopg.Connection]] = []
        self._sources_seen: set[str] = set()
        try:
            self.who = f"{getpass.getuser()}@{host_name()}"
        except (OSError, KeyError, ImportError):  # no user name (a container without passwd entry)
            swallowed("team.pg: PgIndex.__init__")
            self.who = host_name()
        self._create = create
        try:
            self.version = self._run(self._open_schema, retry=False)
        except BaseException:
            self.close()
            raise

    def _open_schema(self, conn: psycopg.Connection) -> int:
        # Several clients opening an empty database at once (the workers of a cluster
        # starting) race to create the schema: a client may see part of it, or collide
        # with a creation committed while it waited for the advisory lock. Both pass.
        for attempt in range(8):
            try:
                return self._open_schema_once(conn)
            except (_Inconsistent, pgerrors.DuplicateTable, pgerrors.DuplicateObject, pgerrors.UniqueViolation):
                if attempt == 7:
                    raise
                time.sleep(0.02 * (attempt + 1))
        raise AssertionError("unreachable")

    def _open_schema_once(self, conn: psycopg.Connection) -> int:
        version = _read_version(conn)
        if version is None:
            if not self._create:
                raise TeamSchemaError(f"no memolab schema at {where(self.dsn)}: run `memolab remote upgrade`", None)
            # an empty database: the first client creates the schema (serialised by
            # the advisory lock; a client that waited finds it created)
            try:
                bounded(conn, migrate_budget(5.0, 60.0),
                        lambda: _migrate(conn, self.dsn, lock_timeout=5.0, wait=60.0, create_only=True))
            except pgerrors.InsufficientPrivilege as e:
                raise TeamSchemaError(f"no memolab schema at {where(self.dsn)}, and this role may not create it: "
                                      f"run `memolab remote upgrade` as a role that may ({e})", None) from e
            version = _read_version(conn)
            assert version is not None
        _check_version(version, self.dsn)
        return version

    # -- connections ------------------------------------------------------------------------
    def conn(self) -> psycopg.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or c.closed or self._local.pid != os.getpid():
            # a connection inherited through fork is the parent's session: never used
            # (nor closed: psycopg does not finish a connection of another pid)
            c = _connect(self.dsn, self.timeout)
            self._local.budget = self.wait()
            self._local.conn = c
            self._local.pid = os.getpid()
            self._local.fresh = True
            with self._lock:
                self._conns = [(p, x) for p, x in self._conns if not x.closed] + [(os.getpid(), c)]
        return c

    def _drop_conn(self) -> None:
        c = getattr(self._local, "conn", None)
        self._local.conn = None
        if c is not None and self._local.pid == os.getpid():
            try:
                c.close()
            except (psycopg.Error, OSError):
                swallowed("team.pg: PgIndex._drop_conn")

    def close(self) -> None:
        """Close this process's connections (all threads')."""
        with self._lock:
            conns, self._conns = self._conns, []
        for pid, c in conns:
            if pid == os.getpid():
                try:
                    c.close()
                except (psycopg.Error, OSError):
                    swallowed("team.pg: PgIndex.close")

    def __enter__(self) -> PgIndex:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def wait(self) -> float:
        """How long a caller's operation may take: ``MEMOLAB_REMOTE_TIMEOUT`` (or ``timeout``)."""
        return self.timeout if self.timeout is not None else remote_timeout()

    def _run(self, work: Callable[[psycopg.Connection], T], retry: bool = True, slow: bool = False) -> T:
        """``work(conn)`` within a deadline: ``wait()`` for what a caller waits for, ``slow_budget``
        for background and maintenance work (``slow``), both on the server (the session's
        ``statement_timeout``/``lock_timeout``) and on the client (``deadline.WATCHDOG``: a
        silent network). Network failures and overrun deadlines -> ``RemoteUnavailable``; a
        deadlock, or a connection that went stale while idle (server restarted) -> tried again."""
        t = self.wait()
        budget = slow_budget(t) if slow else t
        for attempt in range(3):
            conn = self.conn()
            fresh = self._local.fresh
            self._local.fresh = False
            armed = None
            try:
                # one deadline for the session's settings and the work: a silent server met by
                # the settings (a connection last used with another budget) is then known as one
                # (a cut), not taken for a stale connection and connected to again (a second wait)
                armed = WATCHDOG.arm(conn.pgconn.socket, budget + MARGIN)
                if self._local.budget != budget:
                    conn.execute(*session_settings(budget))
                    self._local.budget = budget
                return work(conn)
            except (pgerrors.DeadlockDetected, pgerrors.SerializationFailure):
                if attempt == 2:
                    raise
            except (pgerrors.QueryCanceled, pgerrors.LockNotAvailable) as e:
                # the session's statement_timeout or lock_timeout: the server answers, but not
                # in time (a table locked by another session, an overloaded server)
                raise RemoteUnavailable(f"team index {where(self.dsn)} did not answer within {budget:g} s "
                                        f"({one_line(e)})") from e
            except psycopg.Error as e:
                if not _network(e, conn):
                    raise
                self._drop_conn()
                cut = armed is not None and WATCHDOG.disarm(armed)
                if cut:
                    raise RemoteUnavailable(f"team index {where(self.dsn)} silent for {budget:g} s "
                                            "(no answer on an open connection)") from e
                if fresh or not retry or attempt > 0:
                    raise RemoteUnavailable(f"team index {where(self.dsn)} unreachable: {one_line(e)}") from e
            finally:
                if armed is not None:
                    WATCHDOG.disarm(armed)
        raise AssertionError("unreachable")

    # -- the hot path ----------------------------------------------------------------------
    def lookup(self, key: Key, lean: bool = False) -> Row | None:
        """The 'done' row of ``key`` or None: one prepared statement, autocommit (no
        transaction round trips). ``lean`` is accepted and ignored: a team row is
        copied into the local index whole."""
        def work(c: psycopg.Connection) -> Row | None:
            row = c.execute(_LOOKUP_SQL, tuple(key), prepare=True).fetchone()
            return None if row is None else dict(zip(ROW_COLUMNS, row, strict=False))
        return self._run(work)

    def lookup_many(self, keys: Sequence[Key]) -> dict[Key, Row]:
        keys = [tuple(k) for k in keys]  # type: ignore[misc]
        if not keys:
            return {}

        def work(c: psycopg.Connection) -> dict[Key, Row]:
            out: dict[Key, Row] = {}
            for r in c.execute(_LOOKUP_MANY_SQL, key_arrays(keys), prepare=True).fetchall():
                d = dict(zip(ROW_COLUMNS, r, strict=False))
                out[key_of(d)] = d
            return out
        return self._run(work)

    def inline_of(self, eval_id: int) -> bytes | None:
        row = self._run(lambda c: c.execute("SELECT inline FROM memolab_evaluations WHERE id = %s",
                                            (eval_id,)).fetchone())
        return row[0] if row else None

    # -- single flight ---------------------------------------------------------------------
    def claim(self, key: Key, owner: str, ttl: float, force: bool = False,
              on_owner: Callable[[psycopg.Connection], None] | None = None) -> tuple[str, Row | None]:
        """See ``EvalIndex.claim``: one round trip (``memolab_claim``), two for a
        takeover. ``on_owner(conn)`` runs after the lease is taken, not in its
        transaction (unlike the local index, nothing rides along with a claim here)."""
        key = tuple(key)  # type: ignore[assignment]

        def work(c: psycopg.Connection) -> tuple[str, Row | None]:
            for _ in range(20):
                r = c.execute("SELECT * FROM memolab_claim(%s, %s, %s, %s, %s, %s)", (*key, owner, force),
                              prepare=True).fetchone()
                assert r is not None
                state = r[0]
                if state == "hit":
                    return "hit", dict(zip(ROW_COLUMNS, r[3:], strict=False))
                if state == "again":
                    continue
                if state == "held":
                    holder, age = r[1], r[2]
                    here = owner_alive_here(holder)
                    # a dead owner on this host is taken over at once; any other, alive or not, once
                    # its heartbeat has not moved for the TTL by the database's clock (a live owner
                    # whose release failed included: its pid says nothing of its lease)
                    if not (here is False or age > ttl):
                        return "wait", None
                    # compare-and-swap: only that holder's lease, still dead or stale now, and
                    # no row stored meanwhile; else ask again
                    took = c.execute(
                        f"UPDATE memolab_leases SET owner = %s, heartbeat = {_NOW} WHERE {_WHERE_KEY} "
                        f"AND owner = %s AND (%s OR heartbeat < {_NOW} - %s) AND NOT EXISTS "
                        f"(SELECT 1 FROM memolab_evaluations WHERE {_WHERE_KEY} AND status = 'done') RETURNING 1",
                        (owner, *key, holder, here is False, float(ttl), *key), prepare=True).fetchone()
                    if took is None:
                        continue
                if on_owner is not None:
                    on_owner(c)
                return "owner", None
            raise pgerrors.SerializationFailure("the lease of this key keeps changing hands")  # retried by _run
        return self._run(work)

    def heartbeat(self, held: Iterable[tuple[Key, str]]) -> None:
        held = list(held)
        if not held:
            return
        arrays = key_arrays([k for k, _ in held]) + [[o for _, o in held]]
        self._run(lambda c: c.execute(
            f"UPDATE memolab_leases l SET heartbeat = {_NOW} "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) AS h(fn, code, args, schema, owner) "
            "WHERE l.fn = h.fn AND l.code = h.code AND l.args = h.args AND l.schema = h.schema AND l.owner = h.owner",
            arrays))

    def release(self, key: Key, owner: str) -> None:
        self._run(lambda c: c.execute(_DROP_LEASE_SQL, (*key, owner), prepare=True))

    def stale_leases(self, age: float, drop: bool = False) -> int:
        """Leases not heart-beaten for ``age`` seconds (by the database's clock): their owners are
        dead (a live owner beats every few seconds; a lost ``publish`` leaves its lease too).
        How many; ``drop``: deleted (``gc --remote``). A claim takes such a lease over anyway."""
        verb = "DELETE FROM" if drop else "SELECT count(*) FROM"
        sql = f"{verb} memolab_leases WHERE heartbeat < {_NOW} - %s"
        cur = self._run(lambda c: c.execute(sql, (float(age),)), slow=True)
        return int(cur.rowcount) if drop else int(cur.fetchone()[0])  # type: ignore[index]

    def lease_owners(self) -> list[tuple[str, Key]]:
        """(owner, key) of every lease (``memolab doctor``: those of dead owners of this host)."""
        rows = self._run(lambda c: c.execute("SELECT owner, fn, code, args, schema FROM memolab_leases").fetchall(),
                         slow=True)
        return [(r[0], Key._make(r[1:5])) for r in rows]

    def live_leases(self, ttl: float) -> int:
        row = self._run(lambda c: c.execute(f"SELECT count(*) FROM memolab_leases WHERE heartbeat > {_NOW} - %s",
                                            (float(ttl),)).fetchone())
        return int(row[0])  # type: ignore[index]

    # -- results ----------------------------------------------------------------------------
    def _values(self, key: Key, fields: Row) -> dict[str, Any]:
        v: dict[str, Any] = {c: fields.get(c) for c in _DATA_COLS}
        v.update(zip(_KEY_COLS, key, strict=False))
        if v["uploaded_by"] is None:
            v["uploaded_by"] = self.who
        if isinstance(v["inline"], memoryview):
            v["inline"] = bytes(v["inline"])
        return v

    def record(self, key: Key, owner: str, fields: Row, sources: dict[str, tuple[str, str]],
               present: Callable[[], bool] = lambda: True,
               also: Callable[[psycopg.Connection], None] | None = None) -> int:
        """See ``Index.record``: stored and our lease dropped in one transaction; a
        lease lost to another owner who already stored a row keeps that row."""
        key = tuple(key)  # type: ignore[assignment]
        values = self._values(key, fields)
        new_sources = [(d, sym, src) for d, (sym, src) in sources.items() if d not in self._sources_seen]

        def work(c: psycopg.Connection) -> int:
            with c.pipeline():
                with c.transaction():
                    cur = c.execute(f"SELECT owner FROM memolab_leases WHERE {_WHERE_KEY} FOR UPDATE", key,
                                    prepare=True)
                    done = c.execute(_HIT_ID_SQL, key, prepare=True)
                    lease, have = cur.fetchone(), done.fetchone()
                    if (lease is None or lease[0] != owner) and have is not None:
                        return int(have[0])  # our lease was taken over and the other's row stands
                    if not present():
                        raise BlobsGone(key)
                    if new_sources:
                        c.cursor().executemany(_SOURCES_SQL, sorted(new_sources))
                    eid = c.execute(_RECORD_SQL, values, prepare=True)
                    c.execute(_DROP_LEASE_SQL, (*key, owner), prepare=True)
                    if also is not None:
                        also(c)
                # COMMIT is queued behind the writes: one round trip for all of them
                return int(eid.fetchone()[0])  # type: ignore[index]
        eval_id = self._run(work)
        self._sources_seen.update(d for d, _, _ in new_sources)
        return eval_id

    def publish(self, key: Key, fields: Row, sources: dict[str, tuple[str, str]],
                owner: str | None = None) -> tuple[int, bool]:
        return self.publish_many([(key, fields, sources)], owner)[0]

    def publish_many(self, rows: Sequence[tuple[Key, Row, dict[str, tuple[str, str]]]],
                     owner: str | None = None) -> list[tuple[int, bool]]:
        """See ``EvalIndex.publish_many``: one statement for the batch (one round
        trip, atomic). A key given twice: its first row is published, the later ones
        get (that id, False), as on the local index."""
        if not rows:
            return []
        first: dict[Key, int] = {}  # key -> position of its first row in the batch
        for i, (k, _, _) in enumerate(rows):
            first.setdefault(tuple(k), i)  # type: ignore[arg-type]
        uniq = list(first.items())
        arrays: dict[str, Any] = {c: [] for c in _KEY_COLS + _DATA_COLS}
        for k, i in uniq:
            v = self._values(k, rows[i][1])
            for c in arrays:
                x = v[c]
                if x is not None and c in _TYPES:  # one Python type per array (psycopg dumps by the first)
                    x = bytes(x) if c == "inline" else float(x) if _TYPES[c] == "float8" else int(x)
                arrays[c].append(x)
        srcs = sorted({d: (d, sym, src) for _, _, s in rows for d, (sym, src) in s.items()}.values())
        arrays.update(s_digest=[x[0] for x in srcs], s_symbol=[x[1] for x in srcs], s_source=[x[2] for x in srcs],
                      owner=owner)
        mine = signing.key_check()

        def work(c: psycopg.Connection) -> list[tuple[int, bool]]:
            got: dict[Key, tuple[int, bool]] = {}
            late: list[Key] = []
            for ord_, eid, new in c.execute(_PUBLISH_MANY_SQL, arrays, prepare=True).fetchall():
                k = uniq[ord_ - 1][0]
                if eid is None:
                    late.append(k)
                else:
                    got[k] = (int(eid), bool(new))
            for k in late:  # a 'done' row committed by another client while we wrote: it stands
                have = c.execute(_HIT_ID_SQL, k).fetchone()
                if have is None:
                    raise pgerrors.SerializationFailure("a published row vanished")  # retried by _run
                got[k] = (int(have[0]), False)
            if mine is not None:
                got.update(self._replace_refused(c, {k: rows[i][1] for k, i in uniq if not got[k][1]}))
            return [got[tuple(k)] if i == first[tuple(k)] else (got[tuple(k)][0], False)  # type: ignore[index]
                    for i, (k, _, _) in enumerate(rows)]
        return self._run(work, slow=True)

    def _replace_refused(self, c: psycopg.Connection, wanted: dict[Key, Row]) -> dict[Key, tuple[int, bool]]:
        """Of the keys whose 'done' row stood against a publish (``wanted``: key -> the row
        published), replace those whose row is refused by the one published
        (``signing.replaces``): (new id, True) for each replaced."""
        wanted = {k: f for k, f in wanted.items() if signing.problem(k, f) is None}  # ours verify: else none
        if not wanted:
            return {}
        recorded = c.execute("SELECT value FROM memolab_meta WHERE key = %s", (signing.KEY_CHECK,)).fetchone()
        out: dict[Key, tuple[int, bool]] = {}
        for r in c.execute(_LOOKUP_MANY_SQL, key_arrays(list(wanted))).fetchall():
            old = dict(zip(ROW_COLUMNS, r, strict=False))
            k = key_of(old)
            if not signing.replaces(k, old, wanted[k], recorded[0] if recorded else None):
                continue
            values = self._values(k, wanted[k])
            values.update({f"old_{col}": old[col] for col in _SIGNED_COLS})
            new = c.execute(_REPLACE_REFUSED_SQL, values).fetchone()
            if new is not None:
                out[k] = (int(new[0]), True)
        return out

    # -- the team's key and clock ------------------------------------------------------------
    def team_key(self) -> str | None:
        """The key check ``memolab remote upgrade`` recorded (``signing.key_check``), or None."""
        row = self._run(lambda c: c.execute("SELECT value FROM memolab_meta WHERE key = %s",
                                            (signing.KEY_CHECK,)).fetchone())
        return row[0] if row else None

    def set_team_key(self, check: str, replace: bool = False) -> tuple[str | None, str]:
        """Record ``check`` as the team's key unless one is recorded (``replace``: whatever is);
        (the one before, the one now). One statement."""
        def work(c: psycopg.Connection) -> tuple[str | None, str]:
            with c.transaction():
                row = c.execute("SELECT value FROM memolab_meta WHERE key = %s FOR UPDATE", (signing.KEY_CHECK,)).fetchone()
                if row is None or replace:
                    c.execute("INSERT INTO memolab_meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                              "SET value = EXCLUDED.value", (signing.KEY_CHECK, check))
                return (row[0] if row else None), (check if row is None or replace else row[0])
        return self._run(work, slow=True)

    def clock(self) -> float:
        """The database's time (seconds): every time the team store compares is taken from it."""
        return float(self._run(lambda c: c.execute(f"SELECT {_NOW}").fetchone())[0])  # type: ignore[index]

    def rows_since(self, fn: str | None = None, since: float | None = None,
                   limit: int | None = None) -> list[Row]:
        sql = f"{_SELECT_ROW} WHERE status = 'done'"
        args: list[Any] = []
        if fn is not None:
            sql += " AND fn = %s"
            args.append(fn)
        if since is not None:
            sql += " AND finished > %s"
            args.append(float(since))
        sql += " ORDER BY finished ASC NULLS FIRST, id ASC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [dict(zip(ROW_COLUMNS, r, strict=False)) for r in self._run(lambda c: c.execute(sql, args).fetchall(), slow=True)]

    def mark_corrupt(self, eval_id: int, reason: str | None = None, status: str = "corrupt") -> None:
        self._run(lambda c: c.execute("UPDATE memolab_evaluations SET status = %s, reason = %s WHERE id = %s",
                                      (status, reason, eval_id)))

    def add_hits(self, counts: dict[int, tuple[int, float]], stamps: dict[str, tuple[int, int, int]] | None = None) -> None:
        """Hit counts in one statement (``stamps``, local blob-file stamps, mean nothing here).
        Rows are locked in id order: concurrent batches never deadlock."""
        if not counts:
            return
        ids = sorted(counts)  # (a time of None: now, by the database's clock)
        arrays = [ids, [int(counts[i][0]) for i in ids],
                  [None if counts[i][1] is None else float(counts[i][1]) for i in ids]]
        self._run(lambda c: c.execute(
            "WITH u AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::float8[]) AS u(id, n, t)), "
            "locked AS (SELECT e.id FROM memolab_evaluations e WHERE e.id IN (SELECT id FROM u) "
            "ORDER BY e.id FOR UPDATE) "
            f"UPDATE memolab_evaluations e SET hits = e.hits + u.n, last_hit = GREATEST(COALESCE(e.last_hit, 0), "
            f"COALESCE(u.t, {_NOW})) "
            "FROM u WHERE e.id = u.id AND e.id IN (SELECT id FROM locked)", arrays), slow=True)
