"""Live handles refused as arguments, each with what to pass instead (docs/hashing.md, "Live handles").

A live handle is an object whose meaning is outside itself: a connection (the rows
of a database that change under it), an Optuna ``Trial`` or ``Study`` (a run of a
study, its storage). Keyed by what pickle would save, each made a key that never
repeated (a ``Trial``: one stored result per trial, never a hit) or was refused
with a message that said nothing of what to do. Each is refused with a
``HashError`` naming its path and what to pass instead, as Lightning's ``Trainer``
is (``memolab.lightning.keys``). Registered from ``memolab/settings/hooks.py`` the first time
a type of their library is hashed: importing this package imports none of them.
"""
from __future__ import annotations

from typing import Any

from ..errors import HashError
from ..hashing import Encoder, Handler


def refuse_live(what: str, why: str, instead: str) -> Handler:
    """A handler refusing ``what`` (``"an Optuna Trial"``) for ``why``, saying to pass ``instead``."""
    def handler(enc: Encoder, obj: Any) -> None:
        raise HashError(f"{what} is a live handle, not a value: {why}. Pass {instead} instead, or leave the "
                        f"argument out with @memo(ignore=[...]) (docs/hashing.md, \"Live handles\")", "", obj)

    return handler
