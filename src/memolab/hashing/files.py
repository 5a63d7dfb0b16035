"""``memolab.File`` and ``memolab.Dir``: arguments hashed by the content on disk.

A plain path string is hashed as a string: editing the file it names does not
change the key. Wrap it — ``f(memolab.File("data.csv"))`` — and the key
follows the bytes instead. The wrapper is ``os.PathLike``, so the function can
``open()`` it unchanged.

Hashing 10 GB on every call would defeat the cache, so, like git's index, we
remember each file's digest with its stat (size, mtime_ns, ctime_ns, inode,
device) in ``<store>/filestats.sqlite`` and trust a matching stat instead of
rereading. A file modified within the timestamp granularity of the moment we
hashed it could keep the same stat ("racily clean" in git's words), so an entry
is only trusted if the file had been quiet for ``RACY_NS`` before we hashed it;
otherwise it is simply hashed again. An unchanged dataset directory costs one
stat walk.

What is in the key: a ``File`` is its content only (not its name or location).
A ``Dir`` is the sorted list of (relative path, kind, content digest) of
everything below it, so renaming a file inside it changes the key;
symlinks to files count as their target's content, other symlinks as their target text.

**Restoring from a snapshot.** ``File(path, snapshot=DIGEST)`` (``Dir`` likewise) names a
snapshot of the content (``memolab snapshot``): when nothing is at ``path`` as the call is keyed,
the file (folder) is first given back from the snapshot, verified, from the store or the team
store (``snapshots.restore_missing``), then keyed by what was written. Something at ``path``
(the user's file, changed or not; a link) is keyed as it is and never replaced:
``File(...).restore(overwrite=True)`` puts the snapshot's bytes back on request. The snapshot is
not in the key: the key is the content, wherever it came from.
"""
from __future__ import annotations

import collections
import fnmatch
import mmap
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Union

from .. import hashing
from ..errors import HashError, swallowed
from .primitives import pack_Q

__all__ = ["File", "Dir"]

#: A file is re-hashed unless it was unmodified this long before its digest was taken.
RACY_NS = 2_000_000_000
#: Files smaller than this are read, larger ones memory-mapped and chunk-hashed on all cores.
_MAP_MIN = 1 << 20

#: Files actually read since import (tests use it to prove the stat cache works).
files_hashed = 0
#: File and Dir arguments hashed since import: when a call's key moved it, ``memo``
#: checks after the computation that the files still hold what the key says.
encoded = 0

PathArg = Union[str, "os.PathLike[str]"]

_keyed = threading.local()


def encoded_since(n: int) -> list[str]:
    """The absolute paths of the ``File``/``Dir`` arguments this thread hashed since ``encoded``
    was ``n`` (a call's own: its key holds their content, so they are no reads of its body)."""
    if encoded == n:
        # none since (the common call): each entry holds ``encoded`` as it was, and it only grows.
        # (Asking ``_keyed`` first cost a thread-local lookup and, for a thread that never hashed a
        # file, a raised and caught AttributeError: ~5,000 instructions of every call past memory.)
        return []
    log = getattr(_keyed, "log", None)
    return [p for c, p in log if c > n] if log else []


def _log_keyed(path: str) -> None:
    log = getattr(_keyed, "log", None)
    if log is None:
        log = _keyed.log = collections.deque(maxlen=4096)
    log.append((encoded, path))


#: told the path of every file of a ``File``/``Dir`` argument hashed, and of every folder of a
#: ``Dir`` (True) (``memolab.inputs.reads``: a body making a call with it consumed them, whatever the
#: call's own body opens)
on_file: Callable[[str, bool], None] | None = None


#: what gives a missing ``File``/``Dir`` back from its snapshot ("module:function", imported when
#: first needed: the snapshots live above the argument hash, which never imports them)
RESTORER = "memolab.team.snapshots:restore_missing"


def _restore(arg: File | Dir, overwrite: bool = False, keying: bool = False) -> None:
    import importlib

    mod, fn = RESTORER.split(":")
    getattr(importlib.import_module(mod), fn)(arg, overwrite=overwrite, keying=keying)


class File(os.PathLike[str]):
    """A file argument whose key is its content. ``snapshot``: the digest of a snapshot of it
    (``memolab snapshot``): a missing file is given back from it before the call is keyed."""

    __slots__ = ("path", "snapshot")

    def __init__(self, path: PathArg, snapshot: str | None = None) -> None:
        self.path = os.fspath(path)
        self.snapshot = snapshot

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        extra = f", snapshot={self.snapshot!r}" if self.snapshot else ""
        return f"memolab.File({self.path!r}{extra})"

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and (other.path, other.snapshot) == (self.path, self.snapshot)

    def __hash__(self) -> int:
        return hash((type(self), self.path))

    def __reduce__(self) -> Any:
        return (type(self), (self.path, self.snapshot))

    def restore(self, overwrite: bool = False) -> File:
        """Give the file back from its snapshot (verified): a missing one is written; one holding
        other bytes is refused (``SnapshotError``) unless ``overwrite``. Returns ``self``."""
        _restore(self, overwrite)
        return self


class Dir(os.PathLike[str]):
    """A directory argument whose key is the names and content of everything below it.

    ``exclude``: glob patterns matched against each entry's path relative to
    the directory (``"*.tmp"``, ``".git"``); matching entries are left out of the
    key, and excluded directories are not walked.
    """

    __slots__ = ("path", "exclude", "snapshot")

    def __init__(self, path: PathArg, exclude: Iterable[str] = (), snapshot: str | None = None) -> None:
        self.path = os.fspath(path)
        self.exclude = tuple(exclude)
        self.snapshot = snapshot

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        extra = f", exclude={list(self.exclude)!r}" if self.exclude else ""
        extra += f", snapshot={self.snapshot!r}" if self.snapshot else ""
        return f"memolab.Dir({self.path!r}{extra})"

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and (other.path, other.exclude, other.snapshot) == (
            self.path, self.exclude, self.snapshot)

    def __hash__(self) -> int:
        return hash((type(self), self.path, self.exclude))

    def __reduce__(self) -> Any:
        return (type(self), (self.path, self.exclude, self.snapshot))

    def restore(self, overwrite: bool = False) -> Dir:
        """Give the folder back from its snapshot (verified): missing files are written, files
        holding other bytes refused (``SnapshotError``) unless ``overwrite``. Returns ``self``."""
        _restore(self, overwrite)
        return self


# -- the stat cache --------------------------------------------------------------------

StatKey = tuple[int, int, int, int, int]


def _stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


class _StatCache:
    """abspath -> (stat key, digest, hashed_at_ns), in memory and in ``<store>/filestats.sqlite``."""

    def __init__(self) -> None:
        self.memory: dict[str, tuple[StatKey, bytes, int]] = {}
        self.lock = threading.Lock()
        self._db: Any = None
        self._db_where: tuple[str, int] | None = None

    def db(self) -> Any:
        from ..settings import config

        try:
            root = config.store_path()
        except (OSError, ValueError):  # a store location that cannot be (StoreConfigError), a pyproject.toml unreadable
            swallowed("files: _StatCache.db")
            return None
        where = (str(root), os.getpid())
        if self._db_where != where:
            # (the previous store's connection is dropped, not closed: another thread may be using it)
            self._db, self._db_where = None, where
            self.memory.clear()  # another store: its table is the authority
            c = None
            try:
                import sqlite3

                root.mkdir(parents=True, exist_ok=True)
                c = sqlite3.connect(str(root / "filestats.sqlite"), timeout=30.0, isolation_level=None,
                                    check_same_thread=False)
                c.execute("PRAGMA journal_mode=WAL")
                c.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INT, mtime_ns INT, "
                          "ctime_ns INT, ino INT, dev INT, digest BLOB, hashed_at INT)")
                self._db = c
            except (sqlite3.Error, OSError):  # a read-only or odd store: the memory cache still works
                swallowed("files: _StatCache.db")
                self._db = None
                if c is not None:
                    c.close()
        return self._db

    def load_prefix(self, prefix: str) -> None:
        """Read every entry at or below ``prefix`` into memory in one query."""
        db = self.db()
        if db is None:
            return
        try:
            rows = db.execute("SELECT path, size, mtime_ns, ctime_ns, ino, dev, digest, hashed_at FROM files "
                              "WHERE path = ? OR (path >= ? AND path < ?)",
                              (prefix, prefix + os.sep, prefix + chr(ord(os.sep) + 1))).fetchall()
        except sqlite3.Error:
            swallowed("files: _StatCache.load_prefix")
            return
        with self.lock:
            for p, size, m, c, ino, dev, d, at in rows:
                self.memory.setdefault(p, ((size, m, c, ino, dev), bytes(d), at))

    def get(self, path: str, key: StatKey) -> bytes | None:
        e = self.memory.get(path)
        if e is None or e[0] != key:
            return None
        if max(key[1], key[2]) + RACY_NS > e[2]:  # max(mtime, ctime) vs when we hashed it
            return None  # racily clean: it may have changed within one timestamp tick
        return e[1]

    def put_many(self, entries: list[tuple[str, StatKey, bytes, int]]) -> None:
        if not entries:
            return
        with self.lock:
            for p, k, d, at in entries:
                self.memory[p] = (k, d, at)
        db = self.db()
        if db is None:
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?)",
                           [(p, *k, d, at) for p, k, d, at in entries])
            db.execute("COMMIT")
        except sqlite3.Error:  # the cache is an optimisation: never fail a call over it
            swallowed("files: _StatCache.put_many")
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:  # (no transaction left to roll back, or the database is gone)
                swallowed("files: _StatCache.put_many")


_cache = _StatCache()


def _digest_file(path: str, st: os.stat_result) -> tuple[bytes, os.stat_result]:
    """Content digest of ``path``; retried if the file changes while we read it."""
    global files_hashed
    for _ in range(3):
        enc = hashing.Encoder()
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            if before.st_size >= _MAP_MIN:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    mv = memoryview(m)
                    try:
                        enc.write_buffer(mv)
                    finally:
                        mv.release()
            else:
                enc.write_buffer(memoryview(f.read()))
            after = os.fstat(f.fileno())
        files_hashed += 1
        if _stat_key(before) == _stat_key(after):
            return enc.digest(), after
    raise HashError(f"file {path!r} keeps changing while it is being hashed", "", path)


def cached_digest(path: str, st: os.stat_result) -> bytes | None:
    """The digest of ``path`` remembered for the stat ``st`` (not racily clean), or None."""
    return _cache.get(path, _stat_key(st))


def file_digest(path: str, pending: list[tuple[str, StatKey, bytes, int]] | None = None) -> bytes:
    """Digest of one regular file's content, from the stat cache when its stat is unchanged."""
    st = os.stat(path)
    key = _stat_key(st)
    d = _cache.get(path, key)
    if d is not None:
        return d
    started = time.time_ns()
    d, st = _digest_file(path, st)
    entry = (path, _stat_key(st), d, started)
    if pending is None:
        _cache.put_many([entry])
    else:
        pending.append(entry)
    return d


def remember_digests(entries: list[tuple[str, StatKey, bytes, int]]) -> None:
    """Keep the digests ``file_digest(path, pending)`` collected (one transaction)."""
    _cache.put_many(entries)


def _encode_file(enc: hashing.Encoder, f: File) -> None:
    global encoded
    encoded += 1
    path = os.path.abspath(f.path)
    if f.snapshot is not None and not os.path.lexists(path):
        _restore(f, keying=True)  # nothing there: given back from its snapshot (a link, dangling or not, is left alone)
    if not os.path.isfile(path):
        what = "does not exist" if not os.path.exists(path) else "is not a regular file"
        raise HashError(f"memolab.File({f.path!r}) {what}", "", f)
    if path not in _cache.memory:
        _cache.load_prefix(path)
    enc.write(b"\x11")
    enc.write(file_digest(path))
    _log_keyed(path)
    if on_file is not None:  # a memoized body running: the key of a call it makes depends on this file
        on_file(path, False)


def _walk(root: str, exclude: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(relative posix path, kind, absolute path) of every entry below ``root``, sorted."""
    out: list[tuple[str, str, str]] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
            for e in it:
                rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
                if exclude and any(fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(e.name, pat) for pat in exclude):
                    continue
                if e.is_symlink():
                    if os.path.isfile(e.path):
                        out.append((rel, "f", e.path))
                    else:
                        out.append((rel, "l", e.path))
                elif e.is_dir():
                    out.append((rel, "d", e.path))
                    stack.append(rel)
                elif e.is_file():
                    out.append((rel, "f", e.path))
                else:
                    raise HashError(f"memolab.Dir({root!r}) contains {rel!r}, which is neither a file, "
                                    "a directory nor a symlink", "", rel)
    out.sort()
    return out


def _encode_dir(enc: hashing.Encoder, d: Dir) -> None:
    global encoded
    encoded += 1
    root = os.path.abspath(d.path)
    if d.snapshot is not None and not os.path.lexists(root):
        _restore(d, keying=True)
    if not os.path.isdir(root):
        what = "does not exist" if not os.path.exists(root) else "is not a directory"
        raise HashError(f"memolab.Dir({d.path!r}) {what}", "", d)
    _cache.load_prefix(root)
    entries = _walk(root, d.exclude)
    _log_keyed(os.path.join(root, ""))
    if on_file is not None:
        on_file(root, True)
        for _rel, kind, path in entries:
            if kind in "fd":
                on_file(path, kind == "d")
    pending: list[tuple[str, StatKey, bytes, int]] = []
    enc.write(b"\x12" + pack_Q(len(entries)))
    try:
        for rel, kind, path in entries:
            enc.write_str(rel)
            enc.write(kind.encode())
            if kind == "f":
                try:
                    enc.write(file_digest(path, pending))
                except FileNotFoundError:
                    raise HashError(f"{rel!r} vanished while memolab.Dir({d.path!r}) was being hashed", "", d) from None
            elif kind == "l":
                enc.write_str(os.readlink(path))
    finally:
        _cache.put_many(pending)


hashing.register_handler(File, _encode_file)
hashing.register_handler(Dir, _encode_dir)
