"""Opening the store: a working ``Store`` (``store/local.py``), or a degraded one saying why
not (``ReadOnlyStore``, ``health.NoStore``); the registry of open stores, one per location
and settings, and their exit (``close_open_stores``, ``forget_open_stores``).
"""
from __future__ import annotations

import importlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from stat import S_ISDIR
from typing import Any

from ..errors import StoreUnavailable, swallowed
from ..settings import config
from . import mounts, perms, signing
from .beats import beat_due as beat_due
from .blobs import digest_bytes
from .inline import inline_problem as inline_problem  # (inline_problem: doctor's)
from .local import Store
from .process import runtime_info as runtime_info  # (re-exported: call.py records it with each evaluation)
from .sqlite import Key

__all__ = ["Store", "get_store", "Key", "digest_bytes"]


# -- opening: a working store, or a degraded one saying why not ---------------------------------

def _damaged(e: BaseException) -> bool:
    # OperationalError is a DatabaseError too, but means "cannot do it now"
    # (locked, read-only, I/O, full); the others mean the file's content is bad.
    if isinstance(e, UnicodeDecodeError):
        return True  # SQLite's own message quoting a garbled schema does not even decode
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)


def open_store(path: Path) -> Any:
    """A ``Store``, or a ``ReadOnlyStore``/``NoStore`` saying why not (see ``health``'s module doc)."""
    from .health import NoStore, check_exposure

    root = Path(path)
    if root.exists() and not root.is_dir():
        return NoStore(root, StoreUnavailable(
            "not-a-directory", f"the store location {root} is a file, not a directory (check MEMOLAB_STORE or "
            "configure(store=...)): results are computed but not stored"))
    try:
        store = Store(root)
    except StoreUnavailable as e:
        return NoStore(root, e)
    except (sqlite3.Error, OSError, UnicodeDecodeError) as e:
        if _damaged(e):
            return NoStore(root, _damage(root, e))
        if not (root / "index.sqlite").is_file():
            return NoStore(root, StoreUnavailable(
                "unusable", f"the store {root} cannot be created or opened ({type(e).__name__}: {e}): results are "
                "computed but not stored"))
        try:
            return ReadOnlyStore(root, StoreUnavailable(
                "read-only", f"the store {root} cannot be written ({type(e).__name__}: {e}): stored results are "
                "served, new results are computed but not stored"))
        except StoreUnavailable as e2:
            return NoStore(root, e2)
        except (sqlite3.Error, OSError, UnicodeDecodeError) as e2:
            if _damaged(e2):
                return NoStore(root, _damage(root, e2))
            return NoStore(root, StoreUnavailable(
                "unusable", f"the store {root} can be neither written ({e}) nor read ({e2}): results are computed "
                "but not stored"))
    check_exposure(root)
    return store


def _damage(root: Path, e: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        "damaged", f"the store index {root / 'index.sqlite'} is damaged ({e}): results are computed but not "
        f"stored; `memolab --store {root} doctor --repair` moves it aside and rebuilds it")


class ReadOnlyStore(Store):
    """Serves what is stored; a miss raises ``problem`` so the caller computes without storing."""

    lease_free = False  # a miss raises ``problem`` from ``acquire``: computed, not stored

    def __init__(self, root: Path, problem: StoreUnavailable) -> None:
        from .health import ReadOnlyBlobFolder, ReadOnlyIndex  # (health is imported only for a degraded store)

        self.index_class, self.blob_class = ReadOnlyIndex, ReadOnlyBlobFolder
        self.problem = problem
        super().__init__(root)

    def try_acquire(self, key: Key, owner: str, force: bool = False, on_owner: Any = None,
                    **kw: Any) -> tuple[str, dict[str, Any] | None]:
        row = None if force else self.index.lookup(key)
        if row is None:
            raise self.problem  # a miss: computed, not stored (no lease to take)
        return "hit", row

    acquire = try_acquire  # type: ignore[assignment]  # (its options by keyword: on_owner, and looked_up in **kw)

    def release(self, key: Key, owner: str) -> None:
        pass

    def save(self, *a: Any, **k: Any) -> int:
        raise self.problem

    def mark_corrupt(self, key: Key, row: dict[str, Any], reason: str | None = None, status: str = "corrupt") -> None:
        self.forget_key(key)

    def count_hit(self, eval_id: int) -> None:
        pass

    def flush_hits(self) -> None:
        pass

    def write_rider(self, rider: Callable[[sqlite3.Connection], None]) -> None:
        pass  # a miss record is advisory: a store that can only be read keeps none

    def clear(self, fn: str | None = None) -> int:
        raise self.problem

    def collect_garbage(self, dry_run: bool = False) -> tuple[int, int]:
        if dry_run:
            return super().collect_garbage(dry_run=True)
        raise self.problem


_stores: dict[tuple[str, int, Any], Store] = {}
_stores_lock = threading.Lock()


def _retire_replaced(old: config.Settings, new: config.Settings) -> None:
    """``configure()`` replaced the team store it had set: the team stores opened for the
    old one are no longer handed out, so they stop their background threads (uploader,
    probes) and go quiet. Otherwise they live on for the life of the process, probing a
    team store nobody uses and warning when it goes away. Their queued uploads stay
    queued in their local store: the next process with that team store, or
    ``memolab sync``, sends them. Team stores configured by the environment or a
    pyproject.toml are not touched."""
    gone_index = old.remote if old.remote and new.remote != old.remote else None
    gone_blobs = old.remote_blobs if old.remote_blobs and new.remote_blobs != old.remote_blobs else None
    if gone_index is None and gone_blobs is None:
        return
    with _stores_lock:
        keys = [k for k in _stores if k[2] is not None and k[1] == config.pid()
                and ((gone_index is not None and k[2][0] == gone_index)
                     or (gone_blobs is not None and k[2][1] == gone_blobs))]
        retired = [_stores.pop(k) for k in keys]
    for s in retired:
        retire = getattr(s, "retire", None)
        if retire is not None:
            retire()


config.on_configure.append(_retire_replaced)


def get_store(path: str | os.PathLike[str] | None = None) -> Store:
    """The store for ``path`` (default: the configured one), shared per process.

    Never raises for a store that cannot be used: see ``open_store``
    (only a store location that cannot be one, a URL, raises ``StoreConfigError``)."""
    found: list[str] = []

    def workspace() -> str:  # (searched once for both: the store's location and the team store's settings)
        if not found:
            found.append(config.workspace_dir())
        return found[0]

    p = Path(path) if path is not None else config.store_path(workspace)
    remote = config.remote(workspace)  # a team store configured: a TeamStore (team/layered.py) in front of it
    # (its real path, what ``Path.resolve`` returns, and its stat, asked of one descriptor: ``mounts.located``)
    found_at = mounts.located(os.fspath(p))
    k = (found_at[0] if found_at is not None else str(p.absolute()), config.pid(), remote)
    s = _stores.get(k)
    # (a degraded store, ``ReadOnlyStore`` or ``NoStore``, has a ``problem``; a working one, local or team, has none)
    if s is None or hasattr(s, "problem") and s._generation != config.generation():
        with _stores_lock:
            s = _stores.get(k)
            if s is None or hasattr(s, "problem") and s._generation != config.generation():
                # A store that cannot be used degrades (read-only, or none at all) instead
                # of raising: the caller still gets its value. Degraded stores are opened
                # again after ``configure()``.
                s = _open(p, found_at[1] if found_at is not None else None)
                # once per store and process: SQLite is not safe on NFS (k[0]: the real path, resolved above)
                if found_at is not None:
                    mounts.warn_if_network(p, found_at[0], found_at[1].st_dev)
                else:
                    mounts.warn_if_network(p)
                if remote is not None and type(s) is Store:
                    s = _team_store(s, remote)
                _stores[k] = s
                s._generation = config.generation()
    return s


#: What puts a team store in front of a local one when a team store is configured
#: (``config.remote()``): a dotted path, imported on first use. The store package never
#: imports the team layer (which is built on it); the team layer is a plug-in here.
TEAM_STORE_FACTORY = "memolab.team.layered:layered"


def _team_store(store: Store, remote: tuple[str, str | None]) -> Any:
    module, _, name = TEAM_STORE_FACTORY.partition(":")
    return getattr(importlib.import_module(module), name)(store, remote)


def forget_open_stores(root: Path) -> None:
    """This process's open stores of ``root`` are handed out no more: later calls open it
    afresh (``doctor --repair`` replaced its index)."""
    with _stores_lock:
        for k in [k for k, s in _stores.items() if Path(getattr(s, "root", "")) == root]:
            _stores.pop(k, None)


def close_open_stores(under: Path) -> int:
    """Close this process's open stores whose root lies under ``under`` and hand them out no
    more; how many. A process that opens many short-lived stores (a test session: a store per
    test) otherwise keeps every one's index open, three descriptors each, until it exits."""
    under = Path(under).resolve()
    with _stores_lock:
        keys = [k for k, s in _stores.items() if Path(k[0]) == under or under in Path(k[0]).parents]
        closing = [_stores.pop(k) for k in keys]
    for s in closing:
        close = getattr(s, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # stores of any backend (a team store's PostgreSQL, S3 clients)
                swallowed("store: close_open_stores")  # a store that cannot even close holds nothing worth an error here
    return len(closing)


def _open(p: Path, st: os.stat_result | None = None) -> Any:
    """``open_store(p)``, without importing ``health`` (degraded stores, repair: about 0.5 ms of the
    first call of every script) for a store that opens cleanly. Any failure here goes to
    ``open_store``, which opens the store afresh and decides what the failure means. ``st``: ``p``'s
    stat where the caller has just taken it (``get_store``), else it is asked."""
    try:
        store = Store(p) if (S_ISDIR(st.st_mode) if st is not None else p.is_dir()) else None
    except Exception:  # any failure goes to open_store, which opens the store afresh and says what it means
        swallowed("store: _open")
        store = None
    if store is None:
        return open_store(p)
    if signing.secret() is None and perms.writable_by_others(p, st):  # (``st``: this opening's, when given)
        from .health import check_exposure

        check_exposure(p)  # warns (once per process)
    return store
