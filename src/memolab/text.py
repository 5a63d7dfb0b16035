"""Short, bounded text of any value, for tables, explanations and summaries.

Its own module, below everything that shows values (``memo``, ``summary``,
``tracking``), so none of them imports another for it.
"""
from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["short_repr"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 8
_repr.maxlevel = 3


def short_repr(obj: Any) -> str:
    """A one-line, bounded repr for tables and explanations."""
    try:
        text = _repr.repr(obj)
    except Exception:
        return f"<{type(obj).__qualname__}>"
    return " ".join(text.split())
