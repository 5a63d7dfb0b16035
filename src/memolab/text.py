"""Short, bounded text of any value, for tables, explanations and summaries.

Its own module, below everything that shows values (``memo``, ``summary``,
``tracking``), so none of them imports another for it.
"""
from __future__ import annotations

import re
import reprlib
from typing import Any

__all__ = ["short_repr"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 8
_repr.maxlevel = 3

#: the address in a default repr (``<Foo object at 0x7f…>``): different in every process, so two
#: runs with equal arguments would show different values (and a run label, the arguments that
#: differ, would be nothing but addresses)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")


def short_repr(obj: Any) -> str:
    """A one-line, bounded repr for tables and explanations."""
    try:
        text = _repr.repr(obj)
    except Exception:
        return f"<{type(obj).__qualname__}>"
    return _ADDRESS.sub("", " ".join(text.split()))
