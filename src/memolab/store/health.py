"""A broken store never costs the caller a computed value.

``memolab.store.open_store`` is the one place a store is opened (this module
holds the pieces of the degraded stores that need no ``Store``, so that the
store package imports it and never the reverse). Opening sorts every way it
can fail into three outcomes:

* a working ``Store`` (read-write, the normal case);
* a ``ReadOnlyStore`` when the index exists and can be read but not written (a
  read-only mount, a store of another user, a disk with 0 bytes free): stored
  results are served as hits, a miss computes and stores nothing;
* a ``NoStore`` when nothing can be read (the location is a file, its parent
  cannot be written, the index is damaged or was written by a newer memolab):
  every call computes.

Either fallback raises ``StoreUnavailable`` from ``try_acquire`` on a miss; the
memo layer catches it, computes the value, returns it and warns once per store
and problem (``warn_once``). The CLI reports the same problem as one line and
``memolab doctor`` says how to repair a damaged index.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailable, swallowed, warn_once
from ..settings import config
from . import signing
from .blobs import BlobFolder
from .layout import is_digest
from .perms import writable_by_others
from .schema import check_schema, connect, newer_schema, read_shims  # noqa: F401 (also imported from here)
from .sqlite import Index, Key


def warn_unusable(symbol: str, e: BaseException, stacklevel: int = 3) -> None:
    """A call found the store unusable and computes without it: say so once per problem."""
    if isinstance(e, StoreUnavailable):
        warn_once(str(e), f"{symbol}: {e}", stacklevel + 1)
    else:
        # a failure mid-run (the disk filled, the index went bad): once per kind of failure
        warn_once(f"{type(e).__name__}: {e}",
                  f"{symbol}: the store cannot be written ({type(e).__name__}: {e}); computing without storing the "
                  "result (further calls that hit this problem will not warn again)", stacklevel + 1)


def check_exposure(root: Path) -> None:
    """Warn (once per process and store) when ``root`` is writable by others and results are unsigned."""
    if signing.secret() is not None:
        return
    exposed = writable_by_others(root)
    if exposed:
        warn_once(f"exposed:{root}",
                  f"the store {root} is writable by other users ({', '.join(exposed)}) and MEMOLAB_HMAC_KEY is not set: "
                  "anyone who can write it can make this process run code of their choosing when it loads a result. "
                  "Set MEMOLAB_HMAC_KEY (README: Security) or make the store private (chmod 700).", stacklevel=4)


# -- read-only -------------------------------------------------------------------------------

class ReadOnlyIndex(Index):
    """The index opened for reading only: no schema set-up, no writes, stamps not recorded.

    ``mode=ro`` needs the ``-shm`` file to exist or be creatable; where it is
    neither (a read-only mount, a full disk, another user's directory) and no
    ``-wal`` file holds anything, the file alone is the whole database and is opened
    ``immutable``. SQLite then takes no locks, so every read is checked against
    the file's stat before and after: if a writer appeared meanwhile, it reads
    again on a fresh connection.
    """

    #: nothing can be written through it: readers create what is missing in ``temp`` (``read_shims``)
    read_only = True

    def __init__(self, path: Path) -> None:  # noqa: D107 (no super().__init__: it writes)
        self.path = Path(path)
        self._local = threading.local()
        check_schema(self.conn(), self.path)

    def _fingerprint(self) -> tuple[Any, ...]:
        try:
            st = os.stat(self.path)
            key: tuple[Any, ...] = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            key = ()
        try:
            wal = os.stat(f"{self.path}-wal").st_size > 0  # an empty one (left by a failed open) holds nothing
        except OSError:
            wal = False
        return key + (wal,)

    def conn(self) -> sqlite3.Connection:
        loc = self._local
        c = getattr(loc, "conn", None)
        if c is not None and loc.pid == config.pid() and (not loc.immutable or loc.fp == self._fingerprint()) \
                and (not loc.shimmed or loc.cookie == c.execute("PRAGMA main.schema_version").fetchone()[0]):
            # (a file read through shims that another process migrated meanwhile: read afresh, in its new shape)
            return c  # type: ignore[no-any-return]  # (this thread's connection)
        if c is not None and loc.pid == config.pid():
            c.close()  # this process's, read afresh (one inherited through a fork is never closed here)
        loc.conn = None
        uri = self.path.absolute().as_uri()
        fp = self._fingerprint()
        try:
            c = connect(f"{uri}?mode=ro", ["SELECT COUNT(*) FROM sqlite_master"], uri=True, timeout=60.0,
                        isolation_level=None, check_same_thread=False)
            immutable = False
        except sqlite3.OperationalError:
            if fp[-1]:
                raise  # a pending WAL holds committed data the file alone lacks
            c = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, check_same_thread=False)
            immutable = True
        # an older file: the current shape in ``temp`` (never written to the file)
        loc.shimmed = read_shims(c)
        loc.cookie = c.execute("PRAGMA main.schema_version").fetchone()[0] if loc.shimmed else None
        loc.conn, loc.pid, loc.immutable, loc.fp = c, config.pid(), immutable, fp
        return c

    def lookup(self, key: Key, lean: bool = False) -> dict[str, Any] | None:
        for _ in range(5):
            row = super().lookup(key, lean)
            loc = self._local
            if not loc.immutable or loc.fp == self._fingerprint():
                return row
            loc.conn.close()  # written meanwhile: read again
            loc.conn = None
        raise StoreUnavailable("read-only", f"the index {self.path} keeps changing under a read-only reader")

    #: logs of computations on a read-only store go nowhere (tracking.sink)
    discard_logs = True

    # Nothing is written: a read must never need a write to succeed.
    def set_stamp(self, digest: str, stamp: tuple[int, int, int]) -> None:
        pass

    def add_hits(self, counts: Any, stamps: Any = None) -> None:
        pass

    def mark_corrupt(self, eval_id: int, reason: str | None = None, status: str = "corrupt") -> None:
        pass


class ReadOnlyBlobFolder(BlobFolder):
    def __init__(self, root: Path, *a: Any, **k: Any) -> None:
        try:
            super().__init__(root, *a, **k)
        except OSError:  # a folder missing on a read-only store: nothing to create, nothing to read there
            d = Path(root)
            self.root, self.dir, self.tmp, self.quarantine_dir = d, d / "blobs", d / "tmp", d / "quarantine"
            self._get_stamp = a[0] if a else k.get("get_stamp", lambda d: None)
            self._verified: dict[str, Any] = {}
        self._set_stamp = self._defer_stamp = lambda d, s: None  # a read never writes

    def quarantine(self, digest: str) -> None:
        pass  # a damaged blob is still refused (a miss); moving it needs a writer


class NoStore:
    """Stands in for a store that cannot be used at all: every call computes."""

    stored_codes: frozenset[str] = frozenset()  # nothing is stored: every miss is explained at once
    lease_free = False

    def __init__(self, root: Path, problem: StoreUnavailable) -> None:
        self.root = Path(root)
        self.problem = problem

    def __repr__(self) -> str:
        return f"NoStore({str(self.root)!r}: {self.problem.kind})"

    def owner_id(self) -> str:
        return f"nostore:{os.getpid()}:{threading.get_ident()}"

    def load_from_memory(self, key: Key, accept: Any = None) -> tuple[bool, Any]:
        return False, None

    def has_copy(self, key: Key) -> bool:
        return False

    def try_acquire(self, *a: Any, **k: Any) -> tuple[str, dict[str, Any] | None]:
        raise self.problem

    acquire = lookup = try_acquire

    def release(self, *a: Any) -> None:
        pass

    def forget(self, fn: str | None = None) -> None:
        pass

    def forget_key(self, key: Key) -> None:
        pass

    def flush_hits(self) -> None:
        pass

    def accepts_of(self, fn: str, schema: str) -> list[dict[str, Any]]:
        return []  # nothing is stored: nothing to use through an accepted change either

    @property
    def index(self) -> Any:
        return _NullIndex(self.root / "index.sqlite", self.problem)

    def clear(self, fn: str | None = None) -> int:
        raise self.problem

    def collect_garbage(self, dry_run: bool = False) -> tuple[int, int]:
        raise self.problem


class _NullIndex:
    """The index of a ``NoStore``: logs sent to it are discarded; anything else raises the problem."""

    discard_logs = True

    def __init__(self, path: Path, problem: StoreUnavailable) -> None:
        self.path = path
        self._problem = problem

    def __getattr__(self, name: str) -> Any:
        raise self._problem


# -- rows that do not decode, results that do not rebuild --------------------------------------

def unloadable(store: Any, key: Key) -> tuple[str, str] | None:
    """(why, payload digest) when the stored copy of ``key`` could not be rebuilt last time.

    Storing the same result again would only be refused again on every later
    call (see ``MemoFunction._unloadable``); ``fresh`` stores anyway and
    ``clear`` forgets the verdict."""
    try:
        row = store.index.conn().execute(
            "SELECT reason, payload FROM evaluations WHERE fn=? AND code=? AND args=? AND schema=? "
            "AND status='unloadable'", key).fetchone()
    except (sqlite3.Error, OSError):  # the local index (a NoStore's raises StoreUnavailable, an OSError)
        swallowed("store.health: unloadable")
        return None
    return (row[0] or "it could not be rebuilt", row[1]) if row else None


def take_out_of_use(store: Any, key: Key, reason: str) -> bool:
    """Take the row of ``key`` out of use if it cannot be read (``Index.retire_damaged``,
    which judges it under the write lock and records what is damaged): whether it was.
    ``reason``: what the caller saw, for a store without that verdict."""
    try:
        retire = getattr(store.index, "retire_damaged", None)
        done = bool(retire(key)) if retire is not None else False
    except (sqlite3.Error, OSError):  # the local index (row_damage reads a damaged row's raw bytes: no decode error)
        swallowed("store.health: take_out_of_use")
        return False
    store.forget_key(key)
    return done


def undecodable_rows(index: Any, tick: Callable[[int], None] | None = None) -> dict[int, dict[str, Any]]:
    """Rows holding text that is not UTF-8 (a flipped byte): {id: the row, decoded with replacements}.

    Read with a bytes text factory so one bad row cannot stop the scan. ``tick(n)``: n more rows read
    (``doctor``'s progress)."""
    from .sqlite import EVAL_COLUMNS

    conn = ReadOnlyIndex(index.path).conn()  # a private connection (read-only mounts included)
    conn.text_factory = bytes
    out: dict[int, dict[str, Any]] = {}
    try:
        for k, r in enumerate(conn.execute(f"SELECT {','.join(EVAL_COLUMNS)} FROM evaluations"), 1):
            if tick is not None and k % 1000 == 0:
                tick(1000)
            bad = False
            row = {}
            for col, v in zip(EVAL_COLUMNS, r, strict=False):
                if isinstance(v, bytes):
                    try:
                        v = v.decode("utf-8")
                    except UnicodeDecodeError:
                        v, bad = v.decode("utf-8", "replace"), True
                row[col] = v
            if bad:
                out[row["id"]] = row
    finally:
        conn.close()
    return out


def row_problem(row: dict[str, Any]) -> str | None:
    """Why an index row cannot even be decoded (its JSON or sizes are damaged), or None."""
    col = "buffers"
    try:
        for d, size in json.loads(row.get("buffers") or "[]"):
            if not isinstance(d, str) or not isinstance(size, int):
                return "damaged buffers column"
            if not is_digest(d):
                return f"damaged buffers column ({d[:80]!r} is not a blob digest)"
        for col in ("code_refs", "snapshot", "versions"):
            if row.get(col):
                json.loads(row[col])
    except (ValueError, TypeError) as e:
        return f"damaged {col} column ({type(e).__name__}: {e})"
    if row.get("payload") is not None and not isinstance(row.get("payload_size"), int):
        return "damaged payload_size column"
    if row.get("payload") is not None and not is_digest(row["payload"]):
        return f"damaged payload column ({str(row['payload'])[:80]!r} is not a blob digest)"
    return None


# -- compaction ----------------------------------------------------------------------------------

def compact(index: Index, min_free: float = 0.25) -> None:
    """Give the space of deleted rows back to the file system (after ``clear`` and ``gc``).

    New stores use incremental auto-vacuum: free pages are released at once.
    An older store is converted by one ``VACUUM`` once a quarter of it is free.
    The WAL is then checkpointed and truncated. Best effort: a busy or full
    database keeps its size until the next time.
    """
    try:
        c = index.conn()
        mode = c.execute("PRAGMA auto_vacuum").fetchone()[0]
        free = c.execute("PRAGMA freelist_count").fetchone()[0]
        pages = c.execute("PRAGMA page_count").fetchone()[0]
        if free and mode == 2:
            # executescript steps it to the end: Python's execute() steps a statement
            # without result columns once, which frees a single page
            c.executescript("PRAGMA incremental_vacuum;")
        elif free > 64 and free >= pages * min_free and not c.in_transaction:
            c.execute("PRAGMA auto_vacuum=INCREMENTAL")
            c.execute("VACUUM")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        swallowed("store.health: compact")
