"""The key of an evaluation: what a stored result is found by. One home for the concept (the
store's tables, the team store, leases, marks, lineage and the faces all name its four fields).

A ``NamedTuple``: it stays a tuple, so it is an SQL parameter sequence and a dict key as before,
equal to (and hashing as) the plain tuple a row gives; JSON writes it as the same list. It is
never part of a digest and never pickled into the store."""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["Key", "key_of", "make"]


class Key(NamedTuple):
    #: the function's canonical name (``module:qualname``)
    fn: str
    #: the digest of the code it depends on (``codegraph``)
    code: str
    #: the digest of its arguments (``hashing.hash_arguments``)
    args: str
    #: the key schema the digests were made under (``hashing.KEY_SCHEMA``)
    schema: str


#: ``Key`` from one tuple, without ``Key(...)``'s Python-level ``__new__`` frame: for the one key
#: every call of a memoized function makes (``memo``), where that frame would be a cost of every hit
make = functools.partial(tuple.__new__, Key)


def key_of(row: Mapping[str, Any]) -> Key:
    """The key of an evaluation's row (a dict or ``sqlite3.Row`` with its four key columns)."""
    return Key(row["fn"], row["code"], row["args"], row["schema"])
