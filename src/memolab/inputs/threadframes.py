"""Other threads' frames, read where no deadlock can come of it, and the bounded wait for
other threads to leave a method whose class was just swapped.

``globalrng`` swaps ``random``'s global instance's class while a body computes and other
threads run (their draws are recorded, not the body's); a thread already inside one of that
class's methods may hold a primitive looked up before the swap, so a body's start waits for
it to leave (``settle``). ``torch.main_first`` reads the same frames. Neither reads any state
of ``globalrng``: the code of the swapped classes' methods is handed in.
"""
from __future__ import annotations

import threading
import types
from typing import Any

__all__ = ["thread_frames", "settle", "SETTLE_S"]


#: True while a garbage collection runs, in any thread (``_collection_phase``)
_collecting = False


def _collection_phase(phase: str, info: dict[str, Any]) -> None:
    global _collecting
    _collecting = phase == "start"


def thread_frames() -> dict[int, Any] | None:
    """``sys._current_frames()``, with no collection while it runs: it allocates while it holds
    the runtime's list of threads, and a finalizer a collection runs there (a ``threading.local``'s
    dealloc) takes that lock again: a deadlock in the CPython releases without the fix of
    python/cpython#106883 (CI's 3.11.7 hung in it). A program that disabled collections keeps
    them disabled.

    None while a collection is in progress in another thread: that thread may be inside its own
    ``sys._current_frames()`` (Dask's profiler calls it every 10 ms), holding that lock while the
    collection's callbacks let other threads run; a second caller then waits for the lock while
    holding the interpreter's, and neither moves (seen: a Dask worker hung in ``settle``). A
    callback first in ``gc.callbacks``, installed at the first call, says when one runs; callers
    treat None as "cannot look now"."""
    import gc
    import sys

    if _collection_phase not in gc.callbacks:
        gc.callbacks.insert(0, _collection_phase)
    if _collecting:
        return None
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


#: how long a body's start waits for other threads to leave a method begun before the swap
SETTLE_S = 0.05


def settle(method_codes: set[Any]) -> None:
    """Wait (bounded) until every other thread that was inside a method of a class just
    swapped (``method_codes``: the code of its own methods) has left that call: such a call
    may hold a primitive it looked up before the swap (``getrandbits = self.getrandbits`` in
    ``Random._randbelow``), whose draws no record would see. A thread still inside at the
    deadline makes its draws the body's."""
    import time

    me = threading.get_ident()

    def inside() -> dict[int, Any] | None:
        frames = thread_frames()
        if frames is None:
            return None  # a collection runs in another thread: not now
        out = {}
        for tid, top in frames.items():
            f: types.FrameType | None = top
            while f is not None and tid != me:
                if f.f_code in method_codes:
                    out[tid] = f  # the outermost such frame: left last
                f = f.f_back
        return out

    deadline = time.monotonic() + SETTLE_S
    begun = inside()
    while begun is None and time.monotonic() < deadline:
        time.sleep(0.0002)
        begun = inside()
    while begun and time.monotonic() < deadline:
        time.sleep(0.0002)
        now = thread_frames()
        if now is None:
            continue
        for tid in list(begun):
            f = now.get(tid)
            while f is not None and f is not begun[tid]:
                f = f.f_back
            if f is None:  # the call has returned (a held frame object is never reused)
                del begun[tid]
