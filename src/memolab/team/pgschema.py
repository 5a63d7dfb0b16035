"""The team index's schema on PostgreSQL: its tables and ``memolab_claim``, the versions a
memolab supports, connecting with bounded waits, and explicit upgrades (``upgrade``,
``memolab remote upgrade``) and ``status``.

``team.pg`` (the ``PgIndex`` reading and writing it) builds on this module; nothing
here knows of it. psycopg is imported only by these two modules: ``import memolab``
never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors

from ..errors import RemoteUnavailable, StoreConfigError
from ..key import Key
from ..settings import config
from ..store.sqlite import EVAL_COLUMNS
from .deadline import WATCHDOG

T = TypeVar("T")

#: The schema this memolab writes, and the range of versions it can work with.
TEAM_SCHEMA_VERSION = 3
#: version 1 lacks ``memolab_accepts``, 2 the marks of 3: this memolab works with them, without
#: sharing accepts (``PgIndex.accepts_supported``) or keep marks and snapshots
#: (``PgIndex.marks_supported``) until ``memolab remote upgrade`` brings them to 3
SUPPORTED = (1, 3)
#: the first version with ``memolab_accepts`` (accepted code changes, shared by the team)
ACCEPTS_SINCE = 2
#: the first version with ``memolab_keeps`` and ``memolab_snapshots`` (team/pgmarks.py)
MARKS_SINCE = 3

#: pg_advisory_xact_lock key serialising schema creation and upgrades ('memolab1').
LOCK_KEY = int.from_bytes(b"memolab1", "big") & 0x7FFFFFFFFFFFFFFF

NOW = "extract(epoch from clock_timestamp())::float8"  # the database's clock, seconds


def key_arrays(keys: Sequence[Key]) -> list[list[str]]:
    """``keys`` as four parallel arrays (fn, code, args, schema): one statement's ``unnest`` of
    many keys, for lookups, leases and keep marks."""
    return [[k[i] for k in keys] for i in range(4)]

#: Columns of a team row: the local index's plus the logs bundle digest and who uploaded it.
ROW_COLUMNS = EVAL_COLUMNS + ("inline", "logs", "uploaded_by")
KEY_COLS = ("fn", "code", "args", "schema")
#: what a write sets besides the key and status ('done'); ``id`` comes from the
#: sequence: a replaced row gets a new id, as locally
DATA_COLS = tuple(c for c in ROW_COLUMNS if c not in ("id", "status") + KEY_COLS)
TEXT_COLS = frozenset(("fn", "code", "args", "schema", "status", "payload", "buffers", "host", "python", "versions",
                        "snapshot", "code_refs", "signature", "reason", "logs", "uploaded_by"))

# -- the schema ---------------------------------------------------------------------------------
TYPES = {"id": "bigint", "payload_size": "bigint", "size": "bigint", "hits": "bigint", "started": "float8",
          "finished": "float8", "duration": "float8", "last_hit": "float8", "inline": "bytea"}
_KEY_MATCH = "{a}.fn = p_fn AND {a}.code = p_code AND {a}.args = p_args AND {a}.schema = p_schema"
_NO_ROW = ", ".join(f"NULL::{TYPES.get(c, 'text')}" for c in ROW_COLUMNS)

#: ``claim`` in one statement, one round trip: a PL/pgSQL function, because each of
#: its statements sees what was committed before it began (READ COMMITTED, a new
#: snapshot per statement) where one SQL statement sees one snapshot. (1) take the
#: lease if it is free or ours, unless a stored row is visible (a hit writes
#: nothing); (2) look for the stored row again: one recorded (and its lease dropped)
#: while (1) ran is a hit, and a lease (1) just took goes; (3) else report who holds
#: the lease and for how long it has not been heart-beaten, by the database's clock:
#: the client decides on a takeover (it alone can tell whether a holder on its own
#: host is dead) and takes it with a conditional UPDATE.
_CLAIM_FUNCTION = f"""
CREATE FUNCTION memolab_claim(p_fn text, p_code text, p_args text, p_schema text, p_owner text, p_force boolean)
RETURNS TABLE(c_state text, c_holder text, c_age float8,
              {", ".join(f"c_{c} {TYPES.get(c, 'text')}" for c in ROW_COLUMNS)})
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    t float8 := extract(epoch from clock_timestamp());
    fresh boolean;
BEGIN
    INSERT INTO memolab_leases AS l (fn, code, args, schema, owner, heartbeat)
        SELECT p_fn, p_code, p_args, p_schema, p_owner, t
        WHERE p_force OR NOT EXISTS (SELECT 1 FROM memolab_evaluations e
                                     WHERE {_KEY_MATCH.format(a="e")} AND e.status = 'done')
    ON CONFLICT (fn, code, args, schema) DO UPDATE SET heartbeat = EXCLUDED.heartbeat
        WHERE l.owner = EXCLUDED.owner
    RETURNING l.xmax = 0 INTO fresh;  -- NULL: not ours; true: inserted; false: ours already
    IF NOT p_force THEN
        RETURN QUERY SELECT 'hit'::text, NULL::text, NULL::float8, {", ".join("e." + c for c in ROW_COLUMNS)}
            FROM memolab_evaluations e WHERE {_KEY_MATCH.format(a="e")} AND e.status = 'done';
        IF FOUND THEN
            IF fresh THEN
                DELETE FROM memolab_leases l WHERE {_KEY_MATCH.format(a="l")} AND l.owner = p_owner;
            END IF;
            RETURN;
        END IF;
    END IF;
    IF fresh IS NOT NULL THEN
        RETURN QUERY SELECT 'owner'::text, p_owner, 0::float8, {_NO_ROW};
        RETURN;
    END IF;
    RETURN QUERY SELECT 'held'::text, l.owner, t - l.heartbeat, {_NO_ROW}
        FROM memolab_leases l WHERE {_KEY_MATCH.format(a="l")};
    IF NOT FOUND THEN  -- released between (1) and now: the caller asks again
        RETURN QUERY SELECT 'again'::text, NULL::text, NULL::float8, {_NO_ROW};
    END IF;
END
$fn$"""

#: (version, statements): applied in order by ``upgrade`` to a database at an older
#: version, all in one transaction (PostgreSQL's DDL is transactional: a migration
#: cut short leaves the previous version intact). Step 1 builds its DDL from
#: ``ROW_COLUMNS``: a later version that changes the columns must freeze step 1's
#: text as it is now, and recreate ``memolab_claim`` (it returns every column) in
#: its own step; ``SUPPORTED`` then says which older clients can still call it.
STEPS: list[tuple[int, list[str]]] = [
    (1, [
        "CREATE TABLE memolab_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE memolab_evaluations(
            id BIGSERIAL PRIMARY KEY,
            fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
            status TEXT NOT NULL,
            payload TEXT, payload_size BIGINT, buffers TEXT, size BIGINT,
            started DOUBLE PRECISION, finished DOUBLE PRECISION, duration DOUBLE PRECISION,
            host TEXT, python TEXT, versions TEXT, snapshot TEXT,
            hits BIGINT NOT NULL DEFAULT 0, last_hit DOUBLE PRECISION,
            code_refs TEXT, signature TEXT, reason TEXT,
            inline BYTEA,
            logs TEXT,
            uploaded_by TEXT,
            CONSTRAINT memolab_evaluations_key UNIQUE (fn, code, args, schema))""",
        """CREATE TABLE memolab_leases(
            fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
            owner TEXT NOT NULL,
            heartbeat DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (fn, code, args, schema))""",
        "CREATE TABLE memolab_sources(digest TEXT PRIMARY KEY, symbol TEXT NOT NULL, source TEXT NOT NULL)",
        # the local index's indexes (see store/sqlite.py for why each exists), less
        # its miss-explanation ones, (fn, args) and (fn, code): misses are explained
        # locally, and without statistics (a new table) the planner took (fn, code)
        # for a lookup and filtered every row of that code version (25x slower) ...
        "CREATE INDEX memolab_evaluations_summary ON memolab_evaluations(fn, finished, size, hits, duration)",
        "CREATE INDEX memolab_evaluations_blobs ON memolab_evaluations(id) WHERE inline IS NULL",
        "CREATE INDEX memolab_evaluations_unused ON memolab_evaluations(id) WHERE status <> 'done'",
        # ... and one for `pull` of every function: done rows by finish time
        "CREATE INDEX memolab_evaluations_pull ON memolab_evaluations(finished, id) WHERE status = 'done'",
        _CLAIM_FUNCTION,
    ]),
    # accepted code changes (store/accepts.py): the team's, followed by every machine; kept as
    # history (an undo sets ``undone``), signed like rows when the team signs
    (2, [
        """CREATE TABLE memolab_accepts(
            id BIGSERIAL PRIMARY KEY,
            fn TEXT NOT NULL, schema TEXT NOT NULL, new_code TEXT NOT NULL, old_code TEXT NOT NULL,
            time DOUBLE PRECISION NOT NULL, user_name TEXT, host TEXT,
            deps_before TEXT, deps_after TEXT, diffs TEXT,
            undone DOUBLE PRECISION, undone_by TEXT,
            signature TEXT, uploaded_by TEXT)""",
        "CREATE INDEX memolab_accepts_fn ON memolab_accepts(fn, schema, new_code)",
    ]),
    # what team gc never drops, whichever machine runs it (team/pgmarks.py): keep marks (on keys,
    # as locally: a row replaced for its key stays kept) and the snapshots recorded on the team,
    # with the blobs each holds. New tables only: an older client's statements are unchanged.
    (3, [
        """CREATE TABLE memolab_keeps(
            fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
            time DOUBLE PRECISION NOT NULL, kept_by TEXT,
            PRIMARY KEY (fn, code, args, schema))""",
        """CREATE TABLE memolab_snapshots(
            digest TEXT PRIMARY KEY, size BIGINT NOT NULL, kind TEXT, files BIGINT, bytes BIGINT,
            name TEXT, taken_by TEXT, time DOUBLE PRECISION NOT NULL, used DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE memolab_snapshot_blobs(
            snapshot TEXT NOT NULL REFERENCES memolab_snapshots(digest) ON DELETE CASCADE,
            digest TEXT NOT NULL,
            PRIMARY KEY (snapshot, digest))""",
    ]),
]


class TeamSchemaError(StoreConfigError):
    """The team database's schema is outside the range this memolab supports."""

    def __init__(self, message: str, version: int | None) -> None:
        self.version = version
        super().__init__(message)


class SchemaIncomplete(TeamSchemaError):
    """Part of the schema seen without the rest: damage, or (for a moment) another client
    creating it. Catalog lookups are not one snapshot: two ``to_regclass`` in one
    statement can straddle another client's commit, and a session may briefly miss a
    table committed meanwhile. ``PgIndex`` looks again before believing it."""


def remote_timeout() -> float:
    """``MEMOLAB_REMOTE_TIMEOUT`` in seconds (default 10): how long reaching the team store may take."""
    return config.env_setting("MEMOLAB_REMOTE_TIMEOUT")


def where(dsn: str) -> str:
    """``host:port/db`` of a DSN, for messages (never its password)."""
    try:
        d = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    host = d.get("host") or d.get("hostaddr") or "localhost"
    return f"{host}:{d.get('port') or 5432}/{d.get('dbname') or ''}"


def one_line(e: BaseException) -> str:
    """libpq's message on one line (it adds "This probably means the server terminated …")."""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return lines[0] if lines else type(e).__name__


def network_error(e: BaseException, conn: psycopg.Connection | None = None) -> bool:
    """Is ``e`` the network or the server going away (not a problem of the statement)?"""
    if conn is not None and (conn.broken or conn.closed):
        return True
    if isinstance(e, (pgerrors.ConnectionTimeout, psycopg.InterfaceError)):
        return True
    if isinstance(e, psycopg.OperationalError):
        state = e.sqlstate
        # None: libpq's own errors (refused, reset, EOF); 08: connection exception;
        # 57P01-3: admin/crash shutdown, cannot connect now (starting up, shutting down)
        return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")
    return False


#: the longest a background or maintenance statement may run (``sync``, ``gc``, ``pull``):
#: longer than a caller's wait, still bounded
SLOW_MIN = 60.0


def slow_budget(t: float) -> float:
    """The bound on one background/maintenance operation when callers wait ``t`` at most."""
    return max(SLOW_MIN, 20 * t)


#: the client-side margin past the server's ``statement_timeout``: the server's cancel
#: (the connection stays usable) comes first when the server is alive
MARGIN = 0.25


def session_settings(budget: float) -> tuple[str, tuple[str, str, str]]:
    """The statement (one round trip) setting a session's server-side bounds for operations
    of ``budget`` seconds: ``statement_timeout`` and ``lock_timeout`` (a table locked by
    another session), and ``idle_in_transaction_session_timeout`` (a client that dies inside
    a transaction does not hold a lease row's lock for the server's TCP timeout)."""
    ms = max(1, min(int(budget * 1000), 2**31 - 1))
    idle = max(5000, min(2 * ms, 2**31 - 1))
    return ("SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false), "
            "set_config('idle_in_transaction_session_timeout', %s, false)", (f"{ms}ms", f"{ms}ms", f"{idle}ms"))


def bounded(conn: psycopg.Connection, seconds: float, work: Callable[[], T]) -> T:
    """``work()`` on ``conn`` within ``seconds`` (+ ``MARGIN``) by the client's clock: past it the
    socket is shut down and ``work`` fails with a connection error (``network_error``)."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return work()  # closed: work fails on its own
    armed = WATCHDOG.arm(fd, seconds + MARGIN)
    try:
        return work()
    finally:
        WATCHDOG.disarm(armed)


def connect(dsn: str, timeout: float | None = None, budget: float | None = None) -> psycopg.Connection:
    """A session whose every wait is bounded: connecting (``connect_timeout``, libpq's floor is
    2 s), a silent peer (TCP keepalives, ``tcp_user_timeout``), each statement of it
    (``session_settings(budget)``; ``budget`` defaults to ``timeout``)."""
    t = timeout if timeout is not None else remote_timeout()
    t = min(max(t, 0.001), 86400.0)  # the settings allow 0.1..600; a direct caller cannot overflow libpq's ints
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise StoreConfigError(f"the team index is not a valid PostgreSQL URL or DSN: {e}") from None
    kw: dict[str, Any] = {}
    # bounded waits: connecting, and a peer that vanishes mid-call (unacknowledged
    # data, silent idle connection) instead of the kernel's 15-minute defaults
    # (TCP_KEEPIDLE's ceiling is 32767 s: more fails every connection)
    defaults = {"connect_timeout": max(2, int(round(t))), "keepalives": 1,
                "keepalives_idle": min(32767, max(1, int(t))), "keepalives_interval": 1, "keepalives_count": 3,
                "tcp_user_timeout": min(2**31 - 1, max(1, int(t * 1000))), "application_name": "memolab"}
    for k, v in defaults.items():
        if k not in params:
            kw[k] = v
    conn: psycopg.Connection | None = None
    try:
        conn = psycopg.connect(dsn, autocommit=True, **kw)
        c = conn
        bounded(c, t, lambda: c.execute(*session_settings(t if budget is None else budget)))
    except psycopg.Error as e:
        if conn is not None:
            conn.close()
        if network_error(e):
            raise RemoteUnavailable(f"team index {where(dsn)} unreachable: {one_line(e)}") from e
        raise
    return conn


#: what a complete schema has besides ``memolab_meta``: a part missing is damage
PARTS = (("table", "memolab_evaluations"), ("table", "memolab_leases"), ("table", "memolab_sources"),
         ("function", "memolab_claim(text,text,text,text,text,boolean)"))


def read_version(conn: psycopg.Connection) -> int | None:
    """The schema version of the database, or None when it holds no memolab schema.
    ``SchemaIncomplete`` when part of it is missing (a table, the ``memolab_claim`` function)."""
    probes = ", ".join(f"to_regclass('{name}') IS NOT NULL" if kind == "table"
                       else f"to_regprocedure('{name}') IS NOT NULL" for kind, name in PARTS)
    row = conn.execute(f"SELECT to_regclass('memolab_meta') IS NOT NULL, {probes}").fetchone()
    assert row is not None
    if not row[0]:
        if any(row[1:]):
            raise SchemaIncomplete("the team database has memolab tables but no memolab_meta table: "
                                "it is damaged or was not created by memolab", None)
        return None
    missing = [f"{kind} {name.split('(')[0]}" for (kind, name), there in zip(PARTS, row[1:], strict=False) if not there]
    if missing:
        raise SchemaIncomplete(f"the team schema is incomplete: {', '.join(missing)} missing (damaged? "
                               "`memolab remote upgrade` cannot repair it: restore it or start a new database)", None)
    v = conn.execute("SELECT value FROM memolab_meta WHERE key = 'schema_version'").fetchone()
    if v is None:
        raise SchemaIncomplete("the team database's memolab_meta has no schema_version: it is damaged", None)
    try:
        return int(v[0])
    except (TypeError, ValueError):
        raise TeamSchemaError(f"the team database's schema_version is {v[0]!r}, not a number: it is damaged",
                              None) from None


def check_version(version: int, dsn: str) -> None:
    lo, hi = SUPPORTED
    if version < lo:
        raise TeamSchemaError(f"team schema {version} (at {where(dsn)}) is older than this memolab's "
                              f"{TEAM_SCHEMA_VERSION}: run `memolab remote upgrade`", version)
    if version > hi:
        raise TeamSchemaError(f"team schema {version} (at {where(dsn)}) is newer than this memolab supports "
                              f"({lo}..{hi}): upgrade memolab (pip install -U memolab)", version)


def migrate(conn: psycopg.Connection, dsn: str, lock_timeout: float, wait: float,
             create_only: bool = False) -> tuple[int | None, int]:
    """Bring the schema to ``TEAM_SCHEMA_VERSION`` in one transaction; (from, to).

    The advisory lock serialises migrators (two ``memolab remote upgrade`` at once:
    the second finds the work done). ``lock_timeout`` bounds each DDL statement's
    wait for its table lock: an ALTER queued behind a long reader would otherwise
    queue every later query of every client behind it, wedging the team store.
    """
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = '{int(wait * 1000)}ms'")
        # the session's statement_timeout bounds a caller's lookups: a migration's
        # statements wait for locks (bounded above) and may take a while themselves
        conn.execute(f"SET LOCAL statement_timeout = '{int(migrate_budget(lock_timeout, wait) * 1000)}ms'")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        except pgerrors.LockNotAvailable as e:
            raise TeamSchemaError(f"another client has been creating or upgrading the team schema at {where(dsn)} "
                                  f"for over {wait:g} s: try again later", None) from e
        conn.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout * 1000)}ms'")
        before = read_version(conn)
        if before is not None and before > TEAM_SCHEMA_VERSION:
            check_version(before, dsn)
        if create_only and before is not None:
            return before, before  # someone else created it while we waited for the lock
        for version, statements in STEPS:
            if before is not None and version <= before:
                continue
            for stmt in statements:
                try:
                    conn.execute(stmt)
                except pgerrors.LockNotAvailable as e:
                    raise TeamSchemaError(
                        f"upgrading the team schema at {where(dsn)} to {version} could not lock a table within "
                        f"{lock_timeout:g} s (clients are using it): nothing was changed; retry when it is quieter "
                        f"or with a longer lock timeout", before) from e
        conn.execute("INSERT INTO memolab_meta(key, value) VALUES ('schema_version', %s) "
                     "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (str(TEAM_SCHEMA_VERSION),))
        return before, TEAM_SCHEMA_VERSION


def migrate_budget(lock_timeout: float, wait: float) -> float:
    """The longest one ``migrate`` may take (its client-side deadline)."""
    return wait + lock_timeout + 60.0


def upgrade(dsn: str, lock_timeout: float = 5.0, wait: float = 60.0,
            timeout: float | None = None) -> dict[str, Any]:
    """Create or upgrade the team schema (``memolab remote upgrade``).

    ``lock_timeout``: the longest a DDL statement waits for its table lock;
    ``wait``: the longest we wait for another migrator. Returns
    ``{'from': version or None, 'to': version, 'changed': bool}``."""
    conn = connect(dsn, timeout)
    try:
        before, after = bounded(conn, migrate_budget(lock_timeout, wait),
                                lambda: migrate(conn, dsn, lock_timeout, wait))
    except psycopg.Error as e:
        if network_error(e, conn):
            raise RemoteUnavailable(f"team index {where(dsn)} unreachable: {one_line(e)}") from e
        raise
    finally:
        conn.close()
    return {"from": before, "to": after, "changed": before != after}


def status(dsn: str, timeout: float | None = None) -> dict[str, Any]:
    """What ``memolab remote status`` shows; never raises for an unreachable or stalled server,
    answers within about ``timeout`` (connecting: libpq's floor of 2 s) and writes nothing.

    Keys: reachable, where, server (version string), schema (version or None),
    supported (lo, hi), ok (the schema is usable by this memolab), message, and
    when the schema is there: evaluations, done, functions, size, leases (None for
    what could not be counted in time: ``message`` says so)."""
    t = timeout if timeout is not None else remote_timeout()
    out: dict[str, Any] = {"reachable": False, "where": where(dsn), "server": None, "schema": None,
                           "supported": SUPPORTED, "ok": False, "message": ""}
    try:
        conn = connect(dsn, t)
    except RemoteUnavailable as e:
        out["message"] = str(e)
        return out
    try:
        out["reachable"] = True
        bounded(conn, t, lambda: _status(conn, dsn, out))
    except (pgerrors.QueryCanceled, pgerrors.LockNotAvailable):
        out["ok"] = False
        out["message"] = (f"{out['message'] + '; ' if out['message'] else ''}the team index at {where(dsn)} "
                          f"did not answer within {t:g} s (a table locked by another session? a server overloaded?)")
    except psycopg.Error as e:
        if not network_error(e, conn):
            raise
        out["reachable"] = False
        out["ok"] = False
        out["message"] = f"team index {where(dsn)} unreachable (or silent for {t:g} s): {one_line(e)}"
    finally:
        conn.close()
    return out


def _status(conn: psycopg.Connection, dsn: str, out: dict[str, Any]) -> None:
    out["server"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    try:
        version = read_version(conn)
    except TeamSchemaError as e:
        out["message"] = str(e)
        return
    out["schema"] = version
    if version is None:
        out["message"] = "no memolab schema yet: the first client (or `memolab remote upgrade`) creates it"
        out["empty"] = True
        return
    try:
        check_version(version, dsn)
        out["ok"] = True
        out["message"] = f"schema {version}, supported {SUPPORTED[0]}..{SUPPORTED[1]}"
    except TeamSchemaError as e:
        out["message"] = str(e)
    out.update(evaluations=None, done=None, functions=None, size=None, leases=None)
    key = conn.execute("SELECT value FROM memolab_meta WHERE key = 'hmac_check'").fetchone()
    out["team_key"] = key[0] if key else None  # (``signing.KEY_CHECK``; recorded by ``memolab remote upgrade``)
    out["leases"] = int(conn.execute("SELECT count(*) FROM memolab_leases").fetchone()[0])  # type: ignore[index]
    n, done, fns, size = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE status = 'done'), count(DISTINCT fn), "
        "COALESCE(sum(size), 0) FROM memolab_evaluations").fetchone()  # type: ignore[misc]
    out.update(evaluations=int(n), done=int(done), functions=int(fns), size=int(size))
