"""The version of the local index's schema, and the refusal of an index a newer memolab wrote.

Its own module, below ``sqlite`` (which migrates to it) and ``health`` (which reads
an index without migrating it), so that neither imports the other for it.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..errors import StoreUnavailable

__all__ = ["SCHEMA_VERSION", "newer_schema", "check_schema"]

#: 1: the first format (its version lives in ``meta`` only).
#: 2: small results inline (``evaluations.inline``), the miss-explanation indexes,
#:    and the version mirrored in SQLite's ``user_version`` header field, so that
#:    opening a current store is one header read instead of any schema work.
#: An older memolab refuses a version-2 store (it reads ``meta``): it would take
#: inline rows for rows whose blobs are missing and mark them corrupt.
SCHEMA_VERSION = 2


def newer_schema(path: Path, version: Any) -> StoreUnavailable:
    return StoreUnavailable(
        "newer-schema", f"{path} was written by a newer memolab (store schema {version}, this memolab reads "
        f"{SCHEMA_VERSION}): results are computed but not stored; upgrade memolab to use this store")


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Raise ``StoreUnavailable('newer-schema')`` for an index written by a newer memolab."""
    has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    if not has_meta:
        return
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    try:
        newer = row is not None and int(row[0]) > SCHEMA_VERSION
    except (TypeError, ValueError):
        newer = True  # a version we cannot even parse is not one we wrote
    if newer:
        raise newer_schema(path, row[0])
