"""Client-side deadlines for blocking network calls (the team index's PostgreSQL sessions).

A server-side ``statement_timeout`` bounds a statement the server is running; it cannot
bound a network that went silent after connecting (a partition, a frozen host, a
middlebox black-holing the flow): the kernel acknowledges nothing is wrong and the
client waits for an answer forever. ``Watchdog`` bounds that wait: an operation arms a
deadline for its socket; one daemon thread shuts the socket down when a deadline
passes, which wakes the blocked caller with a connection error (the connection is then
broken and never reused). Arming and disarming cost a lock and a dict operation: no
thread per call.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable

from ..errors import swallowed


class Armed:
    """One armed deadline; ``fired`` tells whether the watchdog cut the socket."""

    __slots__ = ("at", "fd", "fired")

    def __init__(self, at: float, fd: int) -> None:
        self.at = at
        self.fd = fd
        self.fired = False


def shutdown_fd(fd: int) -> None:
    """Shut the socket ``fd`` down (both ways) without closing ``fd`` (its owner does)."""
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        swallowed("team.deadline: shutdown_fd")
    finally:
        s.close()


class Watchdog:
    def __init__(self, kill: Callable[[int], None] = shutdown_fd) -> None:
        self._kill = kill
        self._cv = threading.Condition()
        self._armed: dict[int, Armed] = {}  # by the arming thread's ident: one operation per thread
        self._thread: threading.Thread | None = None
        self._next: float | None = None

    def arm(self, fd: int, seconds: float) -> Armed:
        a = Armed(time.monotonic() + seconds, fd)
        with self._cv:
            self._armed[threading.get_ident()] = a
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="memolab-team-deadlines", daemon=True)
                self._thread.start()
            elif self._next is None or a.at < self._next:
                self._cv.notify()
        return a

    def disarm(self, a: Armed) -> bool:
        """Done with ``a``; True if it fired (the socket was cut)."""
        with self._cv:
            if self._armed.get(threading.get_ident()) is a:
                del self._armed[threading.get_ident()]
            return a.fired

    def _loop(self) -> None:
        with self._cv:
            while True:
                now = time.monotonic()
                for ident, a in list(self._armed.items()):
                    if a.at <= now:
                        a.fired = True
                        del self._armed[ident]
                        self._kill(a.fd)
                self._next = min((a.at for a in self._armed.values()), default=None)
                self._cv.wait(None if self._next is None else max(0.001, self._next - now))


#: the process's watchdog (its thread starts on first use)
WATCHDOG = Watchdog()


def _after_fork() -> None:
    # a child has no watchdog thread, and may have been forked while that thread held the
    # condition's lock: start from a fresh watchdog rather than wait on a lock nobody releases
    WATCHDOG.__init__(WATCHDOG._kill)  # type: ignore[misc]  # re-initialised in a forked child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
