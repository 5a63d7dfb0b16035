"""Has anything written a private file mapping? The kernel's page table says.

A stored tensor comes back as a private (copy-on-write) mapping of its blob: no
copy, loaded at the speed of the disk. Its digest can be trusted as long as not
one page of the mapping was written — by torch (with or without a version-counter
bump), numpy, DLPack, ctypes, any code at all: the first write to a page of a
``MAP_PRIVATE`` file mapping makes the kernel give the process its own anonymous
copy of that page, and ``/proc/self/pagemap`` reports it (a present page that is
no longer a file page, or a swapped one). Reading 8 bytes per 4 KiB page costs
about 1/500 of hashing the data (measured: benchmarks/store_io.py).

Linux only; anywhere else (or where ``/proc`` cannot be read) ``untouched``
answers None and the caller rehashes.
"""
from __future__ import annotations

import os
import sys
import threading

__all__ = ["untouched"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61
_fd: int | None = None
_fd_pid = 0
_lock = threading.Lock()


def _pagemap() -> int | None:
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd is None or _fd_pid != pid:  # a forked child reads its own page table
        with _lock:
            if _fd is None or _fd_pid != pid:
                try:
                    _fd = os.open("/proc/self/pagemap", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except OSError:
                    _fd = -1
                _fd_pid = pid
    return _fd if _fd >= 0 else None


def untouched(addr: int, nbytes: int) -> bool | None:
    """True if no page of the private mapping ``[addr, addr + nbytes)`` has been written (or
    swapped out: only a written private page can be); False if one has; None if this cannot
    be told here (not Linux, no ``/proc``)."""
    if nbytes <= 0:
        return True
    if not sys.platform.startswith("linux"):
        return None
    fd = _pagemap()
    if fd is None:
        return None
    first = addr // _PAGE
    n = (addr + nbytes + _PAGE - 1) // _PAGE - first
    try:
        data = os.pread(fd, n * 8, first * 8)
    except OSError:
        return None
    if len(data) != n * 8:
        return None
    np = sys.modules.get("numpy")
    if np is not None:
        words = np.frombuffer(data, dtype=np.uint64)
        written = ((words & np.uint64(_PRESENT)) != 0) & ((words & np.uint64(_FILE)) == 0)
        return not (written.any() or ((words & np.uint64(_SWAPPED)) != 0).any())
    import array

    words_a = array.array("Q")
    words_a.frombytes(data)
    return not any((w & _PRESENT and not w & _FILE) or w & _SWAPPED for w in words_a)
