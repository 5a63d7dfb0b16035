"""The table of memolab's pickler reducers, by exact type.

``pickling`` fills it (``register_reducer``, and its lazy resolution of types it
meets); ``hashing`` reads it, because a type memolab's pickler rebuilds its own
way may not come back with the attributes it was saved with. Neither imports the
other for it, and reading it imports no pickling machinery: the table is empty
until ``memolab.pickling`` is imported.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: ``reducer(pickler, obj)`` returns a reduce tuple, or ``NotImplemented`` for pickle's own handling
Reducer = Callable[[Any, Any], Any]

#: type -> its reducer; ``None`` means "pickle's own handling" (also cached for types resolved to it)
reducers: dict[type, Reducer | None] = {}
