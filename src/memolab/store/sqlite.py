"""The SQLite index of the embedded store.

One file, WAL mode, so readers never block the writer and a crash mid-commit
leaves the last committed state. Each thread gets its own connection (sqlite3
connections must not be shared across threads). Every statement that decides
something (take a lease, record a result) runs in ``BEGIN IMMEDIATE`` so two
processes can never both believe they own a key.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

SCHEMA_VERSION = 1

_DDL = """
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
    UNIQUE(fn, code, args, schema)
);
CREATE INDEX IF NOT EXISTS evaluations_fn ON evaluations(fn, finished);
CREATE TABLE IF NOT EXISTS leases(
    fn TEXT NOT NULL, code TEXT NOT NULL, args TEXT NOT NULL, schema TEXT NOT NULL,
    owner TEXT NOT NULL,
    heartbeat REAL NOT NULL,
    PRIMARY KEY(fn, code, args, schema)
);
CREATE TABLE IF NOT EXISTS sources(
    digest TEXT PRIMARY KEY,
    symbol TEXT NOT NULL,
    source TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS misses(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fn TEXT NOT NULL,
    time REAL NOT NULL,
    explanation TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS misses_fn ON misses(fn, time);
CREATE TABLE IF NOT EXISTS blob_stamps(
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL
);
"""

EVAL_COLUMNS = ("id", "fn", "code", "args", "schema", "status", "payload", "payload_size", "buffers", "size",
                "started", "finished", "duration", "host", "python", "versions", "snapshot", "hits", "last_hit",
                "code_refs", "signature", "reason")

#: Columns added after schema 1 shipped: (name, type). Nullable, so an older
#: memolab reading a migrated file (it names its columns) still works, and
#: rows written before the migration simply have no code references/signature.
_ADDED_COLUMNS = (("code_refs", "TEXT"), ("signature", "TEXT"), ("reason", "TEXT"))

Key = Tuple[str, str, str, str]  # fn, code, args, schema


class BlobsGone(Exception):
    """A blob an evaluation was about to refer to was collected after it was put."""


class Index:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        conn = self.conn()
        conn.executescript(_DDL)
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.commit()
        self._add_columns(conn)
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row and int(row[0]) > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} was written by a newer memolab (schema {row[0]}); upgrade memolab")

    def _add_columns(self, conn: sqlite3.Connection) -> None:
        """Bring a store file written by an older memolab up to date, in place."""
        have = {r[1] for r in conn.execute("PRAGMA table_info(evaluations)")}
        missing = [(n, t) for n, t in _ADDED_COLUMNS if n not in have]
        if not missing:
            return
        with self.write() as c:
            # Re-read under the write lock: another process may have just migrated.
            have = {r[1] for r in c.execute("PRAGMA table_info(evaluations)")}
            for name, typ in missing:
                if name not in have:
                    c.execute(f"ALTER TABLE evaluations ADD COLUMN {name} {typ}")

    # -- connections ------------------------------------------------------------------
    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or getattr(self._local, "pid", None) != os.getpid():
            c = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None, check_same_thread=False)
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA busy_timeout=60000")
            self._local.conn = c
            self._local.pid = os.getpid()
        return c

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

    def write(self) -> "Index._write":
        return Index._write(self.conn())

    # -- evaluations --------------------------------------------------------------------
    def lookup(self, key: Key) -> Optional[Dict[str, Any]]:
        row = self.conn().execute(
            f"SELECT {','.join(EVAL_COLUMNS)} FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=? AND status='done'",
            key).fetchone()
        return dict(zip(EVAL_COLUMNS, row)) if row else None

    def claim(self, key: Key, owner: str, ttl: float, force: bool = False) -> Tuple[str, Optional[Dict[str, Any]]]:
        """Atomically: ('hit', row) if stored; else ('owner', None) if we took the
        lease (free, or its holder stopped heart-beating); else ('wait', None).
        ``force`` skips the stored row (recompute and overwrite)."""
        now = time.time()
        with self.write() as c:
            row = None if force else c.execute(
                f"SELECT {','.join(EVAL_COLUMNS)} FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=? AND status='done'",
                key).fetchone()
            if row:
                return "hit", dict(zip(EVAL_COLUMNS, row))
            lease = c.execute("SELECT owner, heartbeat FROM leases WHERE fn=? AND code=? AND args=? AND schema=?", key).fetchone()
            here = None if lease is None or lease[0] == owner else owner_alive_here(lease[0])
            # a dead owner on this host is taken over at once; elsewhere, after its heartbeat stops
            if lease is None or lease[0] == owner or here is False or (now - lease[1] > ttl and here is None):
                c.execute("INSERT OR REPLACE INTO leases(fn, code, args, schema, owner, heartbeat) VALUES (?,?,?,?,?,?)",
                          (*key, owner, now))
                return "owner", None
            return "wait", None

    def heartbeat(self, held: Iterable[Tuple[Key, str]]) -> None:
        now = time.time()
        with self.write() as c:
            for key, owner in held:
                c.execute("UPDATE leases SET heartbeat=? WHERE fn=? AND code=? AND args=? AND schema=? AND owner=?",
                          (now, *key, owner))

    def live_leases(self, ttl: float) -> int:
        """How many computations are in flight (leases heart-beaten within ``ttl``)."""
        row = self.conn().execute("SELECT COUNT(*) FROM leases WHERE heartbeat > ?", (time.time() - ttl,)).fetchone()
        return int(row[0])

    def release(self, key: Key, owner: str) -> None:
        with self.write() as c:
            c.execute("DELETE FROM leases WHERE fn=? AND code=? AND args=? AND schema=? AND owner=?", (*key, owner))

    def record(self, key: Key, owner: str, fields: Dict[str, Any], sources: Dict[str, Tuple[str, str]],
               present: Callable[[], bool] = lambda: True) -> int:
        """Store a finished evaluation and drop our lease, in one transaction.

        ``present`` says whether the blobs the row refers to are all still there.
        It is asked under the write lock, which garbage collection also holds while
        it deletes: a row is never recorded over a blob gc has just taken
        (``BlobsGone`` then; put them again and retry).
        """
        cols = ["fn", "code", "args", "schema", "status", *fields]
        vals = [*key, "done", *fields.values()]
        with self.write() as c:
            lease = c.execute("SELECT owner FROM leases WHERE fn=? AND code=? AND args=? AND schema=?", key).fetchone()
            if lease is None or lease[0] != owner:
                # Our lease went stale (we were slow) and another process took the
                # key over. If it already stored its result, that row stands: other
                # processes may be reading it, its logs and hits hang off its id, and
                # our blobs, put while we held no live lease, may already be collected.
                row = c.execute("SELECT id FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=? AND status='done'",
                                key).fetchone()
                if row is not None:
                    return int(row[0])
            if not present():
                raise BlobsGone(key)
            for digest, (symbol, src) in sources.items():
                c.execute("INSERT OR IGNORE INTO sources(digest, symbol, source) VALUES (?,?,?)", (digest, symbol, src))
            # REPLACE: a row for this key exists if it was marked corrupt or stale, or
            # if we hold the lease to overwrite it (``fresh``).
            cur = c.execute(f"INSERT OR REPLACE INTO evaluations({','.join(cols)}) VALUES ({','.join('?' * len(cols))})", vals)
            c.execute("DELETE FROM leases WHERE fn=? AND code=? AND args=? AND schema=? AND owner=?", (*key, owner))
            return int(cur.lastrowid)

    def mark_corrupt(self, eval_id: int, reason: Optional[str] = None, status: str = "corrupt") -> None:
        """Take an evaluation out of use (``status`` 'corrupt', 'stale' or 'refused'), keeping why."""
        with self.write() as c:
            c.execute("UPDATE evaluations SET status=?, reason=? WHERE id=?", (status, reason, eval_id))

    def add_hits(self, counts: Dict[int, Tuple[int, float]]) -> None:
        with self.write() as c:
            c.executemany("UPDATE evaluations SET hits=hits+?, last_hit=MAX(COALESCE(last_hit,0),?) WHERE id=?",
                          [(n, t, i) for i, (n, t) in counts.items()])

    def evaluations(self, fn: Optional[str] = None, where: str = "", params: Sequence[Any] = (),
                    order: str = "finished DESC", limit: Optional[int] = None) -> List[Dict[str, Any]]:
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
        return [dict(zip(EVAL_COLUMNS, r)) for r in self.conn().execute(sql, args)]

    def functions(self) -> List[Dict[str, Any]]:
        rows = self.conn().execute(
            "SELECT fn, COUNT(*), SUM(size), MAX(finished), SUM(hits), SUM(duration) FROM evaluations GROUP BY fn ORDER BY fn")
        return [dict(fn=r[0], evaluations=r[1], size=r[2] or 0, last=r[3], hits=r[4] or 0, compute=r[5] or 0.0) for r in rows]

    def delete_evaluations(self, ids: Sequence[int]) -> None:
        with self.write() as c:
            c.executemany("DELETE FROM evaluations WHERE id=?", [(i,) for i in ids])

    def source(self, digest: str) -> Optional[str]:
        row = self.conn().execute("SELECT source FROM sources WHERE digest=?", (digest,)).fetchone()
        return row[0] if row else None

    # -- misses ---------------------------------------------------------------------------
    def record_miss(self, fn: str, explanation: Dict[str, Any]) -> None:
        with self.write() as c:
            c.execute("INSERT INTO misses(fn, time, explanation) VALUES (?,?,?)", (fn, time.time(), json.dumps(explanation)))
            # keep the table small: the last 20 misses per function are plenty for `why`
            c.execute("DELETE FROM misses WHERE fn=? AND id NOT IN (SELECT id FROM misses WHERE fn=? ORDER BY id DESC LIMIT 20)",
                      (fn, fn))

    def last_miss(self, fn: str) -> Optional[Dict[str, Any]]:
        row = self.conn().execute("SELECT time, explanation FROM misses WHERE fn=? ORDER BY id DESC LIMIT 1", (fn,)).fetchone()
        if not row:
            return None
        d = json.loads(row[1])
        d["time"] = row[0]
        return d

    # -- blob stamps and references ---------------------------------------------------------
    def get_stamp(self, digest: str) -> Optional[Tuple[int, int, int]]:
        row = self.conn().execute("SELECT size, mtime_ns, inode FROM blob_stamps WHERE digest=?", (digest,)).fetchone()
        return tuple(row) if row else None  # type: ignore[return-value]

    def set_stamp(self, digest: str, stamp: Tuple[int, int, int]) -> None:
        with self.write() as c:
            c.execute("INSERT OR REPLACE INTO blob_stamps(digest, size, mtime_ns, inode) VALUES (?,?,?,?)", (digest, *stamp))

    def drop_stamps(self, digests: Iterable[str]) -> None:
        with self.write() as c:
            c.executemany("DELETE FROM blob_stamps WHERE digest=?", [(d,) for d in digests])

    def referenced_blobs(self, only_done: bool = False) -> Dict[str, List[int]]:
        """blob digest -> ids of the evaluations that use it."""
        refs: Dict[str, List[int]] = {}
        sql = "SELECT id, payload, buffers FROM evaluations" + (" WHERE status='done'" if only_done else "")
        for i, payload, buffers in self.conn().execute(sql):
            if payload:
                refs.setdefault(payload, []).append(i)
            for d, _size in json.loads(buffers or "[]"):
                refs.setdefault(d, []).append(i)
        if not only_done:
            from . import checkpoints  # computations in flight hold blobs too (memolab.checkpoint)

            for d, i in checkpoints.referenced(self.conn()).items():
                refs.setdefault(d, []).append(i)
        return refs

    def clear(self, fn: Optional[str] = None) -> int:
        with self.write() as c:
            if fn is None:
                n = c.execute("DELETE FROM evaluations").rowcount
                c.execute("DELETE FROM misses")
            else:
                n = c.execute("DELETE FROM evaluations WHERE fn=?", (fn,)).rowcount
                c.execute("DELETE FROM misses WHERE fn=?", (fn,))
            from . import checkpoints

            checkpoints.clear(c, fn)
        return n


def host_name() -> str:
    import socket  # 4 ms of `import memolab` otherwise

    return socket.gethostname()


def _start_time(pid: int) -> Optional[str]:
    """When process ``pid`` started (clock ticks since boot), or None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None  # a zombie is dead, even before its parent reaps it
    return fields[19].decode()


_WHERE: List[Optional[str]] = []


def _process_table() -> Optional[str]:
    """Which process table our pids belong to: pid namespace and boot. Two
    containers can share a host name (host networking) but not a pid namespace."""
    if not _WHERE:
        try:
            ns = "".join(ch for ch in os.readlink("/proc/self/ns/pid") if ch.isdigit())
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip().replace("-", "")[:12]
            _WHERE.append(f"{ns}.{boot}" if ns and boot else None)
        except OSError:
            _WHERE.append(None)
    return _WHERE[0]


def process_token() -> str:
    """``host:pid:start/table``: names this process for lease owners, pid reuse included."""
    return f"{host_name()}:{os.getpid()}:{_start_time(os.getpid()) or '?'}/{_process_table() or '?'}"


def owner_alive_here(owner: str) -> Optional[bool]:
    """Is the owner of a lease a process on this host that is still running?
    True or False where the process table can say, None where it cannot
    (another host, no /proc, our own process): the heartbeat decides then.

    A heartbeat thread needs the GIL: an owner inside one long C call that holds
    it (``sum(range(10**9))``, a big sort, many C extensions) stops beating and
    its lease looks stale although it is still computing; an owner killed a
    moment ago still looks fresh for ``lease_ttl``. On the owner's own host the
    process table says for sure. The start time guards against a reused pid.
    """
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != host_name():
        return None
    start, _, table = parts[2].partition("/")
    if start in ("?", "") or table in ("?", "") or table != _process_table():
        return None  # another machine, container or boot: not our process table to ask
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    if pid == os.getpid():
        return None  # our own threads beat through our heartbeat thread, which is running now
    return _start_time(pid) == start
