"""``IN (?,?,…)`` lists: the one way memolab puts a list of values into a query.

SQLite refuses a statement with more variables than its limit (999 before 3.32), and a very
long list costs more to prepare than it saves; so a list of any length is sent in chunks of
``CHUNK``. PostgreSQL's driver (psycopg) writes its parameters ``%s`` where SQLite writes ``?``:
``mark`` says which."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

__all__ = ["CHUNK", "chunks", "placeholders"]

T = TypeVar("T")

#: values per statement: below SQLite's oldest limit (999) with room for a query's other parameters
CHUNK = 500


def placeholders(n: int, mark: str = "?") -> str:
    """``"?,?,?"`` for ``n`` values (``""`` for none: SQLite reads ``IN ()`` as matching nothing)."""
    return ",".join([mark] * n)


def chunks(values: Sequence[T], size: int = CHUNK, mark: str = "?") -> Iterator[tuple[str, list[T]]]:
    """(the placeholders of a chunk, its values) for each run of at most ``size`` of ``values``,
    in order; nothing for no values. ``for q, part in chunks(ids): c.execute(f"… IN ({q})", part)``."""
    if size < 1:
        raise ValueError(f"chunks: size must be at least 1, not {size}")
    for i in range(0, len(values), size):
        part = list(values[i:i + size])
        yield placeholders(len(part), mark), part
