"""Ray (docs/team.md, "Ray").

A memoized function called in a Ray task is an ordinary call in the worker process (its
store, its leases), pickled by reference or by value like any memo (``MemoFunction.__reduce__``).
What Ray adds: its workers are killed, never exit, so no ``atexit`` handler of theirs runs,
and the usage a worker's hits earned (hit counts, last use: what ``gc --older-than`` keeps
results by) was never written. ``killed_at_exit`` tells the store so
(``hooks.LAZY_HOOKS["exits"]``), and a worker's store writes its usage within
``store.usage.PROMPT_SECONDS`` of each hit, on a thread of its own.

Importing this module imports Ray; ``import memolab`` does not (the hook runs only once
``ray`` is in ``sys.modules``).
"""
from __future__ import annotations

from ..errors import swallowed

__all__ = ["killed_at_exit"]


def killed_at_exit() -> bool:
    """Is this process a Ray worker (a task's or an actor's, not the driver)?"""
    import ray

    try:
        return bool(ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE)
    except Exception:  # an API that moved: the store then writes usage as in any process
        swallowed("ray: killed_at_exit")
        return False
