"""The connection to the team store and whether it is up.

Offline-first: the first failure of any team-store operation (a refused or timed
out connection, a server gone) marks the team store down for this process. That
first failure costs at most the configured timeout (``remote_timeout``, 10 s by
default: the connect and read timeouts of psycopg and boto3); it is reported by
ONE warning, and from then on callers do not touch the network at all: they work
on the local store. Only the background uploader probes the team store again,
with a growing interval, and marks it up when it answers; callers never wait
for a probe.

A configuration problem (a team schema this memolab does not support) disables
the team store for the process, with its message, instead of being retried.
"""
from __future__ import annotations

import sqlite3
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import MemolabWarning, RemoteUnavailable, StoreConfigError, StoreMiss, swallowed

T = TypeVar("T")

#: seconds between probes of a team store that is down: doubling from the first to the last
PROBE_FIRST, PROBE_MAX = 2.0, 60.0


class Offline(Exception):
    """Internal: the team store is not used for this operation (down, or disabled)."""


class Failed(Offline):
    """Internal: the team store answered with an error that is not an outage (a bug, a
    constraint, a permission): this operation goes without it, the store is not marked down."""


def open_index(url: str, timeout: float) -> Any:
    """The team index for ``url``: ``postgresql://…`` (team.pg) or ``sqlite:///path`` (one host, dev)."""
    low = url.lower()
    if low.startswith(("postgresql://", "postgres://")):
        from .pg import PgIndex

        return PgIndex(url, timeout=timeout)
    if low.startswith("sqlite://"):
        from ..store.sqlite import Index

        path = Path(url[len("sqlite://"):]).expanduser()
        if not path.parent.is_dir():  # a shared folder not mounted: unreachable, not a place to create
            raise RemoteUnavailable(f"team index folder {path.parent} does not exist")
        return Index(path)
    raise StoreConfigError(f"MEMOLAB_REMOTE={url!r}: the team index must be postgresql://… (or sqlite:///path "
                           "for one host)")


def open_remote_blobs(url: str, timeout: float) -> Any:
    from .blobs import open_blobs

    return open_blobs(url, timeout=timeout)


class Link:
    def __init__(self, index_url: str, blobs_url: str, timeout: float) -> None:
        self.index_url = index_url
        self.blobs_url = blobs_url
        self.timeout = timeout
        self._index: Any = None
        self._blobs: Any = None
        self._lock = threading.Lock()
        #: None while up; else when it went down
        self.down_since: float | None = None
        self.last_error: str | None = None
        self.probe_at = 0.0
        self._interval = PROBE_FIRST
        #: a configuration problem: the team store is not used by this process at all
        self.disabled: str | None = None
        self._warned = False
        self._warned_error = False
        #: an operation succeeded in this process (exit work never opens a first connection)
        self.contacted = False
        #: says how many results are queued (for the warning); set by the TeamStore
        self.queued: Callable[[], int] = lambda: 0
        #: asked to probe when a probe is due (the uploader thread does it)
        self.on_probe_due: Callable[[], None] = lambda: None

    # -- the two halves, opened on first use -----------------------------------------------
    @property
    def index(self) -> Any:
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = open_index(self.index_url, self.timeout)
        return self._index

    @property
    def blobs(self) -> Any:
        if self._blobs is None:
            with self._lock:
                if self._blobs is None:
                    self._blobs = open_remote_blobs(self.blobs_url, self.timeout)
        return self._blobs

    # -- state ---------------------------------------------------------------------------
    def usable(self) -> bool:
        """May a caller use the team store now? Never blocks; asks for a probe when one is due."""
        if self.disabled is not None:
            return False
        if self.down_since is None:
            return True
        if time.monotonic() >= self.probe_at:
            self.on_probe_due()
        return False

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` against the team store; ``Offline`` if it is down or goes down now."""
        if self.disabled is not None or self.down_since is not None:
            raise Offline()
        return self.attempt(fn)

    def attempt(self, fn: Callable[[], T]) -> T:
        """``fn()`` whatever the state (the uploader's probes, ``sync``); failures mark it down."""
        if self.disabled is not None:
            raise Offline()
        try:
            out = fn()
            self.contacted = True
            return out
        except StoreMiss:
            raise  # a blob that does not verify: the remote answered, the answer is refused
        except StoreConfigError as e:
            self.disable(str(e))
            raise Offline() from e
        except (RemoteUnavailable, OSError, sqlite3.OperationalError, TimeoutError) as e:
            self.went_down(e)
            raise Offline() from e
        except Exception as e:  # a team-store failure must never fail a user's call
            self.last_error = f"{type(e).__name__}: {e}"
            if not self._warned_error:
                self._warned_error = True
                warnings.warn(f"memolab: team store error ({self.last_error}): this operation works locally",
                              MemolabWarning, stacklevel=3)
            raise Failed() from e

    def went_down(self, e: BaseException) -> None:
        with self._lock:
            first = self.down_since is None
            if first:
                self.down_since = time.time()
                self._interval = PROBE_FIRST
            else:
                self._interval = min(self._interval * 2, PROBE_MAX)
            self.probe_at = time.monotonic() + self._interval
            self.last_error = f"{type(e).__name__}: {e}"
            # connections of a server that went away are not reused
            self._index = None
            self._blobs = None
        if first and not self._warned:
            self._warned = True
            try:
                n = self.queued()
            except Exception:  # inside the handler of a team failure: it must never become the user's
                swallowed("team.link: Link.went_down")
                n = 0
            warnings.warn(f"memolab: team store unreachable ({self.last_error}): working locally; {n} result(s) "
                          "queued for upload (uploaded in the background once it is back, or by `memolab sync`)",
                          MemolabWarning, stacklevel=2)

    def came_back(self) -> None:
        with self._lock:
            self.down_since = None
            self._interval = PROBE_FIRST

    def disable(self, why: str) -> None:
        if self.disabled is None:
            self.disabled = why
            warnings.warn(f"memolab: team store not used: {why}. Working locally.", MemolabWarning, stacklevel=2)

    def retire(self) -> None:
        """Never used again by this process (its store was replaced): like ``disable``, silently."""
        if self.disabled is None:
            self.disabled = "replaced by configure()"
        with self._lock:
            self._index = None  # connections closed as they are collected
            self._blobs = None

    def probe(self) -> bool:
        """Is the team store back? Both halves are asked (bounded by the timeout)."""
        def ask() -> None:
            self.index.lookup(("", "", "", ""))
            ping = getattr(self.blobs, "ping", None)
            if ping is not None:
                ping(self.timeout)

        try:
            self.attempt(ask)
        except Offline:
            return False
        self.came_back()
        return True
