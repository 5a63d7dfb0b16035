"""Exceptions and warnings raised by memolab.

They live in a module of their own so that every other module can import them
without pulling in anything heavy.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class MemolabError(Exception):
    """Base class of every error memolab raises on its own behalf."""


class HashError(MemolabError, TypeError):
    """An argument (or a part of it) cannot be turned into a deterministic digest.

    ``path`` names where the offending object sits inside the arguments, e.g.
    ``args['loader'].dataset.gen``. We never fall back to a random or constant
    key: that is how other caches return wrong results.
    """

    def __init__(self, reason: str, path: str = "", obj: object = None) -> None:
        self.reason = reason
        self.path = path
        self.obj = obj
        super().__init__(self._message())

    def _message(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason

    def for_user(self) -> HashError:
        """The same error with the remedies in its message, as a call of a memoized function raises it
        (``@memo(ignore=[...])``, ``memolab.register_opaque``), marked for ``trimmed``: the frames of
        memolab's hashing are no use to the caller (they stay in ``internal_traceback``)."""
        import re

        if getattr(self, "hinted", False):
            return self
        m = re.match(r"args\['([^']+)'\]", self.path)
        name = m.group(1) if m else None
        kind = type(self.obj)
        tname = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__qualname__
        hint = [f"if {name!r} cannot change the result, leave it out of the key: @memo(ignore=[{name!r}])"] if name \
            else []
        if self.obj is not None and ";" not in self.reason:  # a reason with its own advice (a live handle) keeps it
            hint.append(f"if no {tname} can change a result (a logger, a client, a lock), "
                        f"memolab.register_opaque({tname}) leaves every one out of keys")
        if ";" not in self.reason:
            hint.append("else pass what it is made from (docs/cache-rules.md, 'Arguments')")
        self.args = (self._message() + "\n  " + ";\n  ".join(hint),)
        self.hinted, self.trim = True, True
        return self

    def at(self, prefix: str) -> HashError:
        """Return the same error with ``prefix`` put in front of its path."""
        self.path = prefix + self.path
        self.args = (self._message(),)
        return self


class StoreMiss(MemolabError):
    """A stored result cannot be used; the caller recomputes. ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class CodeChanged(StoreMiss):
    """A stored result refers to code (a function or class) that has since changed."""


class CorruptBlob(StoreMiss):
    """A blob is missing, truncated, or does not match its digest."""


class Unloadable(StoreMiss):
    """A stored result's own code (``__setstate__``, a reconstructor) refused to rebuild it."""


class NotAccepted(MemolabError, ValueError):
    """``accept`` recorded nothing: nothing to accept (a hit, a miss not caused by code alone), or no
    confirmation was given. The message says which."""


class StoreConfigError(MemolabError, ValueError):
    """The configured store location cannot be a store (a URL of an unsupported backend)."""


class StoreUnavailable(MemolabError, OSError):
    """The store cannot be used for this call (unusable, read-only, damaged, newer schema).

    A memoized call computes its value then, without storing it, and warns once.
    ``kind`` names the problem: 'not-a-directory', 'unusable', 'read-only',
    'newer-schema', 'damaged'.
    """

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


class RemoteUnavailable(MemolabError, OSError):
    """The team store (its index or its blob store) cannot be reached now: a
    connection refused or timed out, a server gone. Never a reason to fail a
    call: the team layer goes offline, warns once and works on the local store."""


class MemolabWarning(UserWarning):
    """Something went wrong but the caller still got a correct value."""


_warned: dict[str, set[Hashable]] = {}
_warned_lock = threading.Lock()


def warn_once(what: Hashable, message: str, stacklevel: int = 3, scope: str = "") -> None:
    """Warn with ``message`` (a ``MemolabWarning``) once per process for ``what`` within ``scope``.
    ``stacklevel`` is counted from the caller of ``warn_once``, as ``warnings.warn`` counts it from
    its own caller. The one home of "say it once": a scope's memory is dropped by ``forget_warned``
    (``codegraph.clear_caches``: a new analysis may warn again)."""
    with _warned_lock:
        seen = _warned.setdefault(scope, set())
        if what in seen:
            return
        seen.add(what)
    import warnings

    warnings.warn(message, MemolabWarning, stacklevel=stacklevel + 1)  # +1: this frame


def forget_warned(scope: str) -> None:
    """Let ``warn_once`` warn again about everything of ``scope``."""
    with _warned_lock:
        _warned.pop(scope, None)


class BlobsGone(Exception):
    """A blob an evaluation was about to refer to was collected after it was put
    (raised by an index's ``record``: put the blobs again and retry under its lock)."""


#: set by ``report`` while ``MEMOLAB_VERBOSE=2`` (or ``configure(verbose=2)``): shows a swallowed
#: exception where the ``memolab`` logger, left at its default level, would drop a DEBUG record
loud: Callable[[str], None] | None = None


def swallowed(what: str) -> None:
    """Leave evidence of the exception being handled, which memolab catches and goes on
    without ("a cache problem never fails the user's call"): ``what`` failed, logged with its
    traceback on the ``memolab`` logger at DEBUG (docs/logging.md, "Swallowed exceptions").
    Call it from inside the ``except`` block; it never raises."""
    try:
        import logging

        log = logging.getLogger("memolab")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s failed; memolab went on without it", what, exc_info=True)
        elif loud is not None:
            loud(what)
    except Exception:  # a broken handler of the program's: nothing more can be said  # noqa: S110
        pass


def trimmed(e: BaseException) -> BaseException:
    """``e`` to re-raise from the memoized function's own frame (``MemoFunction.__call__``): once,
    without the frames memolab's keying added (kept as ``e.internal_traceback``; all of them shown at
    ``MEMOLAB_VERBOSE=2``). An error the user's body raised is never touched."""
    import os

    if not getattr(e, "trim", False):
        return e
    e.trim = False  # type: ignore[attr-defined]  # once: an outer memoized call keeps the frames of the body
    if os.environ.get("MEMOLAB_VERBOSE", "").strip() == "2":
        return e
    e.internal_traceback = e.__traceback__  # type: ignore[attr-defined]
    return e.with_traceback(None)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning its caller raises point at the first frame outside memolab
    (the user's call of a memoized function, or the line of their body that made a nested one), however
    many of memolab's frames lie between: counted, never a constant that goes stale when a frame is added."""
    import os
    import sys

    pkg = os.path.dirname(os.path.abspath(__file__)) + os.sep
    f = sys._getframe(1)  # the function that calls ``warnings.warn``: stacklevel 1
    level = 1
    while f is not None and f.f_code.co_filename.startswith(pkg):
        f, level = f.f_back, level + 1  # type: ignore[assignment]
    return level
