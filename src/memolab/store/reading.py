"""Opening a store for a command that only reads it: an older file is read as it is, never migrated.

``memolab ls``, ``show``, ``why``, ``runs``, ``gc --dry-run``, ``doctor`` (without ``--repair``),
``export-tb`` and ``ui`` used to open the store as a memoized call does, which brings a file of an
older schema up to date: after a ``memolab ls`` the older memolab still used on the project
refused the store. Here a file of an older schema is opened read-only instead (``ReadOnlyStore``:
SQLite's ``mode=ro``, so nothing can be written even by mistake) and read in the current shape
through ``schema.read_shims``. A current store is opened as usual (``get_store``).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailable
from . import ReadOnlyStore, get_store
from .schema import SCHEMA_VERSION, file_version

__all__ = ["open_for_reading", "older_version"]


def older_version(index: Path) -> int | None:
    """The schema version of the index file ``index`` if it is older than this memolab's (a
    store another memolab wrote and this one has not migrated), else None. Read-only: nothing is
    created or written (a file that cannot be read this way is for ``get_store`` to judge)."""
    try:
        conn = sqlite3.connect(f"{Path(index).absolute().as_uri()}?mode=ro", uri=True, timeout=60.0)
    except sqlite3.Error:
        return None
    try:
        v = file_version(conn)
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return v if 0 < v < SCHEMA_VERSION else None


def open_for_reading(root: Path) -> Any:
    """The store at ``root`` for a command that only reads it (see the module's doc)."""
    root = Path(root)
    v = older_version(root / "index.sqlite")
    if v is None:
        return get_store(root)
    return ReadOnlyStore(root, StoreUnavailable(
        "older-schema", f"the store {root} was written by an older memolab (store schema {v}; this memolab writes "
        f"{SCHEMA_VERSION}): it is read as it is and not changed, so that memolab keeps working; a memoized call, "
        "`memolab gc`/`clear` or `memolab upgrade` bring it up to date"))
