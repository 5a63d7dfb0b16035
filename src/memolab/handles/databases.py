"""Database connections, cursors, engines and sessions are live handles: refused.

What a function reads through one is the rows of a database that change under it;
the handle itself holds none of them (sqlite3 and psycopg refused to be pickled,
with a message that said nothing of what to pass; an SQLAlchemy ``Engine`` the same).
"""
from __future__ import annotations

import sys

from .. import hashing
from . import refuse_live

WHY = "the rows read through it change under it and it holds none of them"


def refuse(what: str, instead: str = "the rows it reads (a query's result)") -> hashing.Handler:
    return refuse_live(what, WHY, instead)


def register_sqlite3() -> None:
    """The ``sqlite3`` hashing hook (``memolab/settings/hooks.py``)."""
    import sqlite3

    file = "the rows it reads (a query's result), or the database file as memolab.File(path)"
    hashing.register_handler(sqlite3.Connection, refuse("a sqlite3 Connection", file))
    hashing.register_handler(sqlite3.Cursor, refuse("a sqlite3 Cursor", file))
    blob = getattr(sqlite3, "Blob", None)  # Python 3.11+
    if blob is not None:
        hashing.register_handler(blob, refuse("a sqlite3 Blob", file))


def register_psycopg() -> None:
    """The ``psycopg`` hashing hook (``memolab/settings/hooks.py``)."""
    psycopg = sys.modules["psycopg"]
    hashing.register_handler(psycopg.BaseConnection, refuse("a psycopg connection"))
    for name in dir(psycopg):
        if name.endswith("Cursor") and isinstance(getattr(psycopg, name), type):
            hashing.register_handler(getattr(psycopg, name), refuse(f"a psycopg {name}"))


def _sqlalchemy_orm() -> None:
    orm = sys.modules["sqlalchemy.orm"]
    hashing.register_handler(orm.Session, refuse("an SQLAlchemy Session"))


def register_sqlalchemy() -> None:
    """The ``sqlalchemy`` hashing hook (``memolab/settings/hooks.py``): engines and connections now, sessions
    once ``sqlalchemy.orm`` is imported (registering imports nothing the user did not)."""
    engine = sys.modules["sqlalchemy.engine"]
    hashing.register_handler(engine.Engine, refuse("an SQLAlchemy Engine"))
    hashing.register_handler(engine.Connection, refuse("an SQLAlchemy Connection"))
    if "sqlalchemy.orm" in sys.modules:
        _sqlalchemy_orm()
    else:
        hashing.register_lazy("sqlalchemy.orm", _sqlalchemy_orm)
