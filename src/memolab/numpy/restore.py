"""numpy's objects put back as a memoized body left them (``memolab.inputs.mutations``): an array is copied
into in place (its views stay views of it), a ``Generator`` or ``RandomState`` takes the stored state.
Registered the first time a numpy object is put back (``hooks.LAZY_HOOKS["restoring"]``)."""
from __future__ import annotations

from typing import Any

from ..inputs.mutations import CannotRestore, put_replace, register_restorer


def register() -> None:
    """numpy arrays: copied into in place (their views stay views of them)."""
    import numpy as np

    def put_array(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
        memo[id(stored)] = live
        if live.shape != stored.shape or live.dtype != stored.dtype:
            raise CannotRestore(path, f"an array of shape {live.shape} cannot take the shape {stored.shape} in place")
        if not live.flags.writeable:
            raise CannotRestore(path, "the array is read-only")
        np.copyto(live, stored, casting="no")
        return live

    register_restorer(np.ndarray, put_array, leaf=True)
    register_restorer(np.generic, put_replace, leaf=True)
    register_restorer(np.random.Generator, _put_generator_np)
    register_restorer(np.random.RandomState, _put_random_state)


def _put_generator_np(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    live.bit_generator.state = stored.bit_generator.state
    return live


def _put_random_state(live: Any, stored: Any, memo: dict[int, Any], path: str) -> Any:
    memo[id(stored)] = live
    live.set_state(stored.get_state())
    return live
