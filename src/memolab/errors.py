"""Exceptions and warnings raised by memolab.

They live in a module of their own so that every other module can import them
without pulling in anything heavy.
"""
from __future__ import annotations

from collections.abc import Callable


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
